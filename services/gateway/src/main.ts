// Entry point of the gateway process: `tsx services/gateway/src/main.ts`. Reads NATS_URL,
// TACK_NAMESPACE, TACK_TENANT, TACK_API_KEY, TACK_DB, TACK_GATEWAY_HOST and TACK_GATEWAY_PORT,
// and the operator configuration (TACK_CONFIG, else <TACK_STATE_DIR>/config.yaml): tenants, policy, keys.
// TACK_DB is the session index: a SQLite file (default .tack/tack.db) or a postgres:// URL, whose
// password may come from TACK_DB_PASSWORD_FILE.
import { mkdirSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { commonConfig, ConfigError, loadOperatorConfig, runMain } from "@tack/config";
import { initTelemetry, logger } from "@tack/telemetry";
import { parseIndexSetting, readPasswordFile, redactUrl, withPassword } from "./db.js";
import { rawRoutes } from "./rest.js";
import { startGateway } from "./server.js";
import { uiRoutes } from "./ui.js";
import { errorMessage } from "./thrown.js";

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
  // gRPC is off unless a port is given (7701 is the conventional one).
  const grpcText = process.env.TACK_GATEWAY_GRPC_PORT || "";
  if (grpcText !== "" && (!/^\d+$/.test(grpcText) || Number(grpcText) > 65_535)) throw new ConfigError(`TACK_GATEWAY_GRPC_PORT must be a port number 0-65535 (e.g. 7701), got ${JSON.stringify(grpcText)}; leave it unset for no gRPC`);
  let index: ReturnType<typeof parseIndexSetting>;
  try {
    index = parseIndexSetting(process.env.TACK_DB || ".tack/tack.db");
  } catch (error) {
    throw new ConfigError(`TACK_DB: ${errorMessage(error)}`);
  }
  const passwordFile = process.env.TACK_DB_PASSWORD_FILE;
  if (passwordFile) {
    if (!("postgresUrl" in index)) throw new ConfigError("TACK_DB_PASSWORD_FILE is set but TACK_DB is not a postgres:// URL; unset it, or set TACK_DB to postgres://USER@HOST:5432/DATABASE");
    try {
      index = { postgresUrl: withPassword(index.postgresUrl, readPasswordFile(passwordFile)) };
    } catch (error) {
      throw new ConfigError(`TACK_DB_PASSWORD_FILE: ${errorMessage(error)}`);
    }
  }
  if ("sqlitePath" in index && index.sqlitePath !== ":memory:") {
    index = { sqlitePath: resolve(index.sqlitePath) };
    mkdirSync(dirname(index.sqlitePath), { recursive: true });
  }
  const database = "sqlitePath" in index ? index.sqlitePath : redactUrl(index.postgresUrl);
  const gateway = await startGateway({
    natsUrl: common.natsUrl,
    natsAuth: common.natsAuth,
    namespace: common.namespace,
    host: process.env.TACK_GATEWAY_HOST || "127.0.0.1",
    port: Number(portText),
    ...(grpcText !== "" ? { grpcPort: Number(grpcText) } : {}),
    // TACK_API_KEY (what `tack up` passes) is an admin key of TACK_TENANT.
    apiKeys: key ? [{ key, tenant: common.tenant, role: "admin", name: "TACK_API_KEY" }] : [],
    operator,
    ...index,
    web: rawRoutes(uiRoutes(), logger("gateway")), // the web UI at / (src/ui.ts)
  });
  logger("gateway").info("listening", { url: gateway.url, ...(gateway.grpcPort !== undefined ? { grpc_port: gateway.grpcPort } : {}), namespace: common.namespace, database });
  return {
    stop: async () => {
      await gateway.stop();
      await telemetry.shutdown();
    },
  };
});
