// MCP clients per session. A session's stdio servers run in its own sandbox container, one
// client (and process) per (session, server); HTTP servers are shared per (tenant, configuration
// hash); an operator's `run: "host"` servers per configuration hash. Each client is a one-server
// McpBridge (generations, pins, reconnect, filters, timeouts); the session's view joins them in
// configuration order and withholds a tool whose public name an earlier server already uses.
import { createHash } from "node:crypto";
import { type Bus, DEFAULT_SILENCE_MS, SandboxRpc, TackError } from "@tack/bus";
import { type CallMcpToolRequest, type CallMcpToolResponse, type ListMcpToolsRequest, type ListMcpToolsResponse, type McpServerState, type McpTool } from "@tack/proto";
import { McpBridge, type BackoffOptions, type BridgeTool } from "./bridge.js";
import type { McpServerConfig } from "@tack/mcp-config";
import { checkHttpServer } from "./http-guard.js";
import { sandboxSpawn } from "./sandbox-stdio.js";
import type { ConfigSources, ConfiguredServer } from "./sources.js";
import { spawnOnHost, type HttpOptions, type Spawn } from "./transport.js";

/** A session's clients stop after this long without a list or a call. */
export const SESSION_IDLE_MS = 15 * 60_000;
const ENSURE_TIMEOUT_MS = 60_000;

export interface SessionsOptions {
  readonly bus: Bus;
  readonly sources: ConfigSources;
  readonly http: HttpOptions;
  readonly callTimeoutMs?: number;
  readonly startTimeoutMs?: number;
  readonly backoff?: BackoffOptions;
  /** How an operator's `run: "host"` servers start (default: host child processes). */
  readonly hostSpawn?: Spawn;
  readonly idleMs?: number;
}

interface Shared {
  readonly bridge: Promise<McpBridge>;
  refs: number;
}

/** One server of one session's view. */
interface Handle {
  readonly name: string;
  readonly source: string;
  readonly transport: "stdio" | "http";
  /** Source and configuration: a change restarts the client. */
  readonly hash: string;
  readonly bridge?: McpBridge;
  /** Key in the shared table, for HTTP and host servers. */
  readonly shared?: string;
  /** Why there is no client: a broken entry, a refused URL, a sandbox that could not start. */
  readonly failed?: string;
}

interface View {
  readonly sessionId: string;
  readonly tenant: string;
  readonly workspace: string;
  readonly mode: string;
  handles: Handle[];
  fileWarnings: string[];
  lastUsedAt: number;
  /** Lists and calls under way: a view is never idle while one runs. */
  active: number;
  closed: boolean;
  /** Refreshes run one at a time per session. */
  busy: Promise<unknown>;
}

function hashOf(server: ConfiguredServer): string {
  return createHash("sha256").update(JSON.stringify([server.source, server.config ?? null, server.broken ?? null])).digest("hex").slice(0, 16);
}

function transportOf(server: ConfiguredServer): "stdio" | "http" {
  return server.config && "url" in server.config ? "http" : "stdio";
}

/** The MCP servers of every session this replica serves. */
export class McpSessions {
  readonly #options: SessionsOptions;
  readonly #views = new Map<string, View>();
  readonly #shared = new Map<string, Shared>();
  readonly #sweeper: NodeJS.Timeout;
  #closed = false;

  constructor(options: SessionsOptions) {
    this.#options = options;
    const idleMs = options.idleMs ?? SESSION_IDLE_MS;
    this.#sweeper = setInterval(() => this.#sweep(idleMs), Math.min(60_000, Math.max(idleMs / 4, 50)));
    this.#sweeper.unref();
  }

  /** Sessions with clients now. */
  get sessions(): string[] {
    return [...this.#views.keys()];
  }

  /** `mcp.list`: the session's tools and servers (started on the first list, cached after); no session: the configuration only. */
  async list(request: ListMcpToolsRequest): Promise<ListMcpToolsResponse> {
    if (!request.sessionId) {
      const merged = await this.#options.sources.merged(request.workspace);
      return {
        tools: [],
        servers: merged.servers.map((server) => ({
          name: server.name, state: server.broken ? "failed" : "configured", error: server.broken ?? "", tools: [], warnings: server.broken ? [server.broken] : [], source: server.source, transport: transportOf(server),
        })),
        warnings: merged.warnings,
      };
    }
    const view = await this.#refresh(request);
    return this.#render(view);
  }

  /** `mcp.call`: calls a tool of the session's servers by its public name. */
  async call(request: CallMcpToolRequest, signal: AbortSignal): Promise<CallMcpToolResponse> {
    if (!request.sessionId) throw new TackError("mcp.bad_request", "mcp.call needs session_id (and tenant, workspace, sandbox_mode): MCP servers run per session");
    let view = this.#views.get(request.sessionId);
    if (!view || view.closed || view.mode !== request.sandboxMode) view = await this.#refresh(request);
    const found = this.#tools(view).tools.find(([tool]) => tool.publicName === request.publicName);
    if (!found) throw new TackError("mcp.unknown_tool", `no MCP tool named "${request.publicName}" in session ${request.sessionId}; list the current ones on mcp.list (a server may have dropped it or failed)`);
    const [tool, bridge] = found;
    view.active += 1;
    let result;
    try {
      result = await bridge.call(tool.publicName, request.argumentsJson, { signal });
    } finally {
      view.active -= 1;
      view.lastUsedAt = Date.now();
    }
    return { content: result.content, isError: result.isError, rawJson: result.rawJson, durationMs: result.durationMs, server: tool.server, tool: tool.tool };
  }

  /** The bridge of one server of a session (state, pids, restarts; tests). */
  bridge(sessionId: string, server: string): McpBridge | undefined {
    return this.#views.get(sessionId)?.handles.find((h) => h.name === server)?.bridge;
  }

  /** Stops a session's clients (its stdio servers end; shared ones lose a reference). */
  async release(sessionId: string): Promise<void> {
    const view = this.#views.get(sessionId);
    if (!view) return;
    this.#views.delete(sessionId);
    view.closed = true;
    await view.busy.catch(() => undefined);
    await Promise.allSettled(view.handles.map((h) => this.#closeHandle(h)));
  }

  /** Stops every client. */
  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#sweeper);
    await Promise.allSettled([...this.#views.keys()].map((id) => this.release(id)));
    await Promise.allSettled([...this.#shared.values()].map(async (s) => (await s.bridge).close()));
    this.#shared.clear();
  }

  async #refresh(request: { tenant: string; sessionId: string; workspace: string; sandboxMode: string }): Promise<View> {
    if (this.#closed) throw new TackError("mcp.unavailable", "the MCP service is stopping; retry", { retryable: true });
    let view = this.#views.get(request.sessionId);
    if (view && (view.tenant !== request.tenant || view.workspace !== request.workspace || view.mode !== request.sandboxMode)) {
      // Another mode's container (or a request that does not match): start over.
      await this.release(request.sessionId);
      view = undefined;
    }
    if (!view) {
      view = { sessionId: request.sessionId, tenant: request.tenant, workspace: request.workspace, mode: request.sandboxMode, handles: [], fileWarnings: [], lastUsedAt: Date.now(), active: 0, closed: false, busy: Promise.resolve() };
      this.#views.set(request.sessionId, view);
    }
    const current = view;
    current.active += 1;
    try {
      const run = current.busy.then(() => this.#sync(current));
      current.busy = run.catch(() => undefined);
      await run;
    } finally {
      current.active -= 1;
      current.lastUsedAt = Date.now();
    }
    return current;
  }

  /** Brings the view's clients in line with the merged configuration: unchanged ones stay, changed ones restart. */
  async #sync(view: View): Promise<void> {
    if (view.closed) return;
    const merged = await this.#options.sources.merged(view.workspace);
    view.fileWarnings = merged.warnings;
    const wanted = merged.servers.map((server) => ({ server, hash: hashOf(server) }));
    const keep = new Map(view.handles.map((h) => [h.name, h]));
    const next: Array<Handle | Promise<Handle>> = [];
    let ensured: Promise<string | undefined> | undefined;
    const ensure = () => (ensured ??= this.#ensureSandbox(view));
    for (const { server, hash } of wanted) {
      const existing = keep.get(server.name);
      if (existing && existing.hash === hash && !(existing.failed && existing.transport === "stdio" && !server.broken)) {
        keep.delete(server.name);
        next.push(existing);
        continue;
      }
      next.push(this.#open(view, server, hash, ensure));
    }
    const handles = await Promise.all(next);
    // What is no longer configured (or restarted with a new configuration) goes.
    const kept = new Set(handles);
    await Promise.allSettled(view.handles.filter((h) => !kept.has(h)).map((h) => this.#closeHandle(h)));
    if (view.closed) {
      await Promise.allSettled(handles.filter((h) => !view.handles.includes(h)).map((h) => this.#closeHandle(h)));
      return;
    }
    view.handles = handles;
  }

  async #open(view: View, server: ConfiguredServer, hash: string, ensure: () => Promise<string | undefined>): Promise<Handle> {
    const base = { name: server.name, source: server.source, transport: transportOf(server), hash };
    if (server.broken || !server.config) return { ...base, failed: server.broken ?? "no configuration" };
    const config = server.config;
    const bridgeOptions = { callTimeoutMs: this.#options.callTimeoutMs, startTimeoutMs: this.#options.startTimeoutMs, backoff: this.#options.backoff, http: this.#options.http };
    if ("url" in config) {
      if (this.#options.http.guard) {
        try {
          await checkHttpServer(config.url, this.#options.http.guard);
        } catch (error) {
          return { ...base, failed: `MCP server "${server.name}": ${(error as Error).message}` };
        }
      }
      const key = `http ${view.tenant} ${server.name} ${hash}`;
      return { ...base, shared: key, bridge: await this.#share(key, () => McpBridge.start({ ...bridgeOptions, servers: { [server.name]: config } })) };
    }
    if (config.run === "host") {
      const key = `host ${server.name} ${hash}`;
      return { ...base, shared: key, bridge: await this.#share(key, () => McpBridge.start({ ...bridgeOptions, servers: { [server.name]: config }, spawn: this.#options.hostSpawn ?? spawnOnHost })) };
    }
    const problem = await ensure();
    if (problem) return { ...base, failed: `MCP server "${server.name}" did not start: ${problem}` };
    const spawn = sandboxSpawn(this.#options.bus, {
      sessionId: view.sessionId,
      mode: view.mode,
      // The container is gone (released, deleted, reaped, its replica lost): the session's clients stop; the next list starts them in a new one.
      onGone: () => setImmediate(() => void this.release(view.sessionId)),
    });
    return { ...base, bridge: await McpBridge.start({ ...bridgeOptions, servers: { [server.name]: config }, spawn }) };
  }

  /** Makes sure the session's container runs (as the tools do); undefined, or why it cannot. */
  async #ensureSandbox(view: View): Promise<string | undefined> {
    try {
      await this.#options.bus.request(SandboxRpc.EnsureSandbox, { sessionId: view.sessionId, tenant: view.tenant, workspace: view.workspace, mode: view.mode }, {
        timeoutMs: ENSURE_TIMEOUT_MS, silenceMs: DEFAULT_SILENCE_MS,
      });
      return undefined;
    } catch (error) {
      return `the session's sandbox could not be started (${(error as Error).message})`;
    }
  }

  async #share(key: string, start: () => Promise<McpBridge>): Promise<McpBridge> {
    let shared = this.#shared.get(key);
    if (!shared) {
      shared = { bridge: start(), refs: 0 };
      this.#shared.set(key, shared);
    }
    shared.refs += 1;
    return shared.bridge;
  }

  async #closeHandle(handle: Handle): Promise<void> {
    if (!handle.bridge) return;
    if (!handle.shared) return handle.bridge.close();
    const shared = this.#shared.get(handle.shared);
    if (!shared) return;
    shared.refs -= 1;
    if (shared.refs <= 0) {
      this.#shared.delete(handle.shared);
      await (await shared.bridge).close();
    }
  }

  /** The view's tools in order, each with its bridge, and the names withheld per server because an earlier server has them. */
  #tools(view: View): { tools: Array<[BridgeTool, McpBridge]>; withheld: Map<string, string[]> } {
    const seen = new Map<string, string>();
    const tools: Array<[BridgeTool, McpBridge]> = [];
    const withheld = new Map<string, string[]>();
    for (const handle of view.handles) {
      if (!handle.bridge) continue;
      for (const tool of handle.bridge.listTools()) {
        if (tool.server !== handle.name) continue;
        const owner = seen.get(tool.publicName);
        if (owner) {
          withheld.set(handle.name, [...(withheld.get(handle.name) ?? []), `${tool.publicName} (tool "${tool.tool}" and ${owner})`]);
          continue;
        }
        seen.set(tool.publicName, `tool "${tool.tool}" of server "${handle.name}"`);
        tools.push([tool, handle.bridge]);
      }
    }
    return { tools, withheld };
  }

  #render(view: View): ListMcpToolsResponse {
    const { tools, withheld } = this.#tools(view);
    const servers: McpServerState[] = view.handles.map((handle) => {
      const base = { name: handle.name, source: handle.source, transport: handle.transport };
      if (!handle.bridge) return { ...base, state: "failed", error: handle.failed ?? "", tools: [], warnings: handle.failed ? [handle.failed] : [] };
      const state = handle.bridge.servers().find((s) => s.name === handle.name);
      const refused = withheld.get(handle.name);
      const clash = refused ? `tools withheld, their public names collide with an earlier server's: ${refused.join("; ")} (rename a server or disable a tool)` : "";
      return {
        ...base,
        state: state?.state ?? "failed",
        error: [state?.error, clash].filter(Boolean).join("; "),
        tools: tools.filter(([tool]) => tool.server === handle.name).map(([tool]) => tool.publicName),
        warnings: [...(state?.warnings ?? []), ...(clash ? [`MCP server "${handle.name}": ${clash}`] : [])],
      };
    });
    const out: McpTool[] = tools.map(([t]) => ({ publicName: t.publicName, server: t.server, tool: t.tool, description: t.description, parametersJson: JSON.stringify(t.parameters), approval: t.approval }));
    return { tools: out, servers, warnings: view.fileWarnings };
  }

  #sweep(idleMs: number): void {
    const now = Date.now();
    for (const view of this.#views.values()) if (view.active === 0 && now - view.lastUsedAt >= idleMs) void this.release(view.sessionId);
  }
}

export type { McpServerConfig };
