import { createHash, timingSafeEqual } from "node:crypto";
import { GatewayError } from "./errors.js";
import type { Interceptor } from "./http.js";
import type { SessionIndex } from "./store.js";

const HOW = "send it as `Authorization: Bearer <key>` with a key of the gateway (TACK_API_KEY, the operator configuration's keys, or one an admin created)";

/**
 * Requires `Authorization: Bearer <key>` on every /v1 path and sets the caller's tenant and
 * role. Keys are read from the index on every request, so a revoked key stops working at
 * once. The presented key's hash is compared with every stored hash in constant time, so
 * timing tells nothing about how close a guess was.
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
    let found: { hash: string; tenant: string; role: string } | undefined;
    for (const row of await index.activeKeys()) {
      if (timingSafeEqual(presented, Buffer.from(row.hash, "hex")) && found === undefined) found = row;
    }
    if (found === undefined) throw new GatewayError(401, "gateway.invalid_api_key", `the API key is not valid (unknown or revoked): ${HOW}`);
    exchange.tenant = found.tenant;
    exchange.caller = { keyHash: found.hash, role: found.role === "admin" ? "admin" : "member" };
    return next();
  };
}
