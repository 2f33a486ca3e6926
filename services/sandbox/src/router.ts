import { RequestError } from "@nats-io/nats-core";
import { DEFAULT_SILENCE_MS, SandboxRpc, TackError, type Bus, type Rpc } from "@tack/bus";
import { modeRank, tenantPolicy, type OperatorConfig } from "@tack/config";
import type {
  EnsureSandboxRequest,
  ExecRequest,
  ExecResponse,
  ListProcessesRequest,
  ListProcessesResponse,
  OpenStdioRequest,
  OpenStdioResponse,
  ReleaseSandboxRequest,
} from "@tack/proto";
import { checkExecRequest, DEFAULT_TIMEOUT_MS } from "./exec.js";
import { replicaSubject, type Placements } from "./placements.js";
import { SessionRegistry } from "./sessions.js";
import { checkOpenStdioRequest, type StdioStreams } from "./stdio.js";
import { assertId, notFound, type EnsureResult, type Sandboxes } from "./sandboxes.js";
import { MODES, parseMode, resolveWorkspace, type SandboxMode } from "./spec.js";

// A cold start under load plus an image check; a forwarded ensure waits this long.
const FORWARD_ENSURE_MS = 120_000;
const FORWARD_RELEASE_MS = 60_000;
// A listing is a read of /proc (the agent answers within 10 s or the channel fails it); a forwarded one waits this long.
const FORWARD_PROCESSES_MS = 15_000;
// A forwarded exec waits for the command's own timeout plus this.
const FORWARD_EXEC_GRACE_MS = 15_000;
const PING_TIMEOUT_MS = 2000;

/**
 * Serves the namespace's sandbox requests on any replica: a container this replica owns is
 * served here, one another replica owns (per the placement bucket) is forwarded to that
 * replica's own subject, and one whose replica is gone is removed and, for an ensure, started
 * here instead. A forwarded request (`forwarded`) is only ever served locally, so requests
 * never bounce between replicas.
 */
export class Router {
  readonly #bus: Bus;
  readonly #sandboxes: Sandboxes;
  readonly #placements: Placements;
  readonly #operator: OperatorConfig;
  readonly #sessions: SessionRegistry;

  #stdio: StdioStreams | undefined;

  constructor(bus: Bus, sandboxes: Sandboxes, placements: Placements, operator: OperatorConfig, stdio?: StdioStreams) {
    this.#stdio = stdio;
    this.#operator = operator;
    this.#sessions = new SessionRegistry(bus);
    this.#bus = bus;
    this.#sandboxes = sandboxes;
    this.#placements = placements;
  }

  /** `sandbox.ensure`: the session's running container of the request's mode. */
  async ensure(request: EnsureSandboxRequest, forwarded = false): Promise<EnsureResult> {
    assertId("session id", request.sessionId);
    assertId("tenant", request.tenant);
    const mode = parseMode(request.mode);
    const widest = tenantPolicy(this.#operator, request.tenant).max_sandbox_mode;
    if (modeRank(mode) > modeRank(widest)) {
      throw new TackError("sandbox.mode_not_allowed", `tenant ${request.tenant} may use sandbox modes up to ${widest} (max_sandbox_mode), not ${mode}`, { details: { limit: "max_sandbox_mode", value: widest } });
    }
    // The tenant and workspace must be the ones the loop logged for this session; the request alone proves nothing.
    await this.#sessions.verify(request.sessionId, request.tenant, request.workspace);
    const input = { sessionId: request.sessionId, tenant: request.tenant, mode, workspace: resolveWorkspace(request.workspace, request.tenant, this.#operator) };
    for (let attempt = 0; attempt < 3; attempt++) {
      const result = await this.#sandboxes.ensure(input);
      if ("local" in result) return result.local;
      if (forwarded) throw moved(request.sessionId, mode);
      const response = await this.#forward(result.owner.replica, SandboxRpc.EnsureSandbox, { ...request, mode }, FORWARD_ENSURE_MS);
      if (response) return { ...response, pooled: false };
      await this.#sandboxes.takeOver(request.sessionId, mode, result.owner);
    }
    throw new TackError("sandbox.placement_contended", `the sandbox of session ${request.sessionId} in mode ${mode} kept changing hands; retry`, { retryable: true });
  }

  /** `sandbox.exec`: runs the command in the session's container of the request's mode (its first container when empty). */
  async exec(request: ExecRequest, forwarded = false): Promise<ExecResponse> {
    checkExecRequest(request);
    assertId("session id", request.sessionId);
    const mode = request.mode ? parseMode(request.mode) : await this.#firstMode(request.sessionId);
    const result = await this.#sandboxes.exec(request.sessionId, mode, request);
    if ("local" in result) return result.local;
    if (forwarded) throw moved(request.sessionId, mode);
    const timeoutMs = (request.timeoutMs || DEFAULT_TIMEOUT_MS) + FORWARD_EXEC_GRACE_MS;
    const response = await this.#forward(result.owner.replica, SandboxRpc.Exec, { ...request, mode }, timeoutMs);
    if (!response) throw notFound(request.sessionId, mode, `replica ${result.owner.replica}, which held it, is gone`);
    return response;
  }

  /** `sandbox.processes`: the live processes of the session's container of the request's mode (its first container when empty), all but its agent. */
  async processes(request: ListProcessesRequest, forwarded = false): Promise<ListProcessesResponse> {
    assertId("session id", request.sessionId);
    const mode = request.mode ? parseMode(request.mode) : await this.#firstMode(request.sessionId);
    const result = await this.#sandboxes.processes(request.sessionId, mode);
    if ("local" in result) return result.local;
    if (forwarded) throw moved(request.sessionId, mode);
    const response = await this.#forward(result.owner.replica, SandboxRpc.ListProcesses, { ...request, mode }, FORWARD_PROCESSES_MS);
    if (!response) throw notFound(request.sessionId, mode, `replica ${result.owner.replica}, which held it, is gone`);
    return response;
  }

  /** `sandbox.stdio.open`: starts a long-lived process in the session's container of the request's mode (its first container when empty) and serves its stream. */
  async stdioOpen(request: OpenStdioRequest, forwarded = false): Promise<OpenStdioResponse> {
    checkOpenStdioRequest(request);
    assertId("session id", request.sessionId);
    const stdio = this.#stdio;
    if (!stdio) throw new TackError("sandbox.unavailable", "this sandbox replica serves no stdio streams");
    const mode = request.mode ? parseMode(request.mode) : await this.#firstMode(request.sessionId);
    const result = await this.#sandboxes.withChannel(request.sessionId, mode, (channel, touch) => stdio.open(channel, request, touch));
    if ("local" in result) return result.local;
    if (forwarded) throw moved(request.sessionId, mode);
    const response = await this.#forward(result.owner.replica, SandboxRpc.OpenStdio, { ...request, mode }, FORWARD_PROCESSES_MS);
    if (!response) throw notFound(request.sessionId, mode, `replica ${result.owner.replica}, which held it, is gone`);
    return response;
  }

  /** `sandbox.release`: removes the session's container of the request's mode, or all of them when empty. */
  async release(request: ReleaseSandboxRequest, forwarded = false): Promise<boolean> {
    assertId("session id", request.sessionId);
    const modes = request.mode ? [parseMode(request.mode)] : MODES;
    const removed = await Promise.all(modes.map(async (mode) => {
      const result = await this.#sandboxes.release(request.sessionId, mode);
      if ("local" in result) return result.local;
      if (forwarded) return false;
      const response = await this.#forward(result.owner.replica, SandboxRpc.ReleaseSandbox, { sessionId: request.sessionId, mode }, FORWARD_RELEASE_MS);
      if (response) return response.removed;
      await this.#sandboxes.takeOver(request.sessionId, mode, result.owner);
      return true;
    }));
    return removed.some(Boolean);
  }

  /** True unless `replicaId` has no subscriber on its ping subject (a slow answer counts as alive). */
  async isAlive(replicaId: string): Promise<boolean> {
    try {
      await this.#bus.nc.request(replicaSubject(this.#bus.names.namespace, replicaId, "ping"), undefined, { timeout: PING_TIMEOUT_MS });
      return true;
    } catch (error) {
      return !(error instanceof RequestError && error.isNoResponders());
    }
  }

  // The mode of the session's earliest container, wherever it runs.
  async #firstMode(sessionId: string): Promise<SandboxMode> {
    const local = this.#sandboxes.localModes(sessionId);
    const remote = await Promise.all(
      MODES.filter((mode) => !local.some((entry) => entry.mode === mode)).map(async (mode) => {
        const record = await this.#placements.get(sessionId, mode);
        return record && { mode, createdAt: record.placement.created_at };
      }),
    );
    const first = [...local, ...remote.filter((entry) => entry !== undefined)].sort((a, b) => a.createdAt - b.createdAt)[0];
    if (!first) throw notFound(sessionId);
    return first.mode;
  }

  // The owner's answer, or undefined when the owner has no subscriber (it is gone).
  async #forward<Req, Res>(replicaId: string, rpc: Rpc<Req, Res, false, "replica">, request: Req, timeoutMs: number): Promise<Res | undefined> {
    try {
      // Heartbeats show the owner alive through a long command; one that dies mid-request is `bus.worker_lost` (retryable).
      return await this.#bus.request(rpc.at({ replica: replicaId }), request, { timeoutMs, silenceMs: DEFAULT_SILENCE_MS });
    } catch (error) {
      if (error instanceof TackError && error.code === "bus.no_responders") return undefined;
      throw error;
    }
  }
}

function moved(sessionId: string, mode: SandboxMode): TackError {
  return new TackError("sandbox.placement_moved", `the sandbox of session ${sessionId} in mode ${mode} moved to another replica meanwhile; retry`, { retryable: true });
}
