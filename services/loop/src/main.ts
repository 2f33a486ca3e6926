// Executable entry of the loop service: `tsx services/loop/src/main.ts`.
import { commonConfig, runMain } from "@tack/config";
import { initTelemetry } from "@tack/telemetry";
import { startLoopService } from "./service.js";

const telemetry = initTelemetry({ serviceName: "tack-loop" });
await runMain("loop", async () => {
  const common = commonConfig();
  const service = await startLoopService({
    natsUrl: common.natsUrl,
    namespace: common.namespace,
    ...(process.env.TACK_LEASE_TTL_MS ? { leaseTtlMs: Number(process.env.TACK_LEASE_TTL_MS) } : {}),
  });
  return { stop: async () => { await service.stop(); await telemetry.shutdown(); } };
});
