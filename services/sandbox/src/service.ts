import Docker from "dockerode";
import { trace } from "@opentelemetry/api";
import { Bus, inSpan } from "@tack/bus";
import {
  EnsureSandboxRequest,
  EnsureSandboxResponse,
  ExecRequest,
  ExecResponse,
  ReleaseSandboxRequest,
  ReleaseSandboxResponse,
} from "@tack/proto";
import { checkExecRequest, ContainerGone, runExec } from "./exec.js";
import { compileOptions, type CompiledOptions, type SandboxServiceOptions } from "./options.js";
import { notFound, Sandboxes } from "./sandboxes.js";

/** A running sandbox service. */
export interface SandboxService {
  /** The validated options with their defaults; `namespace` names the subjects it serves and the containers it owns. */
  readonly options: CompiledOptions;
  /**
   * Stops serving once in-flight requests are answered and closes the bus connection. Containers
   * stay (a restarted service reuses them) unless `removeContainers` is true.
   */
  stop(options?: { removeContainers?: boolean }): Promise<void>;
  /** Removes every container of the namespace; returns how many were removed. */
  removeAll(): Promise<number>;
}

/**
 * Starts the sandbox service: validates the options, connects to NATS, records the namespace's
 * existing containers, serves ensure/exec/release in queue group `sandbox` and reaps idle
 * containers. Fails with a TackError when the options are invalid or NATS or Docker is unreachable.
 */
export async function startSandboxService(options: SandboxServiceOptions): Promise<SandboxService> {
  const compiled = compileOptions(options);
  // Honours DOCKER_HOST; the default is the local engine's socket.
  const docker = new Docker();
  const sandboxes = new Sandboxes(docker, compiled);
  await sandboxes.adopt();
  const bus = await Bus.connect({ url: compiled.natsUrl, namespace: compiled.namespace, name: "tack-sandbox" });

  const inFlight = new Set<Promise<unknown>>();
  const tracked = <Req, Res>(handler: (request: Req) => Promise<Res>) => (request: Req) => {
    const run = handler(request);
    inFlight.add(run);
    void run.catch(() => undefined).finally(() => inFlight.delete(run));
    return run;
  };

  const subscriptions = [
    bus.serve(bus.names.sandboxEnsure, "sandbox", EnsureSandboxRequest, EnsureSandboxResponse, tracked((request: EnsureSandboxRequest) =>
      inSpan("sandbox.ensure", { "tack.session_id": request.sessionId, "tack.tenant": request.tenant, "sandbox.mode": request.mode }, async () => {
        const result = await sandboxes.ensure(request);
        trace.getActiveSpan()?.setAttributes({ "sandbox.created": result.created, "sandbox.runtime": result.runtime });
        return result;
      }),
    )),
    bus.serve(bus.names.sandboxExec, "sandbox", ExecRequest, ExecResponse, tracked((request: ExecRequest) =>
      inSpan("sandbox.exec", { "tack.session_id": request.sessionId, "sandbox.command": request.argv[0] ?? "" }, async () => {
        checkExecRequest(request);
        const lease = await sandboxes.acquire(request.sessionId);
        try {
          const response = await runExec(docker, lease.container, request);
          trace.getActiveSpan()?.setAttributes({ "sandbox.exit_code": response.exitCode, "sandbox.timed_out": response.timedOut });
          return response;
        } catch (error) {
          if (!(error instanceof ContainerGone)) throw error;
          sandboxes.forget(request.sessionId);
          throw notFound(request.sessionId);
        } finally {
          lease.done();
        }
      }),
    )),
    bus.serve(bus.names.sandboxRelease, "sandbox", ReleaseSandboxRequest, ReleaseSandboxResponse, tracked(async (request: ReleaseSandboxRequest) =>
      ({ removed: await sandboxes.release(request.sessionId) }),
    )),
  ];

  // Round trip to the server so that the subscriptions are in place when this function returns.
  await bus.nc.flush();

  // Check a few times per idle timeout so a container outlives it by at most a quarter of it.
  const reapEveryMs = Math.min(Math.max(compiled.idleTimeoutMs / 4, 50), 60_000);
  let reaping = false;
  const reaper = setInterval(() => {
    if (reaping) return;
    reaping = true;
    sandboxes
      .reapIdle()
      .catch((error: unknown) => process.stderr.write(`${JSON.stringify({ level: "warn", service: "sandbox", message: `idle reaping failed: ${(error as Error).message}` })}\n`))
      .finally(() => (reaping = false));
  }, reapEveryMs);
  reaper.unref();

  let stopped: Promise<void> | undefined;
  return {
    options: compiled,
    removeAll: () => sandboxes.removeAll(),
    stop: (stopOptions = {}) =>
      (stopped ??= (async () => {
        clearInterval(reaper);
        for (const subscription of subscriptions) subscription.unsubscribe();
        await Promise.allSettled([...inFlight]);
        // The bus publishes a reply a tick after its handler settles; let the last ones go out before draining.
        await new Promise((resolve) => setImmediate(resolve));
        await bus.close();
        if (stopOptions.removeContainers) await sandboxes.removeAll();
      })()),
  };
}
