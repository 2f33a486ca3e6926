// New sessions from a copy of another's log: a fork at a turn boundary, and an import of an
// exported bundle. The gateway gathers the events and spilled objects; the loop writes the new
// log as its single writer (`<ns>.loop.copy`), so nothing runs again and no model is asked.
import { isSandboxMode, type SandboxMode } from "@tack/config";
import { readAll } from "@tack/log";
import { LoopRpc } from "@tack/bus";
import { CopySessionRequest, type Event, type gatewayV1 } from "@tack/proto";
import type { Call, Operation, Reply } from "./call.js";
import { timestamp } from "./db.js";
import { GatewayError } from "./errors.js";
import { BUNDLE_FORMAT, spilledObjects } from "./export.js";
import { requireSession, type GatewayContext } from "./gateway-context.js";
import { sessionMessage } from "./sessions.js";
import type { SessionRow } from "./store.js";
import { sessionWorkspace } from "./workspaces.js";

interface Copy {
  readonly events: Event[];
  readonly objects: { name: string; data: Uint8Array }[];
  /** The new row, less its id. */
  readonly row: Omit<SessionRow, "id" | "created_at" | "updated_at" | "archived" | "sandbox_mode"> & { readonly sandbox_mode: SandboxMode };
}

/** Admits the new session (the tenant's limits), has the loop write it, and indexes it. */
async function writeCopy(context: GatewayContext, call: Call, copy: Copy): Promise<Reply<gatewayV1.Session>> {
  const admitted = await context.policy.admitSession(call.tenant, { model: copy.row.model, sandboxMode: copy.row.sandbox_mode });
  try {
    const { bus } = context;
    const request = CopySessionRequest.fromPartial({ tenant: call.tenant, events: copy.events, objects: copy.objects.map((o) => ({ name: o.name, data: Buffer.from(o.data) })), workspace: copy.row.workspace, copiedBy: call.tenant });
    const written = await bus.request(LoopRpc.CopySession, request, { timeoutMs: context.options.loopTimeoutMs });
    const at = timestamp();
    const row: SessionRow = { ...copy.row, id: written.sessionId, created_at: at, updated_at: at, archived: 0 };
    await context.index.insertSession(row);
    return { message: sessionMessage(context, row), headers: { location: `/v1/sessions/${row.id}` } };
  } finally {
    admitted.release();
  }
}

/** `ForkSession`: a new session whose log is this one's up to the `turn/end` of turn `turn`. */
export function forkSession(context: GatewayContext): Operation<gatewayV1.ForkSessionRequest, gatewayV1.Session> {
  return async (call, request) => {
    const row = await requireSession(context, call, request.id);
    const { turn } = request;
    const events = await readAll(context.bus.nc, context.bus.names, { tenant: row.tenant, sessionId: row.id });
    const end = events.findIndex((e) => e.payload?.$case === "turnEnd" && e.payload.value.turn === turn);
    if (end < 0) {
      const ended = events.flatMap((e) => (e.payload?.$case === "turnEnd" ? [e.payload.value.turn] : []));
      throw new GatewayError(400, "gateway.invalid_request", `invalid request body: turn: session ${row.id} has no ended turn ${turn}; fork at one of its ended turns (${ended.length ? ended.join(", ") : "none yet"})`, { details: { turn: `no ended turn ${turn}` } });
    }
    const kept = events.slice(0, end + 1);
    const title = request.title ?? `${row.title || row.id} (fork)`.slice(0, 200);
    return writeCopy(context, call, {
      events: kept, objects: await spilledObjects(context, row, kept),
      row: { tenant: call.tenant, title, model: row.model, mode: row.mode, workspace: row.workspace, sandbox_mode: isSandboxMode(row.sandbox_mode) ? row.sandbox_mode : "workspace-write", approval_policy: row.approval_policy },
    });
  };
}

/** `ImportSession`: a new session from an exported bundle, in its workspace (or the one given) if the tenant may use it. */
export function importSession(context: GatewayContext): Operation<gatewayV1.ImportSessionRequest, gatewayV1.Session> {
  return async (call, request) => {
    if (request.format !== BUNDLE_FORMAT) throw new GatewayError(400, "gateway.invalid_request", `invalid request body: format: must be "${BUNDLE_FORMAT}"`);
    const { session, events } = request;
    const created = events[0]?.payload;
    if (created?.$case !== "sessionCreated") throw new GatewayError(400, "gateway.invalid_request", "invalid request body: events: the first event must be session/created (an export of GET /v1/sessions/{id}/export)", { details: { events: "must start with session/created" } });
    // Each object's name and base64 data were checked by the request schema (SpillObject's @required and @pattern).
    const objects = request.objects;
    const { workspaceId } = request;
    const path = await sessionWorkspace(context, context.workspaces, call.tenant, workspaceId !== undefined
      ? { workspace_id: workspaceId }
      : { workspace: request.workspace ?? created.value.workspace });
    const sandboxMode = session && isSandboxMode(session.sandboxMode) ? session.sandboxMode : "workspace-write";
    const text = (value: string | undefined, fallback: string) => (value ? value : fallback);
    return writeCopy(context, call, {
      events, objects,
      row: {
        tenant: call.tenant, title: text(session?.title, created.value.title).slice(0, 200), model: created.value.model, mode: text(session?.mode, created.value.mode || "standard"),
        workspace: path, sandbox_mode: sandboxMode, approval_policy: session?.approvalPolicy === "never" ? "never" : "ask",
      },
    });
  };
}
