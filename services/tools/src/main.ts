// Executable entry of the tools service: `tsx services/tools/src/main.ts` (env NATS_URL, TACK_NAMESPACE).
import { commonConfig } from "@tack/config";
import { initTelemetry } from "@tack/telemetry";
import { startToolsService, type ToolsService } from "./service.js";

const telemetry = initTelemetry({ serviceName: "tack-tools" });
let service: ToolsService;
try {
  service = await startToolsService({
    natsUrl: process.env.NATS_URL ?? "nats://127.0.0.1:4222",
    natsAuth: commonConfig().natsAuth,
    namespace: process.env.TACK_NAMESPACE || undefined,
  });
} catch (error) {
  console.error(`tack-tools: ${(error as Error).message}`);
  await telemetry.shutdown();
  process.exit(1);
}

for (const signal of ["SIGTERM", "SIGINT"] as const) {
  process.once(signal, () => {
    service
      .stop()
      .then(() => telemetry.shutdown())
      .then(
        () => process.exit(0),
        (error: unknown) => {
          console.error(`tack-tools: ${(error as Error).message}`);
          process.exit(1);
        },
      );
  });
}
