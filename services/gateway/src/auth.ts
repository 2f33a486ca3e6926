import { createHash, timingSafeEqual } from "node:crypto";
import { GatewayError } from "./errors.js";
import type { Interceptor } from "./http.js";
import type { SessionIndex } from "./store.js";

/** The hex SHA-256 of an API key: the only form in which keys are stored. */
export function hashApiKey(key: string): string {
  return createHash("sha256").update(key, "utf8").digest("hex");
}

const HOW = "send it as `Authorization: Bearer <key>` with the key the gateway was started with (TACK_API_KEY)";

/**
 * Requires `Authorization: Bearer <key>` on every /v1 path and sets the caller's tenant.
 * The presented key's hash is compared with every stored hash in constant time, so timing
 * tells nothing about how close a guess was.
 */
export function authenticate(index: SessionIndex): Interceptor {
  return async (exchange, next) => {
    const path = exchange.url.pathname;
    if (path !== "/v1" && !path.startsWith("/v1/")) return next();
    const header = exchange.req.headers.authorization;
    if (!header) throw new GatewayError(401, "gateway.missing_api_key", `missing API key: ${HOW}`);
    const match = /^Bearer[ ]+(\S+)\s*$/i.exec(header);
    if (!match) throw new GatewayError(401, "gateway.malformed_authorization", `the Authorization header is not \`Bearer <key>\`: ${HOW}`);
    const presented = createHash("sha256").update(match[1]!, "utf8").digest();
    let tenant: string | undefined;
    for (const row of await index.apiKeys()) {
      if (timingSafeEqual(presented, Buffer.from(row.hash, "hex")) && tenant === undefined) tenant = row.tenant;
    }
    if (tenant === undefined) throw new GatewayError(401, "gateway.invalid_api_key", `the API key is not valid: ${HOW}`);
    exchange.tenant = tenant;
    return next();
  };
}
