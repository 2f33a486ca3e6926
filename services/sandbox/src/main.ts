// Executable entry of the sandbox service: `tsx services/sandbox/src/main.ts`, configured by environment.
import { TackError } from "@tack/bus";
import { commonConfig } from "@tack/config";
import { initTelemetry } from "@tack/telemetry";
import { startSandboxService, type SandboxServiceOptions } from "./index.js";

// Exports spans when OTEL_EXPORTER_OTLP_ENDPOINT is set; always propagates trace context.
initTelemetry({ serviceName: "tack-sandbox" });

const env = process.env;
const number = (value: string | undefined) => (value ? Number(value) : undefined);
const options: SandboxServiceOptions = {
  natsUrl: env.NATS_URL || "nats://127.0.0.1:4222",
  namespace: env.TACK_NAMESPACE || undefined,
  image: env.TACK_SANDBOX_IMAGE || undefined,
  runtime: env.TACK_SANDBOX_RUNTIME || undefined,
  idleTimeoutMs: number(env.TACK_SANDBOX_IDLE_MS),
  replicaId: env.TACK_SANDBOX_REPLICA || undefined,
  poolSize: number(env.TACK_SANDBOX_POOL_SIZE),
  poolDir: env.TACK_SANDBOX_POOL_DIR || undefined,
};

// A local `tack up` cleans up after itself; a cluster deployment keeps sessions' containers across restarts
// (a restart with the same TACK_SANDBOX_REPLICA, by default the host name, takes them back).
const removeOnStop = env.TACK_SANDBOX_REMOVE_ON_STOP === "1";

const log = (level: string, message: string, fields: Record<string, unknown> = {}) =>
  process.stderr.write(`${JSON.stringify({ time: new Date().toISOString(), level, service: "sandbox", message, ...fields })}\n`);

try {
  const service = await startSandboxService({ ...options, natsAuth: commonConfig(env).natsAuth });
  const { namespace, runtime, image, idleTimeoutMs, replicaId } = service.options;
  log("info", "sandbox service ready", { namespace, replicaId, runtime, image, idleTimeoutMs, pool: service.pool() });
  if (service.pool().size > 0) void service.whenPoolFull().then(() => log("info", "warm pool full", { pool: service.pool() }));
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
    ? " (set by NATS_URL, TACK_NAMESPACE, TACK_SANDBOX_IMAGE, TACK_SANDBOX_RUNTIME, TACK_SANDBOX_IDLE_MS, TACK_SANDBOX_REPLICA, TACK_SANDBOX_POOL_SIZE, TACK_SANDBOX_POOL_DIR)"
    : "";
  log("error", `${(error as Error).message}${hint}`, { code: (error as TackError).code ?? "internal" });
  process.exit(1);
}
