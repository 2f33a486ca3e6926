import { homedir } from "node:os";
import { Bus, type BusAuth, endpoint, McpRpc, serviceNamespace, startService } from "@tack/bus";
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

/**
 * Serves `McpRpc.ListTools` (`mcp.list`: a session's tools and server states; the configured
 * servers without a session) and `McpRpc.CallTool` (`mcp.call`) in queue group `mcp`; each
 * replica runs its own clients (a session's servers start where it is first listed or called). Servers are configured by the operator, the
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
  const service = await startService({
    bus, name: "mcp", description: "tools of the configured MCP servers",
    endpoints: (signal) => [
      endpoint(McpRpc.ListTools, (request) => sessions.list(request)),
      endpoint(McpRpc.CallTool, (request) => sessions.call(request, signal)),
    ],
  }).catch(async (error: unknown) => {
    await sessions.close();
    await bus.close();
    throw error;
  });

  return {
    sessions,
    async stop() {
      await service.stop();
      await new Promise((resolve) => setImmediate(resolve));
      await sessions.close();
      await bus.close();
    },
  };
}
