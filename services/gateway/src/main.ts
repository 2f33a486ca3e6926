// Entry point of the gateway process: `tsx services/gateway/src/main.ts`. Reads NATS_URL,
// TACK_NAMESPACE, TACK_TENANT, TACK_API_KEY, TACK_DB, TACK_GATEWAY_HOST and TACK_GATEWAY_PORT,
// and the operator configuration (TACK_CONFIG, else <TACK_STATE_DIR>/config.yaml): tenants, policy, keys.
import { mkdirSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { commonConfig, ConfigError, loadOperatorConfig, runMain } from "@tack/config";
import { initTelemetry, logger } from "@tack/telemetry";
import { startGateway } from "./server.js";

const telemetry = initTelemetry({ serviceName: "tack-gateway" });

await runMain("gateway", async () => {
  const common = commonConfig();
  const operator = loadOperatorConfig();
  const key = process.env.TACK_API_KEY;
  if (!key && operator.keys.length === 0) {
    throw new ConfigError(`TACK_API_KEY is not set and ${operator.source ?? "the operator configuration (TACK_CONFIG)"} lists no keys: set TACK_API_KEY to the secret clients will send as \`Authorization: Bearer <key>\`, or add keys:`);
  }
  const portText = process.env.TACK_GATEWAY_PORT || "7700";
  if (!/^\d+$/.test(portText) || Number(portText) > 65_535) throw new ConfigError(`TACK_GATEWAY_PORT must be a port number 0-65535, got ${JSON.stringify(portText)}`);
  const database = resolve(process.env.TACK_DB || ".tack/tack.db");
  mkdirSync(dirname(database), { recursive: true });
  const gateway = await startGateway({
    natsUrl: common.natsUrl,
    natsAuth: common.natsAuth,
    namespace: common.namespace,
    host: process.env.TACK_GATEWAY_HOST || "127.0.0.1",
    port: Number(portText),
    // TACK_API_KEY (what `tack up` passes) is an admin key of TACK_TENANT.
    apiKeys: key ? [{ key, tenant: common.tenant, role: "admin", name: "TACK_API_KEY" }] : [],
    operator,
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
