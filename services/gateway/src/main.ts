// Entry point of the gateway process: `tsx services/gateway/src/main.ts`. Reads NATS_URL,
// TACK_NAMESPACE, TACK_TENANT, TACK_API_KEY, TACK_DB, TACK_GATEWAY_HOST and TACK_GATEWAY_PORT.
import { mkdirSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { commonConfig, ConfigError, runMain } from "@tack/config";
import { initTelemetry, logger } from "@tack/telemetry";
import { startGateway } from "./server.js";

const telemetry = initTelemetry({ serviceName: "tack-gateway" });

await runMain("tack-gateway", async () => {
  const common = commonConfig();
  const key = process.env.TACK_API_KEY;
  if (!key) throw new ConfigError("TACK_API_KEY is not set: set it to the secret clients will send as `Authorization: Bearer <key>`");
  const portText = process.env.TACK_GATEWAY_PORT || "7700";
  if (!/^\d+$/.test(portText) || Number(portText) > 65_535) throw new ConfigError(`TACK_GATEWAY_PORT must be a port number 0-65535, got ${JSON.stringify(portText)}`);
  const database = resolve(process.env.TACK_DB || ".tack/tack.db");
  mkdirSync(dirname(database), { recursive: true });
  const gateway = await startGateway({
    natsUrl: common.natsUrl,
    namespace: common.namespace,
    host: process.env.TACK_GATEWAY_HOST || "127.0.0.1",
    port: Number(portText),
    apiKeys: [{ key, tenant: common.tenant }],
    sqlitePath: database,
  });
  logger("gateway").info("listening", { url: gateway.url, namespace: common.namespace, database });
  return {
    stop: async () => {
      await gateway.stop();
      await telemetry.shutdown();
    },
  };
});
