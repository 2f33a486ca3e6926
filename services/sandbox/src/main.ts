// Executable entry of the sandbox service: `tsx services/sandbox/src/main.ts`, configured by environment.
import { TackError } from "@tack/bus";
import { commonConfig, runMain } from "@tack/config";
import { initTelemetry, logger } from "@tack/telemetry";
import { startSandboxService, type SandboxServiceOptions } from "./index.js";

// Exports spans when OTEL_EXPORTER_OTLP_ENDPOINT is set; always propagates trace context.
const telemetry = initTelemetry({ serviceName: "tack-sandbox" });

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

const log = logger("sandbox");

await runMain("sandbox", async () => {
  const service = await startSandboxService({ ...options, natsAuth: commonConfig(env).natsAuth }).catch((error: unknown) => {
    if (error instanceof TackError && error.code === "sandbox.invalid_options") {
      throw new TackError(error.code, `${error.message} (set by NATS_URL, TACK_NAMESPACE, TACK_SANDBOX_IMAGE, TACK_SANDBOX_RUNTIME, TACK_SANDBOX_IDLE_MS, TACK_SANDBOX_REPLICA, TACK_SANDBOX_POOL_SIZE, TACK_SANDBOX_POOL_DIR)`, { details: { ...error.details } });
    }
    throw error;
  });
  const { namespace, runtime, image, idleTimeoutMs, replicaId } = service.options;
  log.info("sandbox service ready", { namespace, replicaId, runtime, image, idleTimeoutMs, pool: service.pool() });
  if (service.pool().size > 0) void service.whenPoolFull().then(() => log.info("warm pool full", { pool: service.pool() }));
  return {
    stop: async () => {
      log.info(removeOnStop ? "removing this namespace's containers" : "keeping containers for the next start");
      await service.stop({ removeContainers: removeOnStop });
      await telemetry.shutdown();
    },
  };
});
