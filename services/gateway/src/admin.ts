// The admin API: an admin key manages its own tenant's keys and reads its tenant's policy.
// Keys of other tenants do not exist for it (404), as other tenants' sessions do not.
import { timestamp } from "./db.js";
import { forgetKey } from "./auth.js";
import { GatewayError } from "./errors.js";
import type { Call, Operation } from "./call.js";
import { generateApiKey, hashApiKey, keyId } from "./keys.js";
import type { GatewayContext } from "./gateway-context.js";
import type { gatewayV1 } from "@tack/proto";
import type { KeyRow } from "./store.js";

/** The JSON form of a stored key: its id (first 12 hex digits of the hash), never the key or the whole hash. */
function apiKey(row: KeyRow): gatewayV1.ApiKey {
  return { id: keyId(row.hash), tenant: row.tenant, role: row.role, name: row.name, source: row.source, createdAt: row.created_at, revokedAt: row.revoked_at ?? undefined };
}

/** Refuses a caller whose key is not an admin key (403 `gateway.forbidden`, naming the role needed). */
function requireAdmin(call: Call): string {
  if (call.caller.role !== "admin") {
    throw new GatewayError(403, "gateway.forbidden", `${call.label} needs an admin key of tenant ${call.tenant}; this key has the role member`, {
      details: { role_needed: "admin", role: call.caller.role },
    });
  }
  return call.tenant;
}

/** `POST /v1/admin/keys` `{tenant?, role?, name?}`: creates a key of the admin's tenant; 201 shows the key this once. */
export function createKey(context: GatewayContext): Operation<gatewayV1.CreateKeyRequest, gatewayV1.CreatedKey> {
  return async (call, request) => {
    const tenant = requireAdmin(call);
    const role: KeyRow["role"] = request.role === "admin" ? "admin" : "member";
    const body = { tenant: request.tenant, role, name: request.name };
    if (body.tenant !== undefined && body.tenant !== tenant) {
      throw new GatewayError(403, "gateway.forbidden", `an admin key of tenant ${tenant} creates keys of tenant ${tenant} only, not ${JSON.stringify(body.tenant)}; keys of other tenants are the operator's (keys: in the operator configuration)`, {
        details: { tenant: body.tenant },
      });
    }
    const key = generateApiKey();
    const row: KeyRow = { hash: hashApiKey(key), tenant, role: body.role, name: body.name, source: "api", created_at: timestamp(), revoked_at: null };
    await context.index.insertKey(row);
    const json = apiKey(row);
    return { message: { ...json, key, note: "the key is shown only now; store it, the gateway keeps only its hash" }, headers: { location: `/v1/admin/keys/${json.id}` } };
  };
}

/** `GET /v1/admin/keys`: the admin's tenant's keys, revoked ones too. */
export function listKeys(context: GatewayContext): Operation<gatewayV1.ListKeysRequest, gatewayV1.ListKeysResponse> {
  return async (call) => {
    const tenant = requireAdmin(call);
    const rows = await context.index.listKeys(tenant);
    return { message: { keys: rows.map(apiKey) } };
  };
}

/**
 * `DELETE /v1/admin/keys/:id`: revokes a key of the admin's tenant; it is refused from the
 * next request on and its open event streams end. Keys from the operator configuration or
 * TACK_API_KEY are the operator's: 409, edit them where they are.
 */
export function revokeKey(context: GatewayContext): Operation<gatewayV1.RevokeKeyRequest, gatewayV1.ApiKey> {
  return async (call, request) => {
    const tenant = requireAdmin(call);
    const { id } = request;
    const notFound = () => new GatewayError(404, "gateway.key_not_found", `no key ${JSON.stringify(id)} in tenant ${tenant}; list them with GET /v1/admin/keys`);
    if (!/^[0-9a-f]{12}$/.test(id)) throw notFound();
    const rows = await context.index.findKeys(tenant, id);
    if (rows.length === 0) throw notFound();
    // 48 bits of hash make two keys of one tenant with the same id practically impossible; refuse rather than guess.
    if (rows.length > 1) throw new GatewayError(409, "gateway.key_ambiguous", `${rows.length} keys of tenant ${tenant} have the id ${id}; ask the operator to revoke it in the index`);
    const row = rows[0]!;
    if (row.source === "config") {
      throw new GatewayError(409, "gateway.key_not_revocable", `key ${id} comes from the operator configuration${context.options.operator.source ? ` (${context.options.operator.source})` : ""}; remove it from keys: there and restart the gateway`, {
        details: { source: "config" },
      });
    }
    if (row.source !== "api") {
      throw new GatewayError(409, "gateway.key_not_revocable", `key ${id} is the gateway's TACK_API_KEY; change TACK_API_KEY and restart the gateway`, { details: { source: row.source } });
    }
    await context.index.revokeKey(row.hash);
    forgetKey(context.index, row.hash);
    context.policy.endStreamsOf(row.hash);
    // The other gateway replicas drop the key too (src/changes.ts), before this answer is sent.
    await context.changes.announce({ key: row.hash });
    const [revoked] = await context.index.findKeys(tenant, id);
    return { message: apiKey(revoked ?? row) };
  };
}

/** `GET /v1/admin/tenants`: the admin's tenant with its policy and what it uses now. */
export function listTenants(context: GatewayContext): Operation<gatewayV1.ListTenantsRequest, gatewayV1.ListTenantsResponse> {
  return async (call) => {
    const tenant = requireAdmin(call);
    const policy = context.policy.policy(tenant);
    return { message: {
      tenants: [{
        id: tenant,
        configured: tenant in context.options.operator.tenants,
        policy: {
          workspaceRoots: policy.workspace_roots,
          maxSandboxMode: policy.max_sandbox_mode,
          maxSessions: policy.max_sessions,
          maxSandboxes: policy.max_sandboxes,
          maxEventStreams: policy.max_event_streams,
          requestsPerMinute: policy.requests_per_minute,
          budgetUsd: policy.budget_usd,
          modelProviders: policy.model_providers ?? [],
          anyModelProvider: policy.model_providers === undefined,
        },
        usage: { sessions: await context.index.countSessions(tenant), eventStreams: context.policy.streamCount(tenant) },
      }],
    } };
  };
}
