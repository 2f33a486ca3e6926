// Entry point of the llm service process: `tsx services/llm/src/main.ts`. Reads NATS_URL and
// TACK_NAMESPACE here; the service itself reads the `*_API_KEY` and `*_BASE_URL` variables and TACK_PRICES.
import { commonConfig, loadOperatorConfig, runMain } from "@tack/config";
import { initTelemetry, logger } from "@tack/telemetry";
import { startLlmService } from "./service.js";

// Exports spans when OTEL_EXPORTER_OTLP_ENDPOINT is set; always propagates trace context.
const telemetry = initTelemetry({ serviceName: "tack-llm" });

await runMain("llm", async () => {
  const service = await startLlmService({
    url: process.env.NATS_URL ?? "nats://127.0.0.1:4222",
    natsAuth: commonConfig().natsAuth,
    namespace: process.env.TACK_NAMESPACE || undefined,
    // Which files `scripted:` and `replay:` may read: the operator configuration's models.script_dirs and max_script_bytes.
    scripts: loadOperatorConfig().models,
  });
  logger("llm").info("ready", { namespace: process.env.TACK_NAMESPACE || "tack" });
  return { stop: async () => { await service.stop(); await telemetry.shutdown(); } };
});
