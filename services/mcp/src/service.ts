import { Bus, registerMicro, serviceNamespace, type BusAuth } from "@tack/bus";
import { CallMcpToolRequest, CallMcpToolResponse, ListMcpToolsRequest, ListMcpToolsResponse } from "@tack/proto";
import { McpBridge, type BackoffOptions } from "./bridge.js";
import type { McpServerConfig } from "./config.js";
import type { Spawn } from "./transport.js";

/** How to start the MCP bridge service. */
export interface McpServiceOptions {
  /** NATS server URL, e.g. `nats://127.0.0.1:4222`. */
  natsUrl: string;
  /** NATS user and TLS files (`commonConfig().natsAuth`); none for an open NATS. */
  natsAuth?: BusAuth;
  /** Subject namespace (default `tack`); tests use a unique one. */
  namespace?: string;
  /** The MCP servers (validated with `parseServers` or an import). */
  servers: Readonly<Record<string, McpServerConfig>>;
  /** Call timeout of servers that set none (default 60 s). */
  callTimeoutMs?: number;
  backoff?: BackoffOptions;
  spawn?: Spawn;
}

/** A running MCP bridge service. */
export interface McpService {
  /** The bridge behind the subjects (state, pids, restarts). */
  readonly bridge: McpBridge;
  /** Stops taking calls, waits for the ones in flight, stops the servers and closes the connection. */
  stop(): Promise<void>;
}

/** Queue group of all replicas; each replica runs its own clients of the same servers. */
const QUEUE = "mcp";

/**
 * Starts one client per configured server, then serves `mcp.list` (tools and server states)
 * and `mcp.call` in queue group `mcp`. Servers that fail to start are listed with their error.
 */
export async function startMcpService(options: McpServiceOptions): Promise<McpService> {
  const namespace = serviceNamespace("mcp", options);
  const bus = await Bus.connect({ url: options.natsUrl, namespace, name: "tack-mcp", ...options.natsAuth });
  let bridge: McpBridge;
  try {
    bridge = await McpBridge.start({ servers: options.servers, callTimeoutMs: options.callTimeoutMs, backoff: options.backoff, spawn: options.spawn });
  } catch (error) {
    await bus.close();
    throw error;
  }
  const stopping = new AbortController();
  const inFlight = new Set<Promise<unknown>>();
  const track = <T>(promise: Promise<T>): Promise<T> => {
    inFlight.add(promise);
    void promise.finally(() => inFlight.delete(promise)).catch(() => undefined);
    return promise;
  };

  const subscriptions = [
    bus.serve(bus.names.mcpList, QUEUE, ListMcpToolsRequest, ListMcpToolsResponse, async () => ({
      tools: bridge.listTools().map((t) => ({ publicName: t.publicName, server: t.server, tool: t.tool, description: t.description, parametersJson: JSON.stringify(t.parameters), approval: t.approval })),
      servers: bridge.servers(),
    })),
    bus.serve(bus.names.mcpCall, QUEUE, CallMcpToolRequest, CallMcpToolResponse, (request: CallMcpToolRequest) =>
      track(bridge.call(request.publicName, request.argumentsJson, { signal: stopping.signal }).then((r) => ({ content: r.content, isError: r.isError, rawJson: r.rawJson, durationMs: r.durationMs }))),
    ),
  ];
  await registerMicro(bus, { service: "mcp", description: "tools of the configured MCP servers" });

  return {
    bridge,
    async stop() {
      for (const subscription of subscriptions) subscription.unsubscribe();
      stopping.abort();
      await Promise.allSettled(inFlight);
      await new Promise((resolve) => setImmediate(resolve));
      await bridge.close();
      await bus.close();
    },
  };
}
