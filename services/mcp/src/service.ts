import { homedir } from "node:os";
import { Bus, registerMicro, serviceNamespace, type BusAuth } from "@tack/bus";
import { CallMcpToolRequest, CallMcpToolResponse, ListMcpToolsRequest, ListMcpToolsResponse } from "@tack/proto";
import type { FetchLike } from "@modelcontextprotocol/sdk/shared/transport.js";
import type { BackoffOptions } from "./bridge.js";
import type { McpServerConfig } from "@tack/mcp-config";
import { httpGuard, type HttpGuard } from "./http-guard.js";
import { McpSessions } from "./sessions.js";
import { ConfigSources } from "./sources.js";
import type { Spawn } from "./transport.js";

/** How to start the MCP bridge service. */
export interface McpServiceOptions {
  /** NATS server URL, e.g. `nats://127.0.0.1:4222`. */
  natsUrl: string;
  /** NATS user and TLS files (`commonConfig().natsAuth`); none for an open NATS. */
  natsAuth?: BusAuth;
  /** Subject namespace (default `tack`); tests use a unique one. */
  namespace?: string;
  /** The operator's MCP servers (validated with `parseServers` or an import). */
  servers: Readonly<Record<string, McpServerConfig>>;
  /** Whose `~/.tack/mcp.json` is read (default: this process's home directory; `null`: none). */
  home?: string | null;
  /** CIDRs or addresses HTTP servers may have although the guard refuses them (`TACK_MCP_HTTP_ALLOW`); default none. */
  httpAllow?: string;
  /** The HTTP guard itself (tests pass one with their own resolver); default `httpGuard(httpAllow)`. */
  httpGuard?: HttpGuard;
  /** Replaces the guarded fetch of HTTP servers (tests only). */
  httpFetch?: FetchLike;
  /** Call timeout of servers that set none (default 60 s). */
  callTimeoutMs?: number;
  backoff?: BackoffOptions;
  /** How the operator's `run: "host"` servers start (default: host child processes). */
  hostSpawn?: Spawn;
  /** A session's clients stop after this long without a list or call (default 15 minutes). */
  idleMs?: number;
}

/** A running MCP bridge service. */
export interface McpService {
  /** The sessions' clients (state, pids, restarts). */
  readonly sessions: McpSessions;
  /** Stops taking calls, waits for the ones in flight, stops the servers and closes the connection. */
  stop(): Promise<void>;
}

/** Queue group of all replicas; each replica runs its own clients (a session's servers start where it is first listed or called). */
const QUEUE = "mcp";

/**
 * Serves `mcp.list` (a session's tools and server states; the configured servers without a
 * session) and `mcp.call` in queue group `mcp`. Servers are configured by the operator, the
 * user's `~/.tack/mcp.json` and the workspace's `.mcp.json`; stdio servers run in the session's
 * sandbox container, HTTP servers are reached through web_fetch's guard.
 */
export async function startMcpService(options: McpServiceOptions): Promise<McpService> {
  const namespace = serviceNamespace("mcp", options);
  const guard = options.httpGuard ?? httpGuard(options.httpAllow ?? "");
  const bus = await Bus.connect({ url: options.natsUrl, namespace, name: "tack-mcp", ...options.natsAuth });
  const sources = new ConfigSources(options.servers, options.home === null ? undefined : (options.home ?? homedir()));
  const sessions = new McpSessions({
    bus, sources, http: { guard, fetch: options.httpFetch }, callTimeoutMs: options.callTimeoutMs, backoff: options.backoff, hostSpawn: options.hostSpawn, idleMs: options.idleMs,
  });
  const stopping = new AbortController();
  const inFlight = new Set<Promise<unknown>>();
  const track = <T>(promise: Promise<T>): Promise<T> => {
    inFlight.add(promise);
    void promise.finally(() => inFlight.delete(promise)).catch(() => undefined);
    return promise;
  };

  const subscriptions = [
    bus.serve(bus.names.mcpList, QUEUE, ListMcpToolsRequest, ListMcpToolsResponse, (request: ListMcpToolsRequest) => track(sessions.list(request))),
    bus.serve(bus.names.mcpCall, QUEUE, CallMcpToolRequest, CallMcpToolResponse, (request: CallMcpToolRequest) => track(sessions.call(request, stopping.signal))),
  ];
  await registerMicro(bus, { service: "mcp", description: "tools of the configured MCP servers" });

  return {
    sessions,
    async stop() {
      for (const subscription of subscriptions) subscription.unsubscribe();
      stopping.abort();
      await Promise.allSettled(inFlight);
      await new Promise((resolve) => setImmediate(resolve));
      await sessions.close();
      await bus.close();
    },
  };
}
