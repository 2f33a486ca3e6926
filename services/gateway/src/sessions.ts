import { DEFAULT_SILENCE_MS, LoopRpc } from "@tack/bus";
import { CancelTurnRequest, CompactSessionRequest, CreateSessionRequest, SubmitMessageRequest, type gatewayV1 } from "@tack/proto";
import type { Operation, Reply } from "./call.js";
import { timestamp } from "./db.js";
import { GatewayError } from "./errors.js";
import type { SessionView } from "./feeds.js";
import { requestLoop, requireSession, type GatewayContext } from "./gateway-context.js";
import type { SessionFilter, SessionRow } from "./store.js";
import { sandboxModeField } from "./validation.js";
import { sessionWorkspace } from "./workspaces.js";

/** An index row as the API's message (`tack.gateway.v1.Session`). */
export function sessionMessage(context: GatewayContext, row: SessionRow): gatewayV1.Session {
  return {
    id: row.id, tenant: row.tenant, title: row.title, model: row.model, mode: row.mode, workspace: row.workspace,
    sandboxMode: row.sandbox_mode, approvalPolicy: row.approval_policy, subject: context.bus.names.logSubject(row.tenant, row.id),
    createdAt: row.created_at, updatedAt: row.updated_at, archived: row.archived === 1, planMode: undefined,
  };
}

/** `CreateSession`: asks the loop to create a session, then indexes it. */
export function createSession(context: GatewayContext): Operation<gatewayV1.CreateSessionRequest, gatewayV1.Session> {
  return async (call, body) => {
    const { workspace, workspaceId } = body;
    if ((workspace === undefined) === (workspaceId === undefined)) {
      throw new GatewayError(400, "gateway.invalid_request", "invalid request body: give exactly one of workspace (an absolute path under your tenant's workspace roots) or workspace_id (a managed workspace from POST /v1/workspaces)");
    }
    const { model, title, planMode } = body;
    const mode = body.mode || "standard";
    const approvalPolicy = body.approvalPolicy || "ask";
    const sandboxMode = body.sandboxMode === undefined ? undefined : sandboxModeField("sandbox_mode", body.sandboxMode);
    const admitted = await context.policy.admitSession(call.tenant, { model, sandboxMode });
    try {
      const path = await sessionWorkspace(context, context.workspaces, call.tenant, { workspace, workspace_id: workspaceId });
      const tenant = call.tenant;
      const { bus } = context;
      const created = await bus.request(LoopRpc.CreateSession, CreateSessionRequest.fromPartial({
        tenant, mode, model, workspace: path, sandboxMode: admitted.mode, approvalPolicy, title, budgetUsd: body.budgetUsd ?? 0, planMode,
      }), { timeoutMs: context.options.loopTimeoutMs });
      const at = timestamp();
      const row: SessionRow = {
        id: created.sessionId, tenant, title, model, mode, workspace: path,
        sandbox_mode: admitted.mode, approval_policy: approvalPolicy, created_at: at, updated_at: at, archived: 0,
      };
      await context.index.insertSession(row);
      return { message: { ...sessionMessage(context, row), planMode, subject: created.subject }, headers: { location: `/v1/sessions/${row.id}` } };
    } finally {
      admitted.release();
    }
  };
}

/** An opaque position in the newest-first list: the last row's creation time and id. */
function encodeCursor(row: SessionRow): string {
  return Buffer.from(JSON.stringify([row.created_at, row.id])).toString("base64url");
}

function decodeCursor(cursor: string): { createdAt: string; id: string } {
  try {
    const position: unknown = JSON.parse(Buffer.from(cursor, "base64url").toString("utf8"));
    if (Array.isArray(position) && typeof position[0] === "string" && typeof position[1] === "string") return { createdAt: position[0], id: position[1] };
  } catch {
    // Answered below.
  }
  throw new GatewayError(400, "gateway.invalid_query", `invalid query: cursor: must be the next_cursor of a previous page, got ${JSON.stringify(cursor)}`);
}

/** An ISO-8601 time as the index stores it (UTC, milliseconds), or a 400 naming the parameter. */
function isoTime(name: string, value: string): string {
  const ms = Date.parse(value);
  if (Number.isNaN(ms)) throw new GatewayError(400, "gateway.invalid_query", `invalid query: ${name}: must be an ISO-8601 time such as 2025-01-31T12:00:00Z, got ${JSON.stringify(value)}`);
  return new Date(ms).toISOString();
}

/** `ListSessions`: the caller's sessions, newest first, filtered (archived, workspace, creation time) and paged by offset or cursor. */
export function listSessions(context: GatewayContext): Operation<gatewayV1.ListSessionsRequest, gatewayV1.ListSessionsResponse> {
  return async (call, query) => {
    const { limit, offset, workspace } = query;
    const filter: { -readonly [K in keyof SessionFilter]: SessionFilter[K] } = { archived: query.archived === true };
    if (workspace !== undefined) {
      if (workspace.startsWith("ws_")) {
        const managed = await context.workspaces.get(call.tenant, workspace);
        // An unknown managed workspace holds no sessions of this tenant.
        filter.workspace = managed?.path ?? `\0${workspace}`;
      } else filter.workspace = workspace;
    }
    if (query.createdBefore !== undefined) filter.createdBefore = isoTime("created_before", query.createdBefore);
    if (query.createdAfter !== undefined) filter.createdAfter = isoTime("created_after", query.createdAfter);
    if (query.cursor !== undefined) filter.after = decodeCursor(query.cursor);
    // One row more than asked tells whether a next page exists.
    const rows = await context.index.listSessions(call.tenant, limit + 1, offset, filter);
    const page = rows.slice(0, limit);
    const nextCursor = rows.length > limit ? encodeCursor(page.at(-1)!) : undefined;
    return { message: { sessions: page.map((r) => sessionMessage(context, r)), limit, offset, nextCursor } };
  };
}

/**
 * `GetSession`: the index row, the seq of the last logged event, money and tokens (total and
 * per turn), and from the log: the mode, plan mode, the task list and the tool calls waiting for
 * a person (approvals, questions, a plan).
 */
export function getSession(context: GatewayContext): Operation<gatewayV1.GetSessionRequest, gatewayV1.SessionDetail> {
  // The last answer per session, reused while the feed's view is the same object (no event applied
  // since) and the index row reads the same: a session polled by many callers is built and
  // serialized once per change, not once per request.
  const answers = new Map<string, { row: SessionRow; view: SessionView; reply: Reply<gatewayV1.SessionDetail> }>();
  return async (call, request) => {
    const row = await requireSession(context, call, request.id);
    const view = await context.feeds.view(row);
    const last = answers.get(row.id);
    if (last && last.view === view && sameRow(last.row, row)) return last.reply;
    const { mode, ...state } = view.state;
    const reply = { message: { ...sessionMessage(context, row), mode: mode ?? row.mode, ...state, lastSeq: view.lastSeq, usage: view.usage } };
    if (answers.size >= 10_000) answers.clear();
    answers.set(row.id, { row, view, reply });
    return reply;
  };
}

/** `GetTodos`: the session's current task list (the last `todo_write`). */
export function getTodos(context: GatewayContext): Operation<gatewayV1.GetTodosRequest, gatewayV1.GetTodosResponse> {
  return async (call, request) => {
    const row = await requireSession(context, call, request.id);
    return { message: { todos: (await context.feeds.view(row)).state.todos } };
  };
}

/** Whether two reads of a session's index row hold the same values. */
function sameRow(a: SessionRow, b: SessionRow): boolean {
  return a.id === b.id && a.tenant === b.tenant && a.title === b.title && a.model === b.model && a.mode === b.mode && a.workspace === b.workspace
    && a.sandbox_mode === b.sandbox_mode && a.approval_policy === b.approval_policy && a.created_at === b.created_at && a.updated_at === b.updated_at && a.archived === b.archived;
}

/** `SubmitMessage`: hands the text to the session's loop replica (see `requestLoop`). */
export function submitMessage(context: GatewayContext): Operation<gatewayV1.SubmitMessageRequest, gatewayV1.SubmitMessageResponse> {
  return async (call, request) => {
    const row = await requireSession(context, call, request.id);
    const message = SubmitMessageRequest.fromPartial({ tenant: row.tenant, sessionId: row.id, text: request.text });
    const response = await requestLoop(context, LoopRpc.SubmitMessage, row.id, message);
    await context.index.touchSession(row.id);
    return { message: { seq: response.seq, turn: response.turn } };
  };
}

/**
 * `CancelTurn`: asks the session's loop replica to stop the running turn (`stopTurn`): it ends
 * with `turn/end` reason `cancelled` at its next step boundary. `cancelled: false` when no turn runs.
 */
export function cancelTurn(context: GatewayContext): Operation<gatewayV1.CancelTurnRequest, gatewayV1.CancelTurnResponse> {
  return async (call, request) => {
    const row = await requireSession(context, call, request.id);
    const message = CancelTurnRequest.fromPartial({ tenant: row.tenant, sessionId: row.id, cancelledBy: call.tenant });
    const response = await requestLoop(context, LoopRpc.CancelTurn, row.id, message);
    await context.index.touchSession(row.id);
    return { message: { cancelled: response.cancelled, turn: response.turn } };
  };
}

/** How long a compaction may take: one model call over the whole conversation (the loop sends heartbeats meanwhile, so a dead loop is noticed sooner). */
const COMPACT_TIMEOUT_MS = 10 * 60_000;

/**
 * `CompactSession`: asks the session's loop replica to summarize the conversation now (`/compact`),
 * the same events as when the context fills up. 409 `loop.compact_busy` while a turn runs;
 * `compacted: false` and a note when there is nothing to compact.
 */
export function compactSession(context: GatewayContext): Operation<gatewayV1.CompactSessionRequest, gatewayV1.CompactSessionResponse> {
  return async (call, request) => {
    const row = await requireSession(context, call, request.id);
    const message = CompactSessionRequest.fromPartial({ tenant: row.tenant, sessionId: row.id, compactedBy: call.tenant, instructions: request.instructions ?? "" });
    const response = await requestLoop(context, LoopRpc.CompactSession, row.id, message, {
      timeoutMs: Math.max(COMPACT_TIMEOUT_MS, context.options.loopTimeoutMs), silenceMs: DEFAULT_SILENCE_MS,
    });
    await context.index.touchSession(row.id);
    return { message: {
      compacted: response.compacted, note: response.note, seq: response.seq, fromSeq: response.fromSeq, toSeq: response.toSeq,
      tokensBefore: response.tokensBefore, tokensAfter: response.tokensAfter, costUsd: response.costUsd,
    } };
  };
}

/** `ArchiveSession`: hides the session from the default list (`archived: false` brings it back); its log is untouched. */
export function archiveSession(context: GatewayContext): Operation<gatewayV1.ArchiveSessionRequest, gatewayV1.Session> {
  return async (call, request) => {
    const row = await requireSession(context, call, request.id);
    const archived = request.archived !== false;
    await context.index.setArchived(row.id, archived);
    const updated = await requireSession(context, call, row.id);
    return { message: sessionMessage(context, updated) };
  };
}
