import { dirname, join } from "node:path";
import { assertToken, TackError } from "@tack/bus";
import type { ExecRequest, ExecResponse } from "@tack/proto";
import type { AgentChannel, AgentListing } from "./agent.js";
import type { InstalledAgent } from "./agent-copy.js";
import { ExecMemory } from "./calls.js";
import type { SandboxBackend, SandboxInfo } from "./backend.js";
import { reopen, startNew, verifyWorkspace, type Started } from "./container.js";
import { runExec } from "./exec.js";
import { randomBytes } from "node:crypto";
import { collectAbandoned, disposeReplicaDir, removeSlotAt, SlotMounts } from "./mounts.js";
import { tenantPolicy } from "@tack/config";
import type { CompiledOptions } from "./options.js";
import type { Placement, Placements } from "./placements.js";
import type { Pool } from "./pool.js";
import { containerName, LABELS, needsMapping, parseContainerName, sandboxSpec, type SandboxMode, type Workspace } from "./spec.js";

/** What `ensure` asks for: the session's container of this mode, on this workspace. */
export interface EnsureInput {
  readonly sessionId: string;
  readonly tenant: string;
  readonly mode: SandboxMode;
  readonly workspace: Workspace;
}

/** The session's container after `ensure`. */
export interface EnsureResult {
  readonly containerId: string;
  /** True when the session got a new container (started cold or claimed from the pool). */
  readonly created: boolean;
  readonly runtime: string;
  /** True when it came from the warm pool. */
  readonly pooled: boolean;
}

/** The answer of this replica, or the placement of the replica that owns the container instead. */
export type Owned<T> = { readonly local: T } | { readonly owner: Placement };

interface Entry {
  readonly sessionId: string;
  readonly mode: SandboxMode;
  readonly containerId: string;
  readonly tenant: string;
  readonly workspace: string;
  readonly runtime: string;
  readonly createdAt: number;
  readonly slot?: string;
  /** Undefined until first used after a restart; dead once the agent stopped. */
  channel: AgentChannel | undefined;
  lastUsedAt: number;
  activeExecs: number;
  /** Keyed execs run in this container by this process (replays for retried tool calls). */
  readonly memory: ExecMemory;
}

// A replica is declared dead after failing to answer pings for this long (at least two sweeps).
const DEAD_AFTER_MS = 1000;
// A pool slot or replica directory nobody uses is collected once it is this old.
const ABANDONED_AFTER_MS = 60_000;

/** Fails with a TackError when `value` cannot be a session or tenant id. */
export function assertId(kind: string, value: string): void {
  try {
    assertToken(kind, value);
  } catch (error) {
    throw new TackError("sandbox.bad_request", (error as Error).message);
  }
}

/** The error for a session that has no running sandbox (in `mode`, when given). */
export function notFound(sessionId: string, mode?: string, reason?: string): TackError {
  return new TackError(
    "sandbox.not_found",
    `session ${sessionId} has no running sandbox${mode ? ` in mode ${mode}` : ""}${reason ? ` (${reason})` : ""}; call sandbox.ensure for it first`,
    { details: { session_id: sessionId } },
  );
}

/**
 * The containers this replica owns, one per session and mode. Ensure, release and reaping of
 * one session's mode are serialised by a lock, so concurrent ensures start one container; each
 * container is recorded in the placement bucket before it starts, so two replicas never both
 * start one. A new container comes from the warm pool when it can, else it starts cold.
 */
export class Sandboxes {
  readonly #backend: SandboxBackend;
  readonly #options: CompiledOptions;
  readonly #placements: Placements;
  readonly #pool: Pool | undefined;
  readonly #warn: (message: string) => void;
  readonly #entries = new Map<string, Entry>();
  readonly #agent: InstalledAgent;
  readonly #locks = new Map<string, Promise<void>>();
  readonly #suspects = new Map<string, number>();
  /** (session, mode) keys whose last container this process removed without a release: the next one's exec memory starts late. */
  readonly #disrupted = new Set<string>();

  constructor(backend: SandboxBackend, options: CompiledOptions, placements: Placements, pool: Pool | undefined, warn: (message: string) => void, agent: InstalledAgent) {
    this.#agent = agent;
    this.#backend = backend;
    this.#options = options;
    this.#placements = placements;
    this.#pool = pool;
    this.#warn = warn;
  }

  #ownMounts: Promise<SlotMounts> | undefined;

  // The tenant's max_sandboxes, counted over the containers this replica holds (each replica enforces it for its own).
  #checkTenantLimit(tenant: string): void {
    const max = tenantPolicy(this.#options.operator, tenant).max_sandboxes;
    const running = [...this.#entries.values()].filter((entry) => entry.tenant === tenant).length;
    if (running >= max) {
      throw new TackError(
        "sandbox.limit_exceeded",
        `tenant ${tenant} may have at most ${max} sandbox containers at once (max_sandboxes) and has ${running}; end or delete a session, or ask the operator to raise it`,
        { details: { limit: "max_sandboxes", value: String(max) } },
      );
    }
  }

  /** Removes this replica's mount directory (the pool's slots and the workspaces of containers created directly); only once no container of it is left. */
  async disposeMounts(): Promise<void> {
    const mounts = this.#pool?.mounts ?? (await this.#ownMounts?.catch(() => undefined));
    this.#ownMounts = undefined;
    await mounts?.dispose();
  }

  // The replica directory holding the workspaces of containers created directly: the pool's when there is one, else prepared on first need.
  #mounts(): Promise<SlotMounts> {
    if (this.#pool) return Promise.resolve(this.#pool.mounts);
    this.#ownMounts ??= SlotMounts.prepare(join(this.#options.poolDir, this.#options.namespace, this.#options.replicaId));
    return this.#ownMounts.catch((error: unknown) => {
      this.#ownMounts = undefined;
      // The same failure as the pool's, under the code of a workspace that cannot be mounted.
      throw new TackError("sandbox.workspace_mount_failed", (error as Error).message, { cause: error });
    });
  }

  /**
   * Takes back this replica's containers after a restart (their channels open on first use) and
   * removes what cannot be taken back: unclaimed pool containers, containers without a matching
   * placement (a crash between start and record) and containers of a service without an agent.
   */
  async adopt(): Promise<void> {
    const kept = new Set<string>();
    for (const info of await this.#list()) {
      const replica = info.labels[LABELS.replica];
      if (replica && replica !== this.#options.replicaId) continue;
      const named = parseContainerName(this.#options.namespace, info.name);
      const record = named && replica ? await this.#placements.get(named.sessionId, named.mode) : undefined;
      if (named && record?.placement.replica === this.#options.replicaId && record.placement.container_id === info.id) {
        this.#remember(named.sessionId, named.mode, record.placement, undefined);
        if (record.placement.slot) kept.add(record.placement.slot);
        continue;
      }
      await this.#removeWithSlot(info);
    }
    // Slots whose container is gone (removed while this process was down).
    if (this.#pool) for (const slotId of await this.#pool.mounts.slots()) if (!kept.has(this.#pool.mounts.path(slotId))) await this.#pool.mounts.remove(slotId);
  }

  /** True when this replica holds the session's container of `mode`. */
  has(sessionId: string, mode: SandboxMode): boolean {
    return this.#entries.has(key(sessionId, mode));
  }

  /** The modes of the session's containers that this replica holds, with when each was created. */
  localModes(sessionId: string): Array<{ mode: SandboxMode; createdAt: number }> {
    return [...this.#entries.values()].filter((entry) => entry.sessionId === sessionId).map(({ mode, createdAt }) => ({ mode, createdAt }));
  }

  /**
   * Returns the session's running container of `input.mode`, creating, restarting or re-attaching
   * it as needed, unless another replica owns it. A different tenant, workspace or runtime for a
   * live container is refused (`sandbox.conflict`).
   */
  async ensure(input: EnsureInput): Promise<Owned<EnsureResult>> {
    const k = key(input.sessionId, input.mode);
    return this.#withLock(k, async () => {
      const entry = this.#entries.get(k) ?? (await this.#fromRecord(input.sessionId, input.mode));
      if (entry && "owner" in entry) return entry;
      if (entry) {
        this.#checkFits(entry, input);
        if (await this.#revive(entry)) {
          entry.lastUsedAt = Date.now();
          return { local: { containerId: entry.containerId, created: false, runtime: entry.runtime, pooled: false } };
        }
        // Its container was removed behind our back: the session gets a new one.
        this.#entries.delete(k);
        this.#disrupted.add(k);
        await this.#placements.delete(input.sessionId, input.mode, entry.containerId);
      }
      this.#checkTenantLimit(input.tenant);
      return this.#create(input);
    });
  }

  /**
   * Runs a command in the session's container of `mode`. Fails with `sandbox.not_found` when there
   * is none or its agent stopped (the next ensure restarts it), and with `sandbox.agent_lost`
   * when the agent stops while the command runs.
   */
  async exec(sessionId: string, mode: SandboxMode, request: ExecRequest): Promise<Owned<ExecResponse>> {
    const entry = await this.#attached(sessionId, mode);
    if ("owner" in entry) return entry;
    entry.activeExecs += 1;
    entry.lastUsedAt = Date.now();
    try {
      const channel = entry.channel;
      return { local: await entry.memory.run(request, () => runExec(channel, request)) };
    } finally {
      entry.activeExecs -= 1;
      entry.lastUsedAt = Date.now();
    }
  }

  /**
   * Runs `use` with the agent channel of the session's container of `mode` (a long-lived
   * process's stream is opened through it); `touch` marks the container used, so that it is
   * not reaped as idle while the stream carries input. Fails like `exec` when there is none.
   */
  async withChannel<T>(sessionId: string, mode: SandboxMode, use: (channel: AgentChannel, touch: () => void) => Promise<T>): Promise<Owned<T>> {
    const entry = await this.#attached(sessionId, mode);
    if ("owner" in entry) return entry;
    entry.lastUsedAt = Date.now();
    return { local: await use(entry.channel, () => (entry.lastUsedAt = Date.now())) };
  }

  /**
   * Lists the live processes of the session's container of `mode`, all but its exec agent.
   * Not a use of the container: a listing does not keep it from being reaped as idle.
   */
  async processes(sessionId: string, mode: SandboxMode): Promise<Owned<AgentListing>> {
    const entry = await this.#attached(sessionId, mode);
    if ("owner" in entry) return entry;
    return { local: await entry.channel.processes() };
  }

  // The session's entry of `mode` with a live agent channel (attached now after a restart), or its owner; fails with not found.
  async #attached(sessionId: string, mode: SandboxMode): Promise<(Entry & { channel: AgentChannel }) | { owner: Placement }> {
    const k = key(sessionId, mode);
    let entry = this.#entries.get(k);
    if (!entry?.channel) {
      // Not attached yet: look it up under the lock, since an ensure may be starting it right now.
      const found = await this.#withLock(k, async () => {
        const current = this.#entries.get(k) ?? (await this.#fromRecord(sessionId, mode));
        if (current && !("owner" in current) && !current.channel) {
          // Taken back after a restart: attach to it (starting it if the host restarted meanwhile).
          if (mode === "danger-full-access") await this.#backend.grantNetwork();
          current.channel = await reopen(this.#backend, current.containerId, label(sessionId, mode));
          if (!current.channel) {
            this.#entries.delete(k);
            await this.#placements.delete(sessionId, mode, current.containerId);
            return undefined;
          }
        }
        return current;
      });
      if (found && "owner" in found) return found;
      entry = found;
    }
    // Killed at its memory limit (under gVisor the whole sandbox goes): started afresh for the next command, which the model cannot ensure itself.
    if (entry?.channel && !entry.channel.alive && entry.channel.oomKilled) {
      const killed = entry;
      await this.#withLock(k, async () => {
        if (this.#entries.get(k) === killed && !killed.channel?.alive) await this.#revive(killed);
      });
    }
    if (!entry?.channel?.alive) throw notFound(sessionId, mode, entry?.channel?.deadReason && `its exec agent stopped: ${entry.channel.deadReason}`);
    return entry as Entry & { channel: AgentChannel };
  }

  /** Removes the session's container of `mode` (killing whatever runs in it); false when it had none. */
  async release(sessionId: string, mode: SandboxMode): Promise<Owned<boolean>> {
    const k = key(sessionId, mode);
    return this.#withLock(k, async () => {
      const entry = this.#entries.get(k) ?? (await this.#fromRecord(sessionId, mode));
      if (entry && "owner" in entry) return entry;
      let removed = false;
      if (entry) removed = await this.#removeEntry(entry);
      // A container of this name without a record was left by a crash between its start and its record.
      removed = (await this.#backend.remove(containerName(this.#options.namespace, sessionId, mode))) || removed;
      return { local: removed };
    });
  }

  /** Removes the container a dead replica held for the session's mode, and its record, unless the record changed meanwhile. */
  async takeOver(sessionId: string, mode: SandboxMode, placement: Placement): Promise<void> {
    await this.#withLock(key(sessionId, mode), async () => {
      const current = await this.#placements.get(sessionId, mode);
      if (current?.placement.replica !== placement.replica || current.placement.container_id !== placement.container_id) return;
      if (placement.container_id) await this.#backend.remove(placement.container_id);
      if (placement.slot) await removeSlotAt(placement.slot);
      this.#disrupted.add(key(sessionId, mode));
      await this.#placements.delete(sessionId, mode, placement.container_id);
    });
  }

  /** Removes the containers that ran no command for the idle timeout. */
  async reapIdle(): Promise<void> {
    const idle = (entry: Entry) => entry.activeExecs === 0 && Date.now() - entry.lastUsedAt >= this.#options.idleTimeoutMs;
    for (const [k, entry] of [...this.#entries]) {
      if (!idle(entry)) continue;
      await this.#withLock(k, async () => {
        // Re-checked under the lock: an ensure or exec may have used it meanwhile.
        if (this.#entries.get(k) === entry && idle(entry)) await this.#removeEntry(entry);
      });
    }
  }

  /**
   * Removes the containers of replicas that stopped answering (`isAlive` false for at least
   * DEAD_AFTER_MS, over two sweeps), with their records and pool slots. Found by label, so
   * containers nobody recorded are found too.
   */
  async sweepDeadReplicas(isAlive: (replicaId: string) => Promise<boolean>): Promise<void> {
    const byReplica = new Map<string, SandboxInfo[]>();
    for (const info of await this.#list()) {
      const replica = info.labels[LABELS.replica];
      if (!replica || replica === this.#options.replicaId) continue;
      byReplica.set(replica, [...(byReplica.get(replica) ?? []), info]);
    }
    for (const replica of this.#suspects.keys()) if (!byReplica.has(replica)) this.#suspects.delete(replica);
    for (const [replica, containers] of byReplica) {
      if (await isAlive(replica)) {
        this.#suspects.delete(replica);
        continue;
      }
      const since = this.#suspects.get(replica);
      if (since === undefined) this.#suspects.set(replica, Date.now());
      if (since === undefined || Date.now() - since < DEAD_AFTER_MS) continue;
      this.#warn(`replica ${replica} stopped answering; removing its ${containers.length} container(s)`);
      const slotRoots = new Set<string>();
      for (const info of containers) {
        const named = parseContainerName(this.#options.namespace, info.name);
        if (named) {
          await this.#placements.delete(named.sessionId, named.mode, info.id);
          // Whatever ran in it is unknown here: the session's next container must not trust unseen exec keys.
          this.#disrupted.add(key(named.sessionId, named.mode));
        }
        await this.#removeWithSlot(info);
        const slot = info.labels[LABELS.pool];
        if (slot) slotRoots.add(dirname(dirname(slot)));
      }
      // Its pool directory (wherever its options put it), now that none of its containers is left.
      for (const slotRoot of slotRoots) await disposeReplicaDir(slotRoot);
      this.#suspects.delete(replica);
    }
  }

  /**
   * Collects the pool slots and replica directories under the pool directory that no container
   * on this engine uses any more, whatever their namespace: what processes that died without
   * cleaning up (and were never restarted) left mounted on the host.
   */
  async collectAbandonedSlots(): Promise<void> {
    // Pool containers carry their slot, containers created directly their mount: both are in use while the container exists, stopped or not.
    const containers = [...(await this.#backend.list({ [LABELS.pool]: true })), ...(await this.#backend.list({ [LABELS.mount]: true }))];
    const inUse = new Set(containers.flatMap((info) => [info.labels[LABELS.pool], info.labels[LABELS.mount]]).filter((path): path is string => Boolean(path)));
    await collectAbandoned(this.#options.poolDir, inUse, join(this.#options.poolDir, this.#options.namespace, this.#options.replicaId), ABANDONED_AFTER_MS);
  }

  /** Removes every container this replica owns, with its record; returns how many were removed. */
  async removeAll(): Promise<number> {
    let removed = 0;
    await Promise.all([...this.#entries].map(([k, entry]) => this.#withLock(k, async () => {
      if (this.#entries.get(k) === entry && (await this.#removeEntry(entry))) removed += 1;
    })));
    // Also what no entry knows of: orphans of a crash, and pool containers.
    await Promise.all((await this.#list()).filter((info) => info.labels[LABELS.replica] === this.#options.replicaId).map(async (info) => {
      const named = parseContainerName(this.#options.namespace, info.name);
      if (named) await this.#placements.delete(named.sessionId, named.mode, info.id);
      if (await this.#removeWithSlot(info)) removed += 1;
    }));
    return removed;
  }

  /** Closes every agent channel (the agents keep running for the next process to attach). */
  closeChannels(): void {
    for (const entry of this.#entries.values()) entry.channel?.close();
  }

  async #create(input: EnsureInput, fromPool = true): Promise<Owned<EnsureResult>> {
    const { sessionId, mode, workspace } = input;
    const base = { replica: this.#options.replicaId, tenant: input.tenant, workspace: workspace.path, runtime: this.#options.runtime, created_at: Date.now() };
    const slot = fromPool && this.#pool?.serves(mode, workspace) ? this.#pool.take() : undefined;
    if (slot && this.#pool) {
      const placement: Placement = { ...base, container_id: slot.containerId, slot: slot.path };
      if ((await this.#placements.create(sessionId, mode, placement)) === undefined) {
        this.#pool.giveBack(slot);
        return this.#ownerNow(sessionId, mode);
      }
      try {
        const [identity] = await Promise.all([
          this.#pool.mounts.bind(slot.slotId, workspace, mode === "read-only", workspace.owner, workspace),
          this.#backend.rename(slot.containerId, containerName(this.#options.namespace, sessionId, mode)),
        ]);
        await verifyWorkspace(this.#backend, slot.containerId, identity, workspace.path, label(sessionId, mode));
      } catch (error) {
        slot.channel.close();
        await this.#pool.discard(slot);
        await this.#placements.delete(sessionId, mode, slot.containerId);
        // The workspace is not what was checked: refused, never retried cold on whatever it is now.
        if (error instanceof TackError && error.code === "sandbox.workspace_changed") throw error;
        this.#warn(`warm pool: claiming a container for session ${sessionId} failed, starting one cold: ${(error as Error).message}`);
        return this.#create(input, false);
      } finally {
        this.#pool.fill();
      }
      this.#remember(sessionId, mode, placement, slot.channel, this.#firstOfItsLine(sessionId, mode));
      return { local: { containerId: slot.containerId, created: true, runtime: this.#options.runtime, pooled: true } };
    }

    const traits = await this.#backend.runtime();
    // A networked sandbox joins the namespace's egress-guarded network under the runtime's networked twin (runsc-net), both checked now, or is refused.
    const grant = mode === "danger-full-access" ? await this.#backend.grantNetwork() : undefined;
    const mapped = needsMapping(workspace);
    if (mapped && !traits.idmappedMounts) {
      // gVisor's gofer (this version) cannot serve files through an idmapped mount: refuse rather than run as the owner.
      throw new TackError(
        "sandbox.ownership_mapping_unsupported",
        `workspace ${workspace.path} is owned by ${workspace.owner.uid}:${workspace.owner.gid}, not by the sandbox user ${workspace.uid}:${workspace.gid}, and runtime ${this.#options.runtime} cannot map one onto the other; ` +
          `run \`chown -R ${workspace.uid}:${workspace.gid} ${workspace.path}\` or use the runc runtime`,
        { details: { workspace: workspace.path, runtime: this.#options.runtime } },
      );
    }
    // Reserved before the container starts, so that another replica asked at the same time defers to this one.
    const revision = await this.#placements.create(sessionId, mode, { ...base, container_id: "" });
    if (revision === undefined) return this.#ownerNow(sessionId, mode);
    let started: Started | undefined;
    let mountPath: string | undefined;
    try {
      // Mounted by the service from a descriptor it checked; the container binds that mount, never the workspace's path (decision 0021).
      const mounted = await (await this.#mounts()).createDirect(`direct-${randomBytes(6).toString("hex")}`, workspace, mode === "read-only", workspace.owner, workspace);
      mountPath = mounted.path;
      started = await startNew(this.#backend, sandboxSpec({
        name: containerName(this.#options.namespace, sessionId, mode),
        image: this.#options.image,
        runtime: grant?.runtime ?? this.#options.runtime,
        labels: {
          [LABELS.namespace]: this.#options.namespace,
          [LABELS.replica]: this.#options.replicaId,
          [LABELS.session]: sessionId,
          [LABELS.tenant]: input.tenant,
          [LABELS.mode]: mode,
          [LABELS.workspace]: workspace.path,
          [LABELS.mount]: mountPath,
        },
        user: workspace,
        workspace: { kind: "direct", path: mountPath, readOnly: mode === "read-only" },
        network: grant?.network ?? false,
        traits,
        agentDir: this.#agent.dir,
      }), label(sessionId, mode));
      await verifyWorkspace(this.#backend, started.id, mounted.identity, workspace.path, label(sessionId, mode));
      const placement: Placement = { ...base, container_id: started.id, slot: mountPath };
      await this.#placements.update(sessionId, mode, placement, revision);
      this.#remember(sessionId, mode, placement, started.channel, this.#firstOfItsLine(sessionId, mode));
    } catch (error) {
      if (started) {
        started.channel.close();
        await this.#backend.remove(started.id);
      }
      if (mountPath) await removeSlotAt(mountPath);
      await this.#placements.delete(sessionId, mode, "");
      throw error;
    }
    return { local: { containerId: started.id, created: true, runtime: this.#options.runtime, pooled: false } };
  }

  async #ownerNow(sessionId: string, mode: SandboxMode): Promise<Owned<never>> {
    const current = await this.#placements.get(sessionId, mode);
    if (!current) throw new TackError("sandbox.placement_contended", `the sandbox of session ${sessionId} in mode ${mode} was created and removed concurrently; retry`, { retryable: true });
    return { owner: current.placement };
  }

  // The local entry for a record this replica owns (after a restart), or the owner when it is another replica.
  async #fromRecord(sessionId: string, mode: SandboxMode): Promise<Entry | { owner: Placement } | undefined> {
    const record = await this.#placements.get(sessionId, mode);
    if (!record) return undefined;
    if (record.placement.replica !== this.#options.replicaId) return { owner: record.placement };
    if (!record.placement.container_id) {
      // A reservation of ours without a container: this process died while starting it.
      await this.#placements.delete(sessionId, mode, "");
      this.#disrupted.add(key(sessionId, mode));
      return undefined;
    }
    return this.#remember(sessionId, mode, record.placement, undefined);
  }

  /**
   * True when the container being started for (session, mode) follows none that this process
   * had to remove unreleased (taken over from a dead replica, vanished, or half started): only
   * then can an exec key it has not seen be known never to have run.
   */
  #firstOfItsLine(sessionId: string, mode: SandboxMode): boolean {
    return !this.#disrupted.delete(key(sessionId, mode));
  }

  /**
   * Remembers a container of this process. `fresh`: started just now by this process as the
   * first of its line, so its exec memory covers everything that ever ran for it; otherwise
   * (adopted after a restart, or following a container that was lost) the memory starts now.
   */
  #remember(sessionId: string, mode: SandboxMode, placement: Placement, channel: AgentChannel | undefined, fresh = false): Entry {
    const entry: Entry = {
      sessionId,
      mode,
      containerId: placement.container_id,
      tenant: placement.tenant,
      workspace: placement.workspace,
      runtime: placement.runtime,
      createdAt: placement.created_at,
      slot: placement.slot,
      channel,
      lastUsedAt: Date.now(),
      activeExecs: 0,
      memory: new ExecMemory(fresh ? 0 : Date.now()),
    };
    this.#entries.set(key(sessionId, mode), entry);
    return entry;
  }

  #checkFits(entry: Entry, input: EnsureInput): void {
    if (entry.tenant !== input.tenant) {
      throw new TackError("sandbox.conflict", `session ${input.sessionId} already has a sandbox that belongs to another tenant; use a new session id`);
    }
    if (entry.workspace !== input.workspace.path || entry.runtime !== this.#options.runtime) {
      throw new TackError(
        "sandbox.conflict",
        `session ${input.sessionId} already has a ${input.mode} sandbox on ${entry.workspace} under runtime ${entry.runtime}; ` +
          `release it first to get one on ${input.workspace.path} under runtime ${this.#options.runtime}`,
      );
    }
  }

  // Makes sure the entry's agent answers: re-attaching, or restarting a container whose agent died. False when the container is gone.
  async #revive(entry: Entry): Promise<boolean> {
    if (entry.channel?.alive) return true;
    // A networked container may restart: its egress guard first (gone after a host reboot).
    if (entry.mode === "danger-full-access") await this.#backend.grantNetwork();
    entry.channel = await reopen(this.#backend, entry.containerId, label(entry.sessionId, entry.mode));
    return entry.channel !== undefined;
  }

  async #removeEntry(entry: Entry): Promise<boolean> {
    this.#entries.delete(key(entry.sessionId, entry.mode));
    entry.channel?.close();
    const removed = await this.#backend.remove(entry.containerId);
    if (entry.slot) await removeSlotAt(entry.slot);
    await this.#placements.delete(entry.sessionId, entry.mode, entry.containerId);
    return removed;
  }

  async #removeWithSlot(info: SandboxInfo): Promise<boolean> {
    const removed = await this.#backend.remove(info.id);
    for (const slot of [info.labels[LABELS.pool], info.labels[LABELS.mount]]) if (slot) await removeSlotAt(slot);
    return removed;
  }

  // The sandboxes of this namespace, whichever replica owns them.
  #list(): Promise<SandboxInfo[]> {
    return this.#backend.list({ [LABELS.namespace]: this.#options.namespace });
  }

  async #withLock<T>(k: string, fn: () => Promise<T>): Promise<T> {
    const previous = this.#locks.get(k) ?? Promise.resolve();
    const run = previous.then(fn);
    const tail = run.then(
      () => undefined,
      () => undefined,
    );
    this.#locks.set(k, tail);
    void tail.then(() => {
      if (this.#locks.get(k) === tail) this.#locks.delete(k);
    });
    return run;
  }
}

function key(sessionId: string, mode: SandboxMode): string {
  return `${sessionId}.${mode}`;
}

function label(sessionId: string, mode: SandboxMode): string {
  return `session ${sessionId} (${mode})`;
}
