// Entry point of the llm service process: `tsx services/llm/src/main.ts`. Reads NATS_URL and
// TACK_NAMESPACE here; the service itself reads the `*_API_KEY` and `*_BASE_URL` variables and TACK_PRICES.
import { TackError } from "@tack/bus";
import { commonConfig, loadOperatorConfig } from "@tack/config";
import { initTelemetry } from "@tack/telemetry";
import { startLlmService } from "./service.js";

// Exports spans when OTEL_EXPORTER_OTLP_ENDPOINT is set; always propagates trace context.
initTelemetry({ serviceName: "tack-llm" });

try {
  const service = await startLlmService({
    url: process.env.NATS_URL ?? "nats://127.0.0.1:4222",
    natsAuth: commonConfig().natsAuth,
    namespace: process.env.TACK_NAMESPACE || undefined,
    // Which files `scripted:` and `replay:` may read: the operator configuration's models.script_dirs and max_script_bytes.
    scripts: loadOperatorConfig().models,
  });
  const shutdown = (signal: string) => {
    console.log(JSON.stringify({ level: "info", service: "llm", event: "service/stopping", signal }));
    service.stop().then(() => process.exit(0), (error: unknown) => {
      console.error(JSON.stringify({ level: "error", service: "llm", event: "service/stop_failed", message: (error as Error).message }));
      process.exit(1);
    });
  };
  process.once("SIGTERM", () => shutdown("SIGTERM"));
  process.once("SIGINT", () => shutdown("SIGINT"));
  console.log(JSON.stringify({ level: "info", service: "llm", event: "service/ready", namespace: process.env.TACK_NAMESPACE || "tack" }));
} catch (error) {
  const failure = TackError.from(error);
  console.error(JSON.stringify({ level: "error", service: "llm", event: "service/start_failed", code: failure.code, message: failure.message }));
  process.exit(1);
}
