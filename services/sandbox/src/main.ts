// Executable entry of the sandbox service: `tsx services/sandbox/src/main.ts`, configured by environment.
import { TackError } from "@tack/bus";
import { initTelemetry } from "@tack/telemetry";
import { startSandboxService, type SandboxServiceOptions } from "./index.js";

// Exports spans when OTEL_EXPORTER_OTLP_ENDPOINT is set; always propagates trace context.
initTelemetry({ serviceName: "tack-sandbox" });

const env = process.env;
const idle = env.TACK_SANDBOX_IDLE_MS;
const options: SandboxServiceOptions = {
  natsUrl: env.NATS_URL || "nats://127.0.0.1:4222",
  namespace: env.TACK_NAMESPACE || undefined,
  image: env.TACK_SANDBOX_IMAGE || undefined,
  runtime: env.TACK_SANDBOX_RUNTIME || undefined,
  idleTimeoutMs: idle ? Number(idle) : undefined,
};

// A local `tack up` cleans up after itself; a cluster deployment keeps sessions' containers across restarts.
const removeOnStop = env.TACK_SANDBOX_REMOVE_ON_STOP === "1";

const log = (level: string, message: string, fields: Record<string, unknown> = {}) =>
  process.stderr.write(`${JSON.stringify({ time: new Date().toISOString(), level, service: "sandbox", message, ...fields })}\n`);

try {
  const service = await startSandboxService(options);
  const { namespace, runtime, image, idleTimeoutMs } = service.options;
  log("info", "sandbox service ready", { namespace, runtime, image, idleTimeoutMs });
  const shutdown = (signal: string) => {
    log("info", removeOnStop ? `${signal}: stopping and removing this namespace's containers` : `${signal}: stopping (containers are kept for the next start)`);
    service.stop({ removeContainers: removeOnStop }).then(
      () => process.exit(0),
      (error: unknown) => {
        log("error", `stop failed: ${(error as Error).message}`);
        process.exit(1);
      },
    );
  };
  process.once("SIGTERM", () => shutdown("SIGTERM"));
  process.once("SIGINT", () => shutdown("SIGINT"));
} catch (error) {
  const hint = error instanceof TackError && error.code === "sandbox.invalid_options"
    ? " (set by NATS_URL, TACK_NAMESPACE, TACK_SANDBOX_IMAGE, TACK_SANDBOX_RUNTIME, TACK_SANDBOX_IDLE_MS)"
    : "";
  log("error", `${(error as Error).message}${hint}`, { code: (error as TackError).code ?? "internal" });
  process.exit(1);
}
