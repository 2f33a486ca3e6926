import { Bus, type BusAuth, endpoint, serviceNamespace, startService, ToolsRpc } from "@tack/bus";
import { SpillBucket } from "@tack/log";
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

/**
 * Connects to the bus and serves the rpcs of `tack.tools.v1.Tools` (`ToolsRpc`, queue group `tools`); every
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
  const service = await startService({
    bus, name: "tools", description: "the agent's tools, run in the session's sandbox",
    endpoints: (signal) => [
      endpoint(ToolsRpc.ListTools, async (request) => ({ tools: listTools(request.mode, request.defined) })),
      endpoint(ToolsRpc.CallTool, (request) => callTool(request, { sandbox, spills, signal, retry, bus })),
      endpoint(ToolsRpc.WebSearchHealth, async (request) => {
        const health = await webSearchHealth(request);
        return { ...health, providers: [...health.providers] };
      }),
      endpoint(ToolsRpc.ReadRules, (request) => readRules(request, sandbox, signal)),
      endpoint(ToolsRpc.ReadHooksConfig, (request) => readHooksConfig(request, sandbox, signal)),
      endpoint(ToolsRpc.RunHook, (request) => runHook(request, sandbox, signal)),
    ],
  }).catch(async (error: unknown) => {
    await bus.close();
    throw error;
  });

  return {
    async stop() {
      await service.stop();
      // Let the bus publish the replies of the calls that just settled before the connection drains.
      await new Promise((resolve) => setImmediate(resolve));
      await bus.close();
    },
  };
}
