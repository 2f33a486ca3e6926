// One MCP client per configured server, their tools as one list of public names, and calls.
// Tool lists change in generations: the whole next list is fetched and checked before it
// replaces the current one, so the model never sees half a list or two tools of one name.
import { createHash } from "node:crypto";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { ErrorCode, McpError, ToolListChangedNotificationSchema, type Tool } from "@modelcontextprotocol/sdk/types.js";
import { TackError } from "@tack/bus";
import type { Approval, McpServerConfig } from "@tack/mcp-config";
import { renderContent, type McpContentBlock } from "./content.js";
import { publicToolName } from "./names.js";
import { linearSchemaValidator } from "./schema-validator.js";
import { createTransport, spawnOnHost, tail, type HttpOptions, type Spawn, type SpawnedTransport } from "./transport.js";

/** Longest description passed to the model; a longer one is cut and says so. */
export const DESCRIPTION_CAP = 2048;
const CUT_NOTE = "\n[description cut at 2 KB]";

/** One tool offered to the model. */
export interface BridgeTool {
  readonly publicName: string;
  readonly server: string;
  readonly tool: string;
  readonly description: string;
  /** The input JSON Schema. */
  readonly parameters: Record<string, unknown>;
  readonly approval: Approval;
}

export type ServerStatus = "connecting" | "ready" | "reconnecting" | "failed";

/** One server as the loop and `tack mcp list` see it. */
export interface ServerState {
  readonly name: string;
  readonly state: ServerStatus;
  /** Why it is not ready, or why its last tool list was refused; empty when all is well. */
  readonly error: string;
  /** Public names of its tools. */
  readonly tools: string[];
  readonly warnings: string[];
}

/** The result of one call. */
export interface McpCallResult {
  /** What the model reads: text joined, other content as placeholders. */
  readonly content: string;
  readonly isError: boolean;
  /** The whole MCP result (or the failure) as JSON, for the log. */
  readonly rawJson: string;
  readonly durationMs: number;
}

/** Reconnection after a server that was ready goes away. */
export interface BackoffOptions {
  /** First delay (default 500 ms), doubled after each failed attempt up to `maxMs` (default 30 s). */
  initialMs?: number;
  maxMs?: number;
  /** Attempts before the server is given up (default 10). */
  attempts?: number;
  /** A connection up this long gets its whole budget back (default 30 s). */
  stableMs?: number;
}

export interface BridgeOptions {
  servers: Readonly<Record<string, McpServerConfig>>;
  /** Call timeout of servers that set none (default 60 s). */
  callTimeoutMs?: number;
  /** How long connecting and listing may take (default 30 s). */
  startTimeoutMs?: number;
  backoff?: BackoffOptions;
  /** How stdio servers are started (default: host child processes). */
  spawn?: Spawn;
  /** How HTTP servers are reached (the guard, or a test's fetch). */
  http?: HttpOptions;
}

/** Pin of a tool: what the user agreed to when it was first listed. */
function pin(tool: Tool): string {
  return createHash("sha256").update(JSON.stringify([tool.name, tool.description ?? "", tool.inputSchema])).digest("hex");
}

function capDescription(text: string): string {
  return text.length <= DESCRIPTION_CAP ? text : text.slice(0, DESCRIPTION_CAP - CUT_NOTE.length) + CUT_NOTE;
}

const MAX_WARNINGS = 20;

type SyncOutcome = "swapped" | "list_failed" | "collision" | "stale";

class Connection {
  state: ServerStatus = "connecting";
  error = "";
  tools = new Map<string, BridgeTool>();
  readonly pins = new Map<string, string>();
  warnings: string[] = [];
  client?: Client;
  spawned?: SpawnedTransport;
  /** Reconnect attempts since the last stable connection. */
  attempts = 0;
  stableTimer?: NodeJS.Timeout;
  retryTimer?: NodeJS.Timeout;
  /** Tool list syncs run one at a time. */
  syncing: Promise<void> = Promise.resolve();

  constructor(readonly name: string, readonly config: McpServerConfig) {}
}

export class McpBridge {
  readonly #connections = new Map<string, Connection>();
  readonly #callTimeoutMs: number;
  readonly #startTimeoutMs: number;
  readonly #backoff: Required<BackoffOptions>;
  readonly #spawn: Spawn;
  readonly #http: HttpOptions;
  /** Warnings not yet taken by `takeWarnings`. */
  #pending: string[] = [];
  #closed = false;

  private constructor(options: BridgeOptions) {
    this.#callTimeoutMs = options.callTimeoutMs ?? 60_000;
    this.#startTimeoutMs = options.startTimeoutMs ?? 30_000;
    this.#backoff = { initialMs: 500, maxMs: 30_000, attempts: 10, stableMs: 30_000, ...options.backoff };
    this.#spawn = options.spawn ?? spawnOnHost;
    this.#http = options.http ?? {};
    for (const [name, config] of Object.entries(options.servers)) this.#connections.set(name, new Connection(name, config));
  }

  /**
   * Connects to every server at once and lists their tools; resolves when each is ready or
   * failed. A server that cannot start is `failed` with its error (and stderr) and is not
   * retried (its configuration needs fixing; `restart` tries again); the others work.
   */
  static async start(options: BridgeOptions): Promise<McpBridge> {
    const bridge = new McpBridge(options);
    await Promise.all([...bridge.#connections.values()].map((c) => bridge.#connect(c).catch((error: unknown) => {
      c.state = "failed";
      c.error = (error as Error).message;
      bridge.#warn(c, c.error);
    })));
    return bridge;
  }

  /** Every tool of every server, in configuration order then the server's order. */
  listTools(): BridgeTool[] {
    return [...this.#connections.values()].filter((c) => c.state !== "failed").flatMap((c) => [...c.tools.values()]);
  }

  servers(): ServerState[] {
    return [...this.#connections.values()].map((c) => ({ name: c.name, state: c.state, error: c.error, tools: [...c.tools.keys()], warnings: [...c.warnings] }));
  }

  /** Warnings since the last call (changed tools, refused tool lists, reconnects given up); the loop logs them. */
  takeWarnings(): string[] {
    const out = this.#pending;
    this.#pending = [];
    return out;
  }

  /** The process id of a stdio server (undefined for HTTP or when it is not running). */
  pid(server: string): number | undefined {
    return this.#connections.get(server)?.spawned?.pid();
  }

  /** Connects a failed server again, with a fresh reconnect budget. */
  async restart(server: string): Promise<ServerState> {
    const c = this.#connections.get(server);
    if (!c) throw new TackError("mcp.unknown_server", `no MCP server named "${server}"; configured: ${[...this.#connections.keys()].join(", ") || "none"}`);
    clearTimeout(c.retryTimer);
    await this.#disconnect(c);
    c.attempts = 0;
    c.state = "connecting";
    try {
      await this.#connect(c);
    } catch (error) {
      c.state = "failed";
      c.error = (error as Error).message;
    }
    return this.servers().find((s) => s.name === server)!;
  }

  /** Calls a tool by its public name with the model's arguments (JSON text of an object). */
  async call(publicName: string, argumentsJson: string, options: { signal?: AbortSignal; timeoutMs?: number } = {}): Promise<McpCallResult> {
    const started = performance.now();
    const found = this.#find(publicName);
    if (!found) throw new TackError("mcp.unknown_tool", `no MCP tool named "${publicName}"; list the current ones on mcp.list (a server may have dropped it or failed)`);
    const [c, tool] = found;
    const done = (content: string, isError: boolean, raw: unknown): McpCallResult => ({ content, isError, rawJson: JSON.stringify(raw), durationMs: performance.now() - started });
    let args: unknown;
    try {
      args = argumentsJson.trim() === "" ? {} : JSON.parse(argumentsJson);
    } catch (error) {
      return done(`arguments of ${publicName} are not valid JSON (${(error as Error).message}); send a JSON object matching its schema`, true, { error: "invalid_arguments" });
    }
    if (typeof args !== "object" || args === null || Array.isArray(args)) {
      return done(`arguments of ${publicName} must be a JSON object matching its schema, got ${Array.isArray(args) ? "an array" : typeof args}`, true, { error: "invalid_arguments" });
    }
    if (c.state !== "ready" || !c.client) {
      throw new TackError("mcp.unavailable", `MCP server "${c.name}" is ${c.state}${c.error ? ` (${c.error})` : ""}; try again once it is ready`, { retryable: c.state !== "failed" });
    }
    const timeoutMs = options.timeoutMs ?? c.config.timeout_ms ?? this.#callTimeoutMs;
    // The SDK never removes its listener from a request's signal: give it one per call, not the caller's long-lived one.
    const own = new AbortController();
    const abort = () => own.abort(options.signal?.reason);
    if (options.signal?.aborted) abort();
    options.signal?.addEventListener("abort", abort, { once: true });
    try {
      const result = await c.client.callTool({ name: tool.tool, arguments: args as Record<string, unknown> }, undefined, { timeout: timeoutMs, signal: own.signal });
      const content = renderContent(result as { content?: McpContentBlock[]; structuredContent?: unknown });
      return done(content, result.isError === true, result);
    } catch (error) {
      const message = error instanceof McpError && error.code === ErrorCode.RequestTimeout
        ? `${tool.tool} on MCP server "${c.name}" did not answer within ${timeoutMs} ms; it may still be running there`
        : `${tool.tool} on MCP server "${c.name}" failed: ${(error as Error).message}`;
      return done(message, true, { error: message, code: error instanceof McpError ? error.code : undefined });
    } finally {
      options.signal?.removeEventListener("abort", abort);
    }
  }

  /** Closes every client (stdio servers are stopped). */
  async close(): Promise<void> {
    this.#closed = true;
    await Promise.allSettled([...this.#connections.values()].map((c) => {
      clearTimeout(c.retryTimer);
      return this.#disconnect(c);
    }));
  }

  #find(publicName: string): [Connection, BridgeTool] | undefined {
    for (const c of this.#connections.values()) {
      const tool = c.tools.get(publicName);
      if (tool) return [c, tool];
    }
    return undefined;
  }

  #warn(c: Connection, message: string): void {
    c.warnings = [...c.warnings, message].slice(-MAX_WARNINGS);
    this.#pending.push(message);
  }

  async #connect(c: Connection): Promise<void> {
    const spawned = createTransport(c.name, c.config, this.#spawn, this.#http);
    const stderr = tail(spawned.stderr);
    const client = new Client({ name: "tack-mcp", version: "0.1.0" }, { capabilities: {}, jsonSchemaValidator: linearSchemaValidator });
    c.spawned = spawned;
    c.client = client;
    try {
      await client.connect(spawned.transport, { timeout: this.#startTimeoutMs });
    } catch (error) {
      await client.close().catch(() => undefined);
      const where = "command" in c.config ? `command ${JSON.stringify([c.config.command, ...c.config.args].join(" "))}` : `url ${c.config.url}`;
      // Let the last stderr lines of a crashed process arrive before quoting them.
      await new Promise((resolve) => setTimeout(resolve, 50));
      const said = stderr();
      throw new TackError("mcp.start_failed", `MCP server "${c.name}" did not start (${where}): ${(error as Error).message}${said ? `; its stderr ends: ${said.slice(-500)}` : ""}; check the server's configuration`, { cause: error });
    }
    client.setNotificationHandler(ToolListChangedNotificationSchema, async () => {
      await this.#sync(c, client);
    });
    client.onclose = () => this.#lost(c, client);
    const listed = await this.#sync(c, client);
    if (listed === "list_failed" && c.state === "connecting") {
      await this.#disconnect(c);
      throw new TackError("mcp.start_failed", `MCP server "${c.name}" started but ${c.error}`);
    }
    c.state = "ready";
    clearTimeout(c.stableTimer);
    c.stableTimer = setTimeout(() => {
      c.attempts = 0;
    }, this.#backoff.stableMs);
    c.stableTimer.unref();
  }

  async #disconnect(c: Connection): Promise<void> {
    clearTimeout(c.stableTimer);
    const client = c.client;
    c.client = undefined;
    if (client) {
      client.onclose = undefined;
      await client.close().catch(() => undefined);
    }
  }

  /** A ready server's connection ended: reconnect with backoff; its tools stay listed meanwhile. */
  #lost(c: Connection, client: Client): void {
    if (this.#closed || c.client !== client) return;
    clearTimeout(c.stableTimer);
    c.client = undefined;
    c.state = "reconnecting";
    c.error = "connection lost";
    this.#scheduleReconnect(c);
  }

  #scheduleReconnect(c: Connection): void {
    if (c.attempts >= this.#backoff.attempts) {
      c.state = "failed";
      c.error = `gave up after ${c.attempts} reconnect attempts (${c.error}); its tools are withdrawn; fix the server and restart it`;
      c.tools = new Map();
      this.#warn(c, `MCP server "${c.name}" ${c.error}`);
      return;
    }
    const delay = Math.min(this.#backoff.initialMs * 2 ** c.attempts, this.#backoff.maxMs);
    c.attempts += 1;
    c.retryTimer = setTimeout(() => {
      if (this.#closed) return;
      this.#connect(c).catch((error: unknown) => {
        c.error = (error as Error).message;
        this.#scheduleReconnect(c);
      });
    }, delay);
  }

  /** Fetches the whole next tool list, checks it, then swaps it in (or keeps the last good one). */
  #sync(c: Connection, client: Client): Promise<SyncOutcome> {
    const outcome = c.syncing.then(() => this.#syncNow(c, client));
    c.syncing = outcome.then(() => undefined, () => undefined);
    return outcome;
  }

  async #syncNow(c: Connection, client: Client): Promise<SyncOutcome> {
    if (c.client !== client) return "stale";
    const listed: Tool[] = [];
    try {
      let cursor: string | undefined;
      do {
        const page = await client.listTools(cursor ? { cursor } : undefined, { timeout: this.#startTimeoutMs });
        listed.push(...page.tools);
        cursor = page.nextCursor;
      } while (cursor);
    } catch (error) {
      c.error = `listing tools failed: ${(error as Error).message}; keeping the last list`;
      this.#warn(c, `MCP server "${c.name}": ${c.error}`);
      return "list_failed";
    }
    const { enabled_tools: enabled, disabled_tools: disabled, approval, default_approval: fallback } = c.config;
    const next = new Map<string, BridgeTool>();
    const collisions: string[] = [];
    const owners = new Map<string, string>();
    for (const other of this.#connections.values()) {
      if (other !== c && other.state !== "failed") for (const [name, tool] of other.tools) owners.set(name, `tool "${tool.tool}" of server "${other.name}"`);
    }
    const changed: string[] = [];
    for (const tool of listed) {
      if (enabled && !enabled.includes(tool.name)) continue;
      if (disabled?.includes(tool.name)) continue;
      const publicName = publicToolName(c.name, tool.name);
      const owner = next.has(publicName) ? `tool "${next.get(publicName)!.tool}" of server "${c.name}"` : owners.get(publicName);
      if (owner) collisions.push(`${publicName} (tool "${tool.name}" and ${owner})`);
      const pinned = c.pins.get(tool.name);
      if (pinned !== undefined && pinned !== pin(tool)) changed.push(tool.name);
      next.set(publicName, {
        publicName,
        server: c.name,
        tool: tool.name,
        description: capDescription(tool.description ?? ""),
        parameters: tool.inputSchema as Record<string, unknown>,
        approval: approval?.[tool.name] ?? fallback ?? "ask",
      });
    }
    if (collisions.length > 0) {
      c.error = `new tool list refused, public names collide: ${collisions.join("; ")}; kept the previous list (rename a server or disable a tool)`;
      this.#warn(c, `MCP server "${c.name}": ${c.error}`);
      return "collision";
    }
    // Each change is reported once: the pin moves to what the user has now been warned about.
    for (const tool of listed) c.pins.set(tool.name, pin(tool));
    for (const name of changed) {
      this.#warn(c, `MCP server "${c.name}" changed tool "${name}" (its name, description or input schema differ from when it was first listed); review it before approving calls`);
    }
    c.tools = next;
    c.error = "";
    return "swapped";
  }
}
