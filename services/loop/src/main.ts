// Executable entry of the loop service: `tsx services/loop/src/main.ts`.
import { commonConfig, ConfigError, runMain } from "@tack/config";
import { initTelemetry } from "@tack/telemetry";
import { startLoopService } from "./service.js";

const telemetry = initTelemetry({ serviceName: "tack-loop" });
await runMain("loop", async () => {
  const common = commonConfig();
  const service = await startLoopService({
    natsUrl: common.natsUrl,
    namespace: common.namespace,
    ...(process.env.TACK_LEASE_TTL_MS ? { leaseTtlMs: Number(process.env.TACK_LEASE_TTL_MS) } : {}),
    ...(process.env.TACK_APPROVAL_TIMEOUT_MS ? { approvalTimeoutMs: Number(process.env.TACK_APPROVAL_TIMEOUT_MS) } : {}),
    ...(process.env.TACK_CONTEXT_WINDOW_TOKENS ? { contextWindowTokens: Number(process.env.TACK_CONTEXT_WINDOW_TOKENS) } : {}),
    ...(process.env.TACK_CONTEXT_WINDOWS ? { contextWindows: contextWindows(process.env.TACK_CONTEXT_WINDOWS) } : {}),
  });
  return { stop: async () => { await service.stop(); await telemetry.shutdown(); } };
});

/** TACK_CONTEXT_WINDOWS: a JSON object of model reference to window in tokens (the values are checked by the loop's options). */
function contextWindows(json: string): Record<string, number> {
  try {
    return JSON.parse(json) as Record<string, number>;
  } catch {
    throw new ConfigError(`TACK_CONTEXT_WINDOWS is not JSON; write an object like {"deepseek:deepseek-v4-flash": 1000000}`);
  }
}
