// A typed client of the gateway's REST API and event stream. Runs in browsers and Node ≥ 18:
// only fetch, Headers, ReadableStream, TextDecoder and AbortSignal.
import { TackApiError, errorFromBody } from "./errors.js";
import type { EventJson } from "./events.js";
import { streamSessionEvents, type EventStreamOptions } from "./sse.js";
import type {
  Answer, ApiKeyInfo, AuditPage, CancelledTurn, CompactedSession, ContextSize, CreatedKey, CreatedSession, CreatedWorkspace, CreateSessionInput, DeletedSession,
  DeletedWorkspace, Health, Logged, PostedMessage, SandboxMode, Session, SessionBundle, SessionDetail, SessionPage, SessionQuery, TenantInfo, TenantUsage, Todo,
  WebSearchHealth, Workspace,
} from "./types.js";

/** Where the gateway is and how to reach it. */
export interface TackClientOptions {
  /** The gateway's base URL, e.g. `http://127.0.0.1:7700`; `""` in a page the gateway served (same origin). */
  baseUrl: string;
  /** The API key (`Authorization: Bearer <key>`), or a function read at each request (a key that can change). */
  apiKey: string | (() => string);
  /** The fetch to use (default the global one): a test or a proxy can pass its own. */
  fetch?: typeof fetch;
}

/** What a request can send: the types browsers and Node both accept as a fetch body. */
type RequestBody = NonNullable<RequestInit["body"]>;

type Query = Record<string, string | number | boolean | undefined>;

/**
 * A client of one gateway. Every method resolves with the gateway's JSON answer, typed, or
 * rejects with a `TackApiError` carrying the HTTP status and the gateway's error code (status 0
 * and a `client.*` code when no answer came or it was not what the API promises).
 */
export class TackClient {
  readonly baseUrl: string;
  readonly #apiKey: () => string;
  readonly #fetch: typeof fetch;

  constructor(options: TackClientOptions) {
    if (typeof options.baseUrl !== "string" || (options.baseUrl !== "" && !/^https?:\/\/[^/]+/.test(options.baseUrl))) {
      throw new TackApiError(0, "client.bad_argument", `baseUrl must be the gateway's URL like http://127.0.0.1:7700 (or "" for the page's own origin); got ${JSON.stringify(options.baseUrl)}`);
    }
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    const key = options.apiKey;
    this.#apiKey = typeof key === "function" ? key : () => key;
    // Bound: a browser's fetch must be called on its window.
    this.#fetch = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
  }

  // --- sessions ---------------------------------------------------------------------------

  /** `POST /v1/sessions`: creates a session (its sandbox starts now). */
  createSession(input: CreateSessionInput): Promise<CreatedSession> {
    return this.#json("POST", "/v1/sessions", { body: input });
  }

  /** `GET /v1/sessions`: a page of the caller's sessions, newest first (limit 1..200, default 50), filtered. */
  listSessions(query: SessionQuery = {}): Promise<SessionPage> {
    return this.#json("GET", "/v1/sessions", { query: { ...query } });
  }

  /** Every session of the caller that fits `filter`, page by page (`pageSize` ≤ 200), following `next_cursor`. */
  async *allSessions(filter: Omit<SessionQuery, "limit" | "offset" | "cursor"> = {}, pageSize = 200): AsyncGenerator<SessionPage["sessions"][number]> {
    let cursor: string | undefined;
    let offset = 0;
    for (;;) {
      const page = await this.listSessions({ ...filter, limit: pageSize, ...(cursor ? { cursor } : { offset }) });
      yield* page.sessions;
      if (page.next_cursor) {
        cursor = page.next_cursor;
        continue;
      }
      // The end: a cursor walk without a next cursor, or (a gateway without cursors) a short page.
      if (cursor !== undefined || page.sessions.length < pageSize) return;
      offset += pageSize;
    }
  }

  /** `GET /v1/sessions/:id`: the session with its usage, mode, plan mode, todos and what waits for a person. */
  getSession(id: string): Promise<SessionDetail> {
    return this.#json("GET", session(id));
  }

  /** `DELETE /v1/sessions/:id`: deletes the session, its log, spilled results and sandboxes (409 `gateway.session_busy` while a turn runs). */
  deleteSession(id: string): Promise<DeletedSession> {
    return this.#json("DELETE", session(id));
  }

  /** `POST /v1/sessions/:id/messages`: starts a turn with the text. */
  postMessage(id: string, text: string): Promise<PostedMessage> {
    return this.#json("POST", `${session(id)}/messages`, { body: { text } });
  }

  /** `POST /v1/sessions/:id/cancel`: stops the running turn at its next step boundary (`turn/end` reason `cancelled`); `cancelled: false` when none runs. */
  cancelTurn(id: string): Promise<CancelledTurn> {
    return this.#json("POST", `${session(id)}/cancel`, { body: {} });
  }

  /**
   * `POST /v1/sessions/:id/compact`: summarizes the conversation now (a `user/message` replacing
   * it in the model's view, then `context/summarized`), with `instructions` for what to keep;
   * 409 `loop.compact_busy` while a turn runs, `compacted: false` when there is nothing to compact.
   */
  compactSession(id: string, instructions?: string): Promise<CompactedSession> {
    return this.#json("POST", `${session(id)}/compact`, { body: instructions ? { instructions } : {} });
  }

  /** `POST /v1/sessions/:id/archive`: hides the session from the default list (`false` brings it back); the log stays. */
  archiveSession(id: string, archived = true): Promise<Session> {
    return this.#json("POST", `${session(id)}/archive`, { body: { archived } });
  }

  /** `GET /v1/sessions/:id/export`: the whole log and its spilled objects as one bundle. */
  exportSession(id: string): Promise<SessionBundle> {
    return this.#json("GET", `${session(id)}/export`);
  }

  /** `POST /v1/sessions/:id/fork`: a new session whose log is this one's up to the end of turn `turn` (a turn that has ended; nothing runs again). */
  forkSession(id: string, options: { turn: number; title?: string }): Promise<CreatedSession> {
    return this.#json("POST", `${session(id)}/fork`, { body: options });
  }

  /** `POST /v1/sessions/import`: a new session from an export bundle, in its workspace or `workspace`. */
  importSession(bundle: SessionBundle, workspace?: string): Promise<CreatedSession> {
    return this.#json("POST", "/v1/sessions/import", { body: { ...bundle, ...(workspace === undefined ? {} : { workspace }) } });
  }

  /** `GET /v1/sessions/:id/todos`: the model's task list. */
  async todos(id: string): Promise<Todo[]> {
    return (await this.#json<{ todos: Todo[] }>("GET", `${session(id)}/todos`)).todos;
  }

  /** `GET /v1/sessions/:id/context`: the next request's size in tokens by part (system prompt, tools, conversation). */
  context(id: string): Promise<ContextSize> {
    return this.#json("GET", `${session(id)}/context`);
  }

  // --- events -----------------------------------------------------------------------------

  /**
   * The session's events from `from` (default 1) as they are logged, each once and in seq
   * order. Followed (the default) it reconnects after a drop with `Last-Event-ID` and backoff;
   * with `follow: false` it ends at the current end of the log. See `EventStreamOptions`.
   */
  events(id: string, options: EventStreamOptions = {}): AsyncGenerator<EventJson> {
    return streamSessionEvents((path, headers, signal) => this.#request("GET", path, { headers, signal }), id, options);
  }

  /** The session's log as a list: the events from `from` (default 1) to the current end. */
  async listEvents(id: string, options: { from?: number; signal?: AbortSignal } = {}): Promise<EventJson[]> {
    const out: EventJson[] = [];
    for await (const event of this.events(id, { ...options, follow: false })) out.push(event);
    return out;
  }

  // --- decisions and modes ----------------------------------------------------------------

  /** `POST /v1/sessions/:id/approvals/:call_id`: allows a waiting call once or rejects it (404 `loop.no_pending_approval` when it does not wait). */
  decideApproval(id: string, callId: string, decision: "allow_once" | "reject"): Promise<Logged> {
    return this.#json("POST", `${session(id)}/approvals/${encodeURIComponent(callId)}`, { body: { decision } });
  }

  /** `POST /v1/sessions/:id/questions/:call_id`: answers a waiting ask_user_question call, one answer per question in order. */
  answerQuestion(id: string, callId: string, answers: Answer[]): Promise<Logged> {
    return this.#json("POST", `${session(id)}/questions/${encodeURIComponent(callId)}`, { body: { answers } });
  }

  /** `POST /v1/sessions/:id/plan`: approves or rejects the plan waiting for review. */
  decidePlan(id: string, decision: { approve: boolean; feedback?: string; call_id?: string }): Promise<Logged> {
    return this.#json("POST", `${session(id)}/plan`, { body: decision });
  }

  /** `POST /v1/sessions/:id/plan_mode`: enters or leaves plan mode. */
  setPlanMode(id: string, on: boolean): Promise<Logged & { plan_mode: boolean }> {
    return this.#json("POST", `${session(id)}/plan_mode`, { body: { on } });
  }

  /** `POST /v1/sessions/:id/mode`: changes the session's mode before its first message (409 `loop.mode_fixed` after). */
  setSessionMode(id: string, mode: string): Promise<Logged & { mode: string }> {
    return this.#json("POST", `${session(id)}/mode`, { body: { mode } });
  }

  /** `POST /v1/sessions/:id/sandbox_mode`: changes the sandbox mode (409 while a turn runs). */
  setSandboxMode(id: string, mode: SandboxMode): Promise<Logged & { sandbox_mode: SandboxMode }> {
    return this.#json("POST", `${session(id)}/sandbox_mode`, { body: { mode } });
  }

  // --- tenant -----------------------------------------------------------------------------

  /** `GET /v1/usage`: what the caller's tenant has spent. */
  usage(): Promise<TenantUsage> {
    return this.#json("GET", "/v1/usage");
  }

  /** `GET /v1/audit`: the tenant's audit records, newest first. */
  audit(page: { limit?: number; offset?: number } = {}): Promise<AuditPage> {
    return this.#json("GET", "/v1/audit", { query: page });
  }

  /** `GET /v1/web/search/health`: the web_search providers' states (`refresh` probes them; admin keys only). */
  webSearchHealth(options: { refresh?: boolean } = {}): Promise<WebSearchHealth> {
    return this.#json("GET", "/v1/web/search/health", { query: options.refresh ? { refresh: "true" } : {} });
  }

  // --- managed workspaces -----------------------------------------------------------------

  /** `POST /v1/workspaces`: an empty managed workspace, or one from a tar / tar.gz archive. */
  createWorkspace(options: { title?: string; archive?: Uint8Array | Blob; gzip?: boolean } = {}): Promise<CreatedWorkspace> {
    const headers: Record<string, string> = {};
    if (options.archive !== undefined) headers["content-type"] = options.gzip ? "application/gzip" : "application/x-tar";
    return this.#json("POST", "/v1/workspaces", { query: { title: options.title }, raw: options.archive, headers });
  }

  /** `GET /v1/workspaces`: the tenant's managed workspaces. */
  async listWorkspaces(): Promise<Workspace[]> {
    return (await this.#json<{ workspaces: Workspace[] }>("GET", "/v1/workspaces")).workspaces;
  }

  /** `GET /v1/workspaces/:id/archive`: the workspace's files as a tar archive. */
  async workspaceArchive(id: string): Promise<Uint8Array> {
    const response = await this.#request("GET", `/v1/workspaces/${encodeURIComponent(id)}/archive`, { headers: { accept: "application/x-tar" } });
    return new Uint8Array(await response.arrayBuffer());
  }

  /** `DELETE /v1/workspaces/:id`: deletes the workspace and every session working in it. */
  deleteWorkspace(id: string): Promise<DeletedWorkspace> {
    return this.#json("DELETE", `/v1/workspaces/${encodeURIComponent(id)}`);
  }

  // --- admin (admin keys only) ------------------------------------------------------------

  /** `POST /v1/admin/keys`: a new key of the caller's tenant, shown once. */
  createKey(input: { tenant?: string; role?: "admin" | "member"; name?: string } = {}): Promise<CreatedKey> {
    return this.#json("POST", "/v1/admin/keys", { body: input });
  }

  /** `GET /v1/admin/keys`: the tenant's keys (never the keys themselves). */
  async listKeys(): Promise<ApiKeyInfo[]> {
    return (await this.#json<{ keys: ApiKeyInfo[] }>("GET", "/v1/admin/keys")).keys;
  }

  /** `DELETE /v1/admin/keys/:id`: revokes a key created over the API. */
  revokeKey(id: string): Promise<ApiKeyInfo> {
    return this.#json("DELETE", `/v1/admin/keys/${encodeURIComponent(id)}`);
  }

  /** `GET /v1/admin/tenants`: the tenant's policy and what it uses now. */
  async tenants(): Promise<TenantInfo[]> {
    return (await this.#json<{ tenants: TenantInfo[] }>("GET", "/v1/admin/tenants")).tenants;
  }

  /** `GET /v1/openapi.json`: the gateway's OpenAPI 3.1 document. */
  openapi(): Promise<{ openapi: string; paths: Record<string, Record<string, unknown>> } & Record<string, unknown>> {
    return this.#json("GET", "/v1/openapi.json");
  }

  /** `GET /healthz` (no key needed): whether the gateway's index and bus answer (a 503 resolves too). */
  async health(): Promise<Health> {
    const response = await this.#send("GET", "/healthz", { headers: { accept: "application/json" }, auth: false });
    return (await readJson(response, "GET /healthz")) as Health;
  }

  // --- plumbing ---------------------------------------------------------------------------

  async #json<T>(method: string, path: string, options: { body?: unknown; raw?: Uint8Array | Blob; query?: Query; headers?: Record<string, string> } = {}): Promise<T> {
    const headers: Record<string, string> = { accept: "application/json", ...options.headers };
    let body: RequestBody | undefined;
    if (options.body !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(options.body);
    } else if (options.raw !== undefined) {
      body = options.raw as RequestBody;
    }
    const response = await this.#request(method, withQuery(path, options.query), { headers, body });
    return (await readJson(response, `${method} ${path}`)) as T;
  }

  /** Sends a request with the key; a non-2xx answer is thrown as a TackApiError. */
  async #request(method: string, path: string, init: { headers: Record<string, string>; body?: RequestBody; signal?: AbortSignal }): Promise<Response> {
    const response = await this.#send(method, path, { ...init, auth: true });
    if (response.ok) return response;
    const text = await response.text().catch(() => "");
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    const retryAfter = response.headers.get("retry-after");
    const error = errorFromBody(response.status, parsed);
    if (error) {
      if (retryAfter && !error.details.retry_after_seconds) (error.details as Record<string, string>).retry_after_seconds = retryAfter;
      throw error;
    }
    throw new TackApiError(response.status, "client.http_error", `the gateway answered ${method} ${path} with HTTP ${response.status}: ${text.slice(0, 200) || response.statusText}`);
  }

  async #send(method: string, path: string, init: { headers: Record<string, string>; body?: RequestBody; signal?: AbortSignal; auth: boolean }): Promise<Response> {
    const headers = { ...init.headers };
    if (init.auth) {
      const key = this.#apiKey();
      if (!key) throw new TackApiError(401, "client.no_api_key", "no API key: pass apiKey (the gateway's key, e.g. from .tack/api-key or TACK_API_KEY)");
      headers.authorization = `Bearer ${key}`;
    }
    try {
      return await this.#fetch(`${this.baseUrl}${path}`, { method, headers, body: init.body, signal: init.signal });
    } catch (error) {
      if (init.signal?.aborted) throw error;
      const cause = (error as { cause?: { code?: string; message?: string } }).cause;
      throw new TackApiError(0, "client.unreachable", `cannot reach the gateway at ${this.baseUrl || "this page's origin"} (${cause?.code ?? cause?.message ?? (error as Error).message}); is Tack running? Start it with \`make up\``, { cause: error });
    }
  }
}

function session(id: string): string {
  if (typeof id !== "string" || id === "") throw new TackApiError(0, "client.bad_argument", `a session id is required (a string like the id POST /v1/sessions answered); got ${JSON.stringify(id)}`);
  return `/v1/sessions/${encodeURIComponent(id)}`;
}

function withQuery(path: string, query: Query | undefined): string {
  if (!query) return path;
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== undefined) params.set(k, String(v));
  const text = params.toString();
  return text ? `${path}?${text}` : path;
}

async function readJson(response: Response, what: string): Promise<unknown> {
  const text = await response.text();
  try {
    return JSON.parse(text);
  } catch {
    throw new TackApiError(response.status, "client.bad_response", `the gateway's answer to ${what} is not JSON: ${text.slice(0, 200)}`);
  }
}
