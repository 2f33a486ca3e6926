import { join } from "node:path";
import { trace } from "@opentelemetry/api";
import { Bus, endpoint, inSpan, SandboxRpc, startService, TackError, WorkspacesRpc, type ServiceHandle } from "@tack/bus";
import type { EnsureSandboxRequest, ExecRequest, ListProcessesRequest, OpenStdioRequest, ReleaseSandboxRequest } from "@tack/proto";
import { logger } from "@tack/telemetry";
import { installAgent } from "./agent-copy.js";
import type { SandboxBackend } from "./backend.js";
import { DockerBackend } from "./backends/docker.js";
import { SlotMounts } from "./mounts.js";
import { compileOptions, type CompiledOptions, type SandboxServiceOptions } from "./options.js";
import { Placements, replicaSubject } from "./placements.js";
import { Pool, type PoolStatus } from "./pool.js";
import { Router } from "./router.js";
import { Sandboxes } from "./sandboxes.js";
import { StdioStreams } from "./stdio.js";
import { ManagedWorkspaces } from "./workspaces.js";

// How often the pool directory is searched for what dead processes left mounted.
const COLLECT_EVERY_MS = 60_000;

/** A running sandbox service. */
export interface SandboxService {
  /** The validated options with their defaults; `namespace` names the subjects it serves and the containers it owns. */
  readonly options: CompiledOptions;
  /** How full the warm pool is, and why there is none when one was asked for but cannot run here. */
  pool(): PoolStatus;
  /** Resolves once the warm pool holds its `poolSize` containers (at once when there is no pool). */
  whenPoolFull(): Promise<void>;
  /**
   * Stops serving once in-flight requests are answered, removes the unclaimed pool containers and
   * closes the bus connection. Session containers stay (a restarted service with the same replica
   * id takes them back) unless `removeContainers` is true.
   */
  stop(options?: { removeContainers?: boolean }): Promise<void>;
  /** Removes every container this replica owns, with its placement; returns how many were removed. */
  removeAll(): Promise<number>;
}

/**
 * Starts a sandbox replica: validates the options, installs its copy of the exec agent, connects
 * to NATS, opens the placement bucket, takes back this replica's containers, serves
 * ensure/exec/release/processes in queue group `sandbox` and on its own replica subjects, fills
 * the warm pool, reaps idle containers and removes those of replicas that are gone. Fails with a
 * TackError when the options are invalid, the container engine is unreachable, the sandbox image
 * is missing (`sandbox.image_missing`) or NATS is unreachable. Containers are reached only
 * through a SandboxBackend (`options.backend`, default Docker: src/backends/docker.ts).
 */
export async function startSandboxService(options: SandboxServiceOptions): Promise<SandboxService> {
  const compiled = compileOptions(options);
  // Networked sandboxes: the backend keeps the namespace's egress guard (refused when it cannot be enforced).
  const backendOptions = { namespace: compiled.namespace, runtime: compiled.runtime, egress: compiled.operator.sandbox.egress, warn };
  // Docker honours DOCKER_HOST; the default is the local engine's socket.
  const backend: SandboxBackend = options.backend ? options.backend(backendOptions) : new DockerBackend(backendOptions);
  // Before anything is created on the bus: without an engine or the image there is nothing to serve.
  await backend.health();
  await backend.checkImage(compiled.image);
  // Containers mount this copy, taken now: what happens to the checkout later changes no sandbox (decision 0010).
  const agent = await installAgent(compiled.agentSource, compiled.agentDir);
  const bus = await Bus.connect({ url: compiled.natsUrl, namespace: compiled.namespace, name: `tack-sandbox-${compiled.replicaId}`, ...options.natsAuth });
  let pool: Pool | undefined;
  let poolUnavailable: string | undefined;
  let sandboxes: Sandboxes;
  let placements: Placements;
  let workspaces: ManagedWorkspaces;
  try {
    placements = await Placements.open(bus.nc, compiled.namespace);
    if (compiled.poolSize > 0) {
      poolUnavailable = await poolObstacle(backend);
      if (!poolUnavailable) {
        try {
          pool = new Pool(backend, compiled, await SlotMounts.prepare(join(compiled.poolDir, compiled.namespace, compiled.replicaId)), warn, agent);
        } catch (error) {
          poolUnavailable = (error as Error).message;
        }
      }
      if (poolUnavailable) warn(`warm pool off: ${poolUnavailable}`);
    }
    await backend.open();
    sandboxes = new Sandboxes(backend, compiled, placements, pool, warn, agent);
    workspaces = await ManagedWorkspaces.open(bus, compiled.operator);
    await sandboxes.adopt();
  } catch (error) {
    await backend.close(false);
    await bus.close();
    throw error;
  }
  // Long-lived processes (MCP stdio servers) whose stdio travels over the bus (decision 0016).
  const stdio = new StdioStreams(bus, compiled.replicaId);
  const router = new Router(bus, sandboxes, placements, compiled.operator, stdio);

  const ensure = (forwarded: boolean) => (request: EnsureSandboxRequest) =>
    inSpan("sandbox.ensure", { "tack.session_id": request.sessionId, "tack.tenant": request.tenant, "sandbox.mode": request.mode }, async () => {
      const result = await router.ensure(request, forwarded);
      trace.getActiveSpan()?.setAttributes({ "sandbox.created": result.created, "sandbox.pooled": result.pooled, "sandbox.runtime": result.runtime });
      return result;
    });
  const exec = (forwarded: boolean) => (request: ExecRequest) =>
    inSpan("sandbox.exec", { "tack.session_id": request.sessionId, "sandbox.mode": request.mode, "sandbox.command": request.argv[0] ?? "" }, async () => {
      const response = await router.exec(request, forwarded);
      trace.getActiveSpan()?.setAttributes({ "sandbox.exit_code": response.exitCode, "sandbox.timed_out": response.timedOut });
      return response;
    });
  const release = (forwarded: boolean) => async (request: ReleaseSandboxRequest) => ({ removed: await router.release(request, forwarded) });
  const processes = (forwarded: boolean) => (request: ListProcessesRequest) =>
    inSpan("sandbox.processes", { "tack.session_id": request.sessionId, "sandbox.mode": request.mode }, async () => {
      const response = await router.processes(request, forwarded);
      trace.getActiveSpan()?.setAttributes({ "sandbox.processes": response.processes.length });
      return response;
    });
  const stdioOpen = (forwarded: boolean) => (request: OpenStdioRequest) =>
    inSpan("sandbox.stdio.open", { "tack.session_id": request.sessionId, "sandbox.mode": request.mode, "sandbox.command": request.argv[0] ?? "" }, () => router.stdioOpen(request, forwarded));

  // Other replicas check that this one is alive before they take over its containers.
  const ping = bus.nc.subscribe(replicaSubject(compiled.namespace, compiled.replicaId, "ping"), { callback: (_error, message) => void message.respond() });
  const own = { replica: compiled.replicaId };
  let service: ServiceHandle;
  try {
    service = await startService({
      bus, name: "sandbox", description: "sandbox containers and the commands run in them", metadata: { replica: compiled.replicaId, runtime: compiled.runtime },
      endpoints: () => [
        endpoint(SandboxRpc.EnsureSandbox, ensure(false)),
        endpoint(SandboxRpc.Exec, exec(false)),
        endpoint(SandboxRpc.ReleaseSandbox, release(false)),
        endpoint(SandboxRpc.ListProcesses, processes(false)),
        endpoint(SandboxRpc.OpenStdio, stdioOpen(false)),
        // Requests other replicas forward for containers this one owns (a second process with this id shares the work).
        endpoint(SandboxRpc.EnsureSandbox.at(own), ensure(true)),
        endpoint(SandboxRpc.Exec.at(own), exec(true)),
        endpoint(SandboxRpc.ReleaseSandbox.at(own), release(true)),
        endpoint(SandboxRpc.ListProcesses.at(own), processes(true)),
        endpoint(SandboxRpc.OpenStdio.at(own), stdioOpen(true)),
        // Managed workspaces live on storage every sandbox host shares, so any replica serves them.
        endpoint(WorkspacesRpc.CreateWorkspace, (request) => workspaces.create(request)),
        endpoint(WorkspacesRpc.ExportWorkspace, (request) => workspaces.export(request)),
        endpoint(WorkspacesRpc.DeleteWorkspace, (request) => workspaces.delete(request)),
      ],
    });
  } catch (error) {
    ping.unsubscribe();
    await backend.close(false);
    await bus.close();
    throw error;
  }
  pool?.fill();
  let collectedAt = 0;
  let collecting: Promise<void> = Promise.resolve();
  const collect = () => {
    collectedAt = Date.now();
    collecting = sandboxes.collectAbandonedSlots().catch((error: unknown) => warn(`collecting abandoned pool slots failed: ${(error as Error).message}`));
    return collecting;
  };
  void collect();

  // Check a few times per idle timeout so a container outlives it by at most a quarter of it.
  const sweepEveryMs = Math.min(Math.max(compiled.idleTimeoutMs / 4, 50), 60_000);
  let sweeping = false;
  const sweeper = setInterval(() => {
    if (sweeping) return;
    sweeping = true;
    Promise.all([
      sandboxes.reapIdle().catch((error: unknown) => warn(`idle reaping failed: ${(error as Error).message}`)),
      sandboxes.sweepDeadReplicas((replicaId) => router.isAlive(replicaId)).catch((error: unknown) => warn(`dead replica sweep failed: ${(error as Error).message}`)),
      Date.now() - collectedAt >= COLLECT_EVERY_MS ? collect() : undefined,
    ]).finally(() => (sweeping = false));
  }, sweepEveryMs);
  sweeper.unref();

  let stopped: Promise<void> | undefined;
  return {
    options: compiled,
    pool: () => pool?.status() ?? { size: 0, ready: 0, ...(poolUnavailable ? { unavailable: poolUnavailable } : {}) },
    whenPoolFull: async () => pool?.whenFull(),
    removeAll: () => sandboxes.removeAll(),
    stop: (stopOptions = {}) =>
      (stopped ??= (async () => {
        clearInterval(sweeper);
        ping.unsubscribe();
        await Promise.allSettled([service.stop(), collecting]);
        await pool?.stop();
        if (stopOptions.removeContainers) {
          await sandboxes.removeAll();
          await sandboxes.disposeMounts();
        }
        await backend.close(Boolean(stopOptions.removeContainers));
        // Their processes die with the channel's end or the containers: say so on each stream first.
        stdio.closeAll("the sandbox service stopped");
        sandboxes.closeChannels();
        // The bus publishes a reply a tick after its handler settles; let the last ones go out before draining.
        await new Promise((resolve) => setImmediate(resolve));
        await bus.close();
      })()),
  };
}

// Why this backend's runtime cannot have a warm pool, if it cannot.
async function poolObstacle(backend: SandboxBackend): Promise<string | undefined> {
  let traits;
  try {
    traits = await backend.runtime();
  } catch (error) {
    if (error instanceof TackError && error.code === "sandbox.runtime_missing") return error.message;
    throw error;
  }
  // gVisor and VM runtimes serve the workspace from a snapshot of the host's mounts taken at start.
  if (!traits.seesLaterHostMounts) return `runtime ${traits.name} (${traits.path ?? backend.kind}) does not see host mounts made after a container starts, so pool containers could not receive a workspace`;
  return undefined;
}

const log = logger("sandbox");

function warn(message: string): void {
  log.warn(message);
}
