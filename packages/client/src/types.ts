// The JSON bodies of the gateway's REST API (snake_case, as the gateway sends them).

/** Sandbox modes, narrowest first. */
export type SandboxMode = "read-only" | "workspace-write" | "danger-full-access";

/** Body of `POST /v1/sessions`: give exactly one of `workspace` (a host path) or `workspace_id` (a managed workspace). */
export interface CreateSessionInput {
  workspace?: string;
  workspace_id?: string;
  /** `<provider>:<model>`, e.g. `deepseek:deepseek-chat` or `scripted:/abs/script.json`. */
  model: string;
  /** `standard` (default), `code`, `minimal`, `creator`. */
  mode?: string;
  plan_mode?: boolean;
  sandbox_mode?: SandboxMode;
  approval_policy?: "ask" | "never";
  title?: string;
  budget_usd?: number;
}

/** A session as the index holds it. */
export interface Session {
  id: string;
  tenant: string;
  title: string;
  model: string;
  mode: string;
  workspace: string;
  sandbox_mode: string;
  approval_policy: string;
  /** The NATS subject of its log. */
  subject: string;
  created_at: string;
  updated_at: string;
  archived: boolean;
}

/** `POST /v1/sessions` answers the session and whether it starts in plan mode. */
export interface CreatedSession extends Session {
  plan_mode: boolean;
}

/** One page of `GET /v1/sessions`. */
export interface SessionPage {
  sessions: Session[];
  limit: number;
  offset: number;
  /** Give it as `cursor` for the next page; absent on the last page. */
  next_cursor?: string;
}

/** Filters and paging of `GET /v1/sessions`. */
export interface SessionQuery {
  /** Page size, 1..200 (default 50). */
  limit?: number;
  offset?: number;
  /** Only sessions in this workspace (the host path, or a managed workspace's id). */
  workspace?: string;
  /** `true`: only archived sessions; `false` (the gateway's default): only those not archived. */
  archived?: boolean;
  /** ISO-8601 times. */
  created_before?: string;
  created_after?: string;
  /** The `next_cursor` of the previous page. */
  cursor?: string;
}

/** `POST /v1/sessions/:id/cancel`: whether a turn was running and asked to stop. */
export interface CancelledTurn {
  cancelled: boolean;
  turn: number;
}

/** `POST /v1/sessions/:id/compact`: what the summary replaced, or why nothing was compacted. */
export interface CompactedSession {
  /** False when there was nothing to compact; `note` says why. */
  compacted: boolean;
  note: string;
  /** Seq of the `context/summarized` event (0 when nothing was compacted). */
  seq: number;
  /** The seqs the summary replaces in the model's view. */
  from_seq: number;
  to_seq: number;
  /** The next model request's size in tokens before and after, as the loop estimates it. */
  tokens_before: number;
  tokens_after: number;
  cost_usd: number;
}

/** `GET /v1/sessions/:id/export`: the whole log and its spilled objects (base64). */
export interface SessionBundle {
  format: string;
  session: Session;
  events: import("./events.js").EventJson[];
  objects: Array<{ name: string; data: string }>;
}

/** A task of the model's task list. */
export interface Todo {
  id?: string;
  content: string;
  status: string;
}

/** A tool call waiting for a person. */
export type Waiting =
  | { kind: "approval"; call_id: string; tool: string; operation: string; requested_mode: string; justification: string; seq: number }
  | { kind: "question"; call_id: string; questions: Question[]; seq: number }
  | { kind: "plan"; call_id: string; plan: string; seq: number };

/** One question of an ask_user_question call. */
export interface Question {
  header: string;
  question: string;
  multi_select: boolean;
  options: Array<{ label: string; description: string }>;
}

/** Money and tokens of a session, in total and per turn. */
export interface SessionUsage {
  cost_usd: number;
  tokens: { input_miss: number; input_hit: number; output: number; reasoning: number };
  turns: Array<{ turn: number; cost_usd: number }>;
}

/** `GET /v1/sessions/:id`: the index row with what the log says. */
export interface SessionDetail extends Session {
  plan_mode: boolean;
  todos: Todo[];
  waiting: Waiting[];
  last_seq: number;
  usage: SessionUsage;
}

/** `DELETE /v1/sessions/:id`. */
export interface DeletedSession {
  id: string;
  deleted: true;
  removed: { log_messages: number; spill_objects: number; sandboxes: number };
  audit: AuditRecord;
}

/** `POST /v1/sessions/:id/messages`: the seq of the user message and the turn it starts. */
export interface PostedMessage {
  seq: number;
  turn: number;
}

/** Answers of decisions: the seq of the logged event (0 when nothing changed). */
export interface Logged {
  seq: number;
}

/** One answer of a question call: option labels and/or the person's own words. */
export interface Answer {
  selected?: string[];
  other?: string;
}

/** `GET /v1/sessions/:id/context`: the next request's size by part, or `tokens: null` before the first request. */
export type ContextSize =
  | { session: string; tokens: null; note: string }
  | {
    session: string;
    tokenizer: string;
    tokens: { system_prompt: number; tools: number; conversation: number; total: number };
    calibration: { reported_input_tokens: number; counted_tokens: number; ratio: number } | null;
    estimated_total: number;
  };

/** `GET /v1/usage`: the tenant's spend. */
export interface TenantUsage {
  tenant: string;
  cost_usd: number;
}

/** An audit record. */
export interface AuditRecord {
  id: number | string;
  at: string;
  actor: string;
  key_id: string | null;
  action: string;
  session_id: string | null;
  details: unknown;
}

/** A page of `GET /v1/audit`. */
export interface AuditPage {
  records: AuditRecord[];
  limit: number;
  offset: number;
}

/** A managed workspace. */
export interface Workspace {
  id: string;
  tenant: string;
  title: string;
  created_at: string;
}

/** `POST /v1/workspaces` answers the workspace and how many bytes it holds. */
export interface CreatedWorkspace extends Workspace {
  bytes: number;
}

/** `DELETE /v1/workspaces/:id`. */
export interface DeletedWorkspace {
  id: string;
  deleted: true;
  /** The ids of the sessions deleted with it. */
  sessions_deleted: string[];
}

/** An API key as the admin API shows it (never the key itself). */
export interface ApiKeyInfo {
  id: string;
  tenant: string;
  role: "admin" | "member";
  name: string;
  source: "config" | "env" | "api";
  created_at: string;
  revoked_at: string | null;
}

/** `POST /v1/admin/keys`: the key, shown this once. */
export interface CreatedKey extends ApiKeyInfo {
  key: string;
  note: string;
}

/** `GET /v1/admin/tenants`. */
export interface TenantInfo {
  id: string;
  configured: boolean;
  policy: {
    workspace_roots: string[];
    max_sandbox_mode: SandboxMode;
    max_sessions: number;
    max_sandboxes: number;
    max_event_streams: number;
    requests_per_minute: number;
    budget_usd: number | null;
    model_providers: string[] | null;
  };
  usage: { sessions: number; event_streams: number };
}

/** `GET /v1/web/search/health`. */
export interface WebSearchHealth {
  selected: string | null;
  selection_error: string | null;
  providers: Array<{ id: string; name: string; configured: boolean; selected: boolean; healthy: boolean; detail: string; checked_at: string }>;
}

/** `GET /healthz`. */
export type Health = { status: "ok" } | { status: "unavailable"; problems: string[] };
