import { isAbsolute } from "node:path";
import type { JetStreamManager } from "@nats-io/jetstream";
import { SANDBOX_MODES } from "@tack/config";
import { z } from "zod";
import { TackError, type Bus, type Codec } from "@tack/bus";
import { CreateSessionRequest, CreateSessionResponse, SubmitMessageRequest, SubmitMessageResponse } from "@tack/proto";
import { readAll } from "@tack/log";
import type { AuditLog } from "./audit.js";
import { readJson } from "./body.js";
import { timestamp } from "./db.js";
import { GatewayError } from "./errors.js";
import { sendJson, type Exchange, type Handler } from "./http.js";
import type { CompiledOptions } from "./options.js";
import type { TenantPolicies } from "./policy.js";
import type { SessionIndex, SessionRow } from "./store.js";
import { sessionState } from "./session-state.js";
import { sessionUsage } from "./usage.js";
import { sessionWorkspace, type WorkspaceIndex } from "./workspaces.js";

/** What the route handlers work with. */
export interface GatewayContext {
  readonly bus: Bus;
  readonly jsm: JetStreamManager;
  readonly index: SessionIndex;
  readonly options: CompiledOptions;
  /** Tenants' policies and what each uses in this process. */
  readonly policy: TenantPolicies;
  /** Aborted when the gateway stops: ends following event streams. */
  readonly shutdown: AbortSignal;
  /** The tenant-visible audit trail (deletions). */
  readonly audit: AuditLog;
  /** The tenants' managed workspaces. */
  readonly workspaces: WorkspaceIndex;
}

const required = (what: string) => (issue: { input: unknown }) => (issue.input === undefined ? `is required: ${what}` : "must be a string");

const CreateSessionBody = z.strictObject({
  workspace: z.string({ error: "must be a string: the absolute path of a project folder under one of your tenant's workspace roots" })
    .refine(isAbsolute, { error: (issue) => `must be an absolute host path, got ${JSON.stringify(issue.input)}` }).optional(),
  workspace_id: z.string({ error: "must be a string: the id of a managed workspace (POST /v1/workspaces)" }).regex(/^ws_[0-9a-f]{20}$/, "must be a managed workspace id like ws_0123456789abcdef0123").optional(),
  model: z.string({ error: required("a model reference such as deepseek:deepseek-chat") })
    .regex(/^[a-z0-9][a-z0-9_-]*:\S.*$/, "must be <provider>:<model>, e.g. deepseek:deepseek-chat or scripted:/abs/script.json"),
  // Which modes exist is the tools service's to say: the loop asks it and refuses an unknown one, naming those it has.
  mode: z.string({ error: "must be a string: standard, code, minimal or creator" }).regex(/^[a-z][a-z0-9_-]{0,31}$/, "must be a mode name such as standard or code").default("standard"),
  plan_mode: z.boolean({ error: "must be true or false" }).default(false),
  // Absent: workspace-write, or the tenant's widest mode when that is narrower (TenantPolicies.admitSession).
  sandbox_mode: z.enum(SANDBOX_MODES).optional(),
  approval_policy: z.enum(["ask", "never"]).default("ask"),
  title: z.string().max(200, "must be at most 200 characters").default(""),
  budget_usd: z.number().positive("must be a positive amount of US dollars").optional(),
});

const SubmitMessageBody = z.strictObject({
  text: z.string({ error: required("the message to send") })
    .max(100_000, "must be at most 100,000 characters")
    .refine((t) => t.trim() !== "", "must not be empty"),
});

const ListQuery = z.object({
  limit: z.coerce.number({ error: "must be a number" }).int("must be an integer").min(1, "must be at least 1").max(200, "must be at most 200").default(50),
  offset: z.coerce.number({ error: "must be a number" }).int("must be an integer").min(0, "must be at least 0").default(0),
});

/** The JSON form of an index row. */
function sessionJson(context: GatewayContext, row: SessionRow) {
  return {
    id: row.id, tenant: row.tenant, title: row.title, model: row.model, mode: row.mode, workspace: row.workspace,
    sandbox_mode: row.sandbox_mode, approval_policy: row.approval_policy, subject: context.bus.names.logSubject(row.tenant, row.id),
    created_at: row.created_at, updated_at: row.updated_at, archived: row.archived === 1,
  };
}

/** The caller's session named in the path; 404 when it does not exist or belongs to another tenant. */
export async function requireSession(context: GatewayContext, exchange: Exchange): Promise<SessionRow> {
  const id = exchange.params.id!;
  const row = await context.index.getSession(exchange.tenant!, id);
  if (!row) throw new GatewayError(404, "gateway.session_not_found", `no session ${JSON.stringify(id)} for this API key; list yours with GET /v1/sessions`);
  return row;
}

/** `POST /v1/sessions`: asks the loop to create a session, then indexes it. */
export function createSession(context: GatewayContext): Handler {
  return async (exchange) => {
    const body = await readJson(exchange.req, CreateSessionBody);
    if ((body.workspace === undefined) === (body.workspace_id === undefined)) {
      throw new GatewayError(400, "gateway.invalid_request", "invalid request body: give exactly one of workspace (an absolute path under your tenant's workspace roots) or workspace_id (a managed workspace from POST /v1/workspaces)");
    }
    const sandboxMode = await context.policy.admitSession(exchange, { model: body.model, sandboxMode: body.sandbox_mode });
    const workspace = await sessionWorkspace(context, context.workspaces, exchange.tenant!, body);
    const tenant = exchange.tenant!;
    const { bus } = context;
    const created = await bus.request(bus.names.loopCreate, CreateSessionRequest, CreateSessionRequest.fromPartial({
      tenant, mode: body.mode, model: body.model, workspace, sandboxMode, approvalPolicy: body.approval_policy, title: body.title, budgetUsd: body.budget_usd ?? 0,
      planMode: body.plan_mode,
    }), CreateSessionResponse, { timeoutMs: context.options.loopTimeoutMs });
    const at = timestamp();
    const row: SessionRow = {
      id: created.sessionId, tenant, title: body.title, model: body.model, mode: body.mode, workspace,
      sandbox_mode: sandboxMode, approval_policy: body.approval_policy, created_at: at, updated_at: at, archived: 0,
    };
    await context.index.insertSession(row);
    sendJson(exchange.res, 201, { ...sessionJson(context, row), plan_mode: body.plan_mode, subject: created.subject }, { location: `/v1/sessions/${row.id}` });
  };
}

/** `GET /v1/sessions`: the caller's sessions, newest first. */
export function listSessions(context: GatewayContext): Handler {
  return async (exchange) => {
    const parsed = ListQuery.safeParse(Object.fromEntries(exchange.url.searchParams));
    if (!parsed.success) {
      const problems = parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ");
      throw new GatewayError(400, "gateway.invalid_query", `invalid query: ${problems}`);
    }
    const { limit, offset } = parsed.data;
    const rows = await context.index.listSessions(exchange.tenant!, limit, offset);
    sendJson(exchange.res, 200, { sessions: rows.map((r) => sessionJson(context, r)), limit, offset });
  };
}

/**
 * `GET /v1/sessions/:id`: the index row, the seq of the last logged event, money and tokens
 * (total and per turn), and from the log: the mode, plan mode, the task list and the tool calls
 * waiting for a person (approvals, questions, a plan).
 */
export function getSession(context: GatewayContext): Handler {
  return async (exchange) => {
    const row = await requireSession(context, exchange);
    const events = await readAll(context.bus.nc, context.bus.names, { tenant: row.tenant, sessionId: row.id });
    const { mode, ...state } = sessionState(events);
    sendJson(exchange.res, 200, { ...sessionJson(context, row), mode: mode ?? row.mode, ...state, last_seq: events.at(-1)?.seq ?? 0, usage: sessionUsage(events) });
  };
}

/**
 * Sends a session's request to the loop replica that owns the session (`subjects.owner`), or,
 * when none does, to any free replica on `subjects.any` (which claims the session).
 */
export async function requestLoop<Req, Res>(
  context: GatewayContext, subjects: { owner: string; any: string }, requestCodec: Codec<Req>, request: Req, responseCodec: Codec<Res>,
): Promise<Res> {
  const options = { timeoutMs: context.options.loopTimeoutMs };
  try {
    return await context.bus.request(subjects.owner, requestCodec, request, responseCodec, options);
  } catch (error) {
    if (!(error instanceof TackError && error.code === "bus.no_responders")) throw error;
    return context.bus.request(subjects.any, requestCodec, request, responseCodec, options);
  }
}

/** `POST /v1/sessions/:id/messages`: hands the text to the session's loop replica (see `requestLoop`). */
export function submitMessage(context: GatewayContext): Handler {
  return async (exchange) => {
    const row = await requireSession(context, exchange);
    const { text } = await readJson(exchange.req, SubmitMessageBody);
    const { names } = context.bus;
    const request = SubmitMessageRequest.fromPartial({ tenant: row.tenant, sessionId: row.id, text });
    const response = await requestLoop(context, { owner: names.loopSessionSubmit(row.id), any: names.loopSubmit }, SubmitMessageRequest, request, SubmitMessageResponse);
    await context.index.touchSession(row.id);
    sendJson(exchange.res, 202, { seq: response.seq, turn: response.turn });
  };
}
