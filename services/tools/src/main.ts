// Executable entry of the tools service: `tsx services/tools/src/main.ts` (env NATS_URL, TACK_NAMESPACE).
import { commonConfig, runMain } from "@tack/config";
import { initTelemetry } from "@tack/telemetry";
import { startToolsService } from "./service.js";

const telemetry = initTelemetry({ serviceName: "tack-tools" });
await runMain("tools", async () => {
  const service = await startToolsService({
    natsUrl: process.env.NATS_URL ?? "nats://127.0.0.1:4222",
    natsAuth: commonConfig().natsAuth,
    namespace: process.env.TACK_NAMESPACE || undefined,
  });
  return { stop: async () => { await service.stop(); await telemetry.shutdown(); } };
});
