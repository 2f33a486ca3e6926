// What every operation of the gateway works with (the context), and the lookups most of them
// start with: the caller's session, and the loop replica that serves it.
import type { JetStreamManager } from "@nats-io/jetstream";
import { discoverMicro, TACK_VERSION, TackError, type Bus, type Rpc } from "@tack/bus";
import type { AuditLog } from "./audit.js";
import type { Call } from "./call.js";
import type { ReplicaChanges } from "./changes.js";
import { GatewayError } from "./errors.js";
import type { SessionFeeds } from "./feeds.js";
import type { CompiledOptions } from "./options.js";
import type { TenantPolicies } from "./policy.js";
import type { SessionIndex, SessionRow } from "./store.js";
import type { WorkspaceIndex } from "./workspaces.js";

/** What the operations work with. */
export interface GatewayContext {
  readonly bus: Bus;
  readonly jsm: JetStreamManager;
  readonly index: SessionIndex;
  readonly options: CompiledOptions;
  /** Tenants' policies and what each uses in this process. */
  readonly policy: TenantPolicies;
  /** Aborted when the gateway stops: ends following event streams. */
  readonly shutdown: AbortSignal;
  /** The tenant-visible audit trail (deletions, and decisions on approvals, questions and plans). */
  readonly audit: AuditLog;
  /** The tenants' managed workspaces. */
  readonly workspaces: WorkspaceIndex;
  /** Live views of the session logs in use: state for GetSession, events for followers. */
  readonly feeds: SessionFeeds;
  /** Tells the other gateway replicas what this one changed. */
  readonly changes: ReplicaChanges;
}

/** The caller's session `id`; 404 when it does not exist or belongs to another tenant. */
export async function requireSession(context: GatewayContext, call: Call, id: string): Promise<SessionRow> {
  const row = id === "" ? undefined : await context.index.getSession(call.tenant, id);
  if (!row) throw new GatewayError(404, "gateway.session_not_found", `no session ${JSON.stringify(id)} for this API key; list yours with GET /v1/sessions`);
  return row;
}

/**
 * Sends session `sessionId`'s request for `rpc` (e.g. `LoopRpc.SubmitMessage`) to the loop replica
 * that owns the session (its owner route), or, when none does, to any free replica on its
 * queue-group route (which claims the session). `options` default to the configured loop
 * timeout; a long operation passes its own (with heartbeats).
 */
export async function requestLoop<Req, Res>(
  context: GatewayContext, rpc: Rpc<Req, Res, false, "session">, sessionId: string, request: Req,
  options: { timeoutMs: number; silenceMs?: number } = { timeoutMs: context.options.loopTimeoutMs },
): Promise<Res> {
  try {
    return await context.bus.request(rpc.at({ session: sessionId }), request, options);
  } catch (error) {
    if (!(error instanceof TackError && error.code === "bus.no_responders")) throw error;
  }
  try {
    return await context.bus.request(rpc, request, options);
  } catch (error) {
    if (error instanceof TackError && error.code === "bus.no_responders") throw await loopWithout(context, rpc, error);
    throw error;
  }
}

/**
 * The failure of a loop rpc no replica serves. When loop replicas answer discovery all the same,
 * they are older than this gateway and do not know the rpc (decision 0025: upgrade the loops
 * first): `gateway.loop_outdated`, naming the rpc and their versions. Otherwise no loop runs and
 * `noResponders` stands.
 */
async function loopWithout(context: GatewayContext, rpc: Rpc, noResponders: TackError): Promise<TackError> {
  const loops = await discoverMicro(context.bus, { service: "loop", waitMs: 500, stallMs: 100 }).catch(() => []);
  if (loops.length === 0) return noResponders;
  const versions = [...new Set(loops.map((loop) => loop.instance.version))].sort().join(", ");
  return new GatewayError(503, "gateway.loop_outdated", `no loop replica serves ${rpc.fullName}, though ${loops.length} loop replica(s) of version ${versions} run (this gateway: ${TACK_VERSION}): the loops are older than the gateway; upgrade the loops first, then the gateways (docs/decisions/0025-one-rpc-per-operation.md)`, {
    details: { rpc: rpc.fullName, loop_versions: versions, gateway_version: TACK_VERSION }, cause: noResponders,
  });
}
