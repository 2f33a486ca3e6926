import { Bus, serviceNamespace, type BusAuth } from "@tack/bus";
import { registerMicro } from "@tack/bus";
import { SpillBucket } from "@tack/log";
import {
  CallToolRequest, CallToolResponse, ListToolsRequest, ListToolsResponse, ReadHooksConfigRequest, ReadHooksConfigResponse, ReadRulesRequest, ReadRulesResponse,
  RunHookRequest, RunHookResponse, WebSearchHealthRequest, WebSearchHealthResponse,
} from "@tack/proto";
import { readHooksConfig, runHook } from "./hooks.js";
import { callTool, listTools } from "./registry.js";
import { readRules } from "./rules.js";
import { BusSandboxClient, sandboxRetryPolicy } from "./sandbox.js";
import type { SpillReader } from "./tool.js";
import { webSearchHealth } from "./web/search.js";

/** How to start a tools service. */
export interface ToolsServiceOptions {
  /** NATS server URL, e.g. `nats://127.0.0.1:4222`. */
  natsUrl: string;
  /** NATS user and TLS files (`commonConfig().natsAuth`); none for an open NATS. */
  natsAuth?: BusAuth;
  /** Subject namespace (default `tack`); tests use a unique one. */
  namespace?: string;
  /** How long a call keeps retrying a sandbox service that does not answer (default 60 s). */
  retryWindowMs?: number;
}

/** A running tools service. */
export interface ToolsService {
  /** Stops taking calls, cancels the ones in flight (they answer `tools.cancelled`) and closes the connection. */
  stop(): Promise<void>;
}

/** Queue group shared by all replicas, so each call is handled once. */
const QUEUE = "tools";

/**
 * Connects to the bus and serves `tools.list` and `tools.call` in queue group `tools`; every
 * file and shell operation goes to the session's sandbox through the sandbox service, and
 * `read` of a spilled result goes to the spill bucket in the object store.
 */
export async function startToolsService(options: ToolsServiceOptions): Promise<ToolsService> {
  const namespace = serviceNamespace("tools", options);
  const bus = await Bus.connect({ url: options.natsUrl, namespace, name: "tack-tools", ...options.natsAuth });
  const sandbox = new BusSandboxClient(bus);
  const retry = sandboxRetryPolicy(options.retryWindowMs);
  // The loop creates the spill bucket at its first spill; until then there is nothing to read.
  let bucket: SpillBucket | undefined;
  const spills: SpillReader = {
    async get(address, callId) {
      bucket ??= await SpillBucket.open(bus.nc, bus.names);
      return bucket?.get(address, callId);
    },
  };
  const stopping = new AbortController();
  const inFlight = new Set<Promise<unknown>>();
  const track = <T>(promise: Promise<T>): Promise<T> => {
    inFlight.add(promise);
    void promise.finally(() => inFlight.delete(promise)).catch(() => undefined);
    return promise;
  };

  const subscriptions = [
    bus.serve(bus.names.toolsList, QUEUE, ListToolsRequest, ListToolsResponse, async (request) => ({ tools: listTools(request.mode, request.defined) })),
    bus.serve(bus.names.toolsCall, QUEUE, CallToolRequest, CallToolResponse, (request) =>
      track(callTool(request, { sandbox, spills, signal: stopping.signal, retry, bus })),
    ),
    bus.serve(bus.names.toolsWebHealth, QUEUE, WebSearchHealthRequest, WebSearchHealthResponse, (request) => webSearchHealth(request)),
    bus.serve(bus.names.toolsRules, QUEUE, ReadRulesRequest, ReadRulesResponse, (request) => track(readRules(request, sandbox, stopping.signal))),
    bus.serve(bus.names.toolsHookConfig, QUEUE, ReadHooksConfigRequest, ReadHooksConfigResponse, (request) => track(readHooksConfig(request, sandbox, stopping.signal))),
    bus.serve(bus.names.toolsHookRun, QUEUE, RunHookRequest, RunHookResponse, (request) => track(runHook(request, sandbox, stopping.signal))),
  ];
  // Discoverable as micro-service tack-tools ($SRV.PING/INFO/STATS) once it serves.
  await registerMicro(bus, { service: "tools", description: "the agent's tools, run in the session's sandbox" });

  return {
    async stop() {
      for (const subscription of subscriptions) subscription.unsubscribe();
      stopping.abort();
      await Promise.allSettled(inFlight);
      // Let the bus publish the replies of the calls that just settled before the connection drains.
      await new Promise((resolve) => setImmediate(resolve));
      await bus.close();
    },
  };
}
