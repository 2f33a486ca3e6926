import { hash, timingSafeEqual } from "node:crypto";
import type { Caller } from "./call.js";
import { GatewayError } from "./errors.js";
import type { SessionIndex } from "./store.js";

const HOW = "send it as `Authorization: Bearer <key>` with a key of the gateway (TACK_API_KEY, the operator configuration's keys, or one an admin created)";

/** How long a checked key is trusted without asking the index again. */
export const KEY_CHECK_MS = 1000;

interface CheckedKey {
  readonly tenant: string;
  readonly caller: Caller;
  readonly at: number;
}

/** Keys that passed the check recently, by the hex hash of the presented key, per index. */
const checked = new WeakMap<SessionIndex, Map<string, CheckedKey>>();

/**
 * Checks an `Authorization` value (the REST header or the gRPC metadata entry) and returns the
 * caller's tenant and role. A key that passed is trusted for `KEY_CHECK_MS` before the index is
 * asked again, so a busy client costs one index read a second, not one per request; a key revoked
 * through this gateway stops working at once (`forgetKey`), through another replica within that
 * second. The presented key's hash is compared with every stored hash in constant time, so timing
 * tells nothing about how close a guess was; refusals are never remembered.
 */
export async function authenticateKey(index: SessionIndex, header: string | undefined): Promise<{ tenant: string; caller: Caller }> {
  if (!header) throw new GatewayError(401, "gateway.missing_api_key", `missing API key: ${HOW}`);
  const match = /^Bearer[ ]+(\S+)\s*$/i.exec(header);
  if (!match) throw new GatewayError(401, "gateway.malformed_authorization", `the Authorization header is not \`Bearer <key>\`: ${HOW}`);
  // The one-shot hash: a quarter of createHash's cost, paid on every request.
  const id = hash("sha256", match[1]!);
  let cache = checked.get(index);
  if (!cache) checked.set(index, cache = new Map());
  const now = Date.now();
  const known = cache.get(id);
  if (known && now - known.at < KEY_CHECK_MS) return known;
  const presented = Buffer.from(id, "hex");
  let found: { hash: string; tenant: string; role: string; name: string } | undefined;
  for (const row of await index.activeKeys()) {
    if (timingSafeEqual(presented, Buffer.from(row.hash, "hex")) && found === undefined) found = row;
  }
  if (found === undefined) {
    cache.delete(id);
    throw new GatewayError(401, "gateway.invalid_api_key", `the API key is not valid (unknown or revoked): ${HOW}`);
  }
  const result: CheckedKey = { tenant: found.tenant, caller: { keyHash: found.hash, keyName: found.name, role: found.role === "admin" ? "admin" : "member" }, at: now };
  // Bounded: a flood of distinct valid keys cannot grow it without end.
  if (cache.size >= 10_000) cache.clear();
  cache.set(id, result);
  return result;
}

/** Stops trusting a key at once (it was just revoked). */
export function forgetKey(index: SessionIndex, hash: string): void {
  checked.get(index)?.delete(hash);
}
