import { randomBytes } from "node:crypto";
import type { AgentChannel } from "./agent.js";
import type { InstalledAgent } from "./agent-copy.js";
import type { SandboxBackend } from "./backend.js";
import { startNew } from "./container.js";
import type { SlotMounts } from "./mounts.js";
import type { CompiledOptions } from "./options.js";
import { LABELS, poolContainerName, sandboxSpec, type SandboxMode, type Workspace } from "./spec.js";

/** A started pool container waiting for a session: its slot, its container and its agent's open channel. */
export interface Slot {
  readonly slotId: string;
  /** Host path of the slot, which the session's workspace is mounted onto. */
  readonly path: string;
  readonly containerId: string;
  readonly channel: AgentChannel;
}

/** What the pool holds right now. */
export interface PoolStatus {
  /** Containers it keeps ready (0 when it is off). */
  readonly size: number;
  /** Containers ready to be claimed. */
  readonly ready: number;
  /** Why there is no pool, when there is none although one was asked for. */
  readonly unavailable?: string;
}

const FIRST_BACKOFF_MS = 1000;
const MAX_BACKOFF_MS = 60_000;

/**
 * The warm pool: `poolSize` started, networkless containers for uid 1000 whose /workspace is an
 * empty slot, so that a new session's sandbox is a mount and a rename away instead of a cold
 * start. Refilled one container at a time in the background after every claim.
 */
export class Pool {
  readonly #backend: SandboxBackend;
  readonly #options: CompiledOptions;
  readonly #agent: InstalledAgent;
  readonly #warn: (message: string) => void;
  readonly #ready: Slot[] = [];
  readonly #waiters: Array<() => void> = [];
  #filling: Promise<void> | undefined;
  #stopped = false;
  #interruptBackoff: (() => void) | undefined;
  /** The host side of the slots. */
  readonly mounts: SlotMounts;

  constructor(backend: SandboxBackend, options: CompiledOptions, mounts: SlotMounts, warn: (message: string) => void, agent: InstalledAgent) {
    this.#agent = agent;
    this.#backend = backend;
    this.#options = options;
    this.mounts = mounts;
    this.#warn = warn;
  }

  /** How full the pool is. */
  status(): PoolStatus {
    return { size: this.#options.poolSize, ready: this.#ready.length };
  }

  /** True when a pool container can serve this sandbox: no network, and commands run as the configured sandbox user. */
  serves(mode: SandboxMode, workspace: Workspace): boolean {
    const user = this.#options.operator.sandbox;
    return mode !== "danger-full-access" && workspace.uid === user.uid && workspace.gid === user.gid;
  }

  /** Takes a ready container out of the pool, or undefined when none is ready; call `fill` once the claim is done. */
  take(): Slot | undefined {
    let slot = this.#ready.shift();
    while (slot && !slot.channel.alive) slot = this.#ready.shift();
    return slot;
  }

  /** Puts back a container taken but not used (its claim lost a race). */
  giveBack(slot: Slot): void {
    if (this.#stopped || !slot.channel.alive) void this.discard(slot);
    else this.#ready.unshift(slot);
  }

  /** Starts refilling in the background unless it already runs (after a claim, so that a container start does not slow the claim down). */
  fill(): void {
    this.#filling ??= this.#fill().finally(() => (this.#filling = undefined));
  }

  /** Resolves once the pool holds `poolSize` ready containers. */
  async whenFull(): Promise<void> {
    while (!this.#stopped && this.#ready.length < this.#options.poolSize) {
      this.fill();
      await new Promise<void>((resolve) => this.#waiters.push(resolve));
    }
  }

  /** Removes a pool container and its slot. */
  async discard(slot: Pick<Slot, "slotId" | "containerId">): Promise<void> {
    await this.#backend.remove(slot.containerId).catch(() => undefined);
    await this.mounts.remove(slot.slotId);
  }

  /** Stops refilling and removes the containers still waiting. */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#interruptBackoff?.();
    await this.#filling;
    await Promise.all(this.#ready.splice(0).map((slot) => {
      slot.channel.close();
      return this.discard(slot);
    }));
    for (const wake of this.#waiters.splice(0)) wake();
  }

  async #fill(): Promise<void> {
    let backoffMs = FIRST_BACKOFF_MS;
    while (!this.#stopped && this.#ready.length < this.#options.poolSize) {
      try {
        const slot = await this.#startOne();
        if (this.#stopped) {
          slot.channel.close();
          await this.discard(slot);
          break;
        }
        this.#ready.push(slot);
        // A pool container whose agent dies leaves the pool.
        slot.channel.onDead(() => {
          const index = this.#ready.indexOf(slot);
          if (index < 0) return;
          this.#ready.splice(index, 1);
          void this.discard(slot).catch(() => undefined);
          this.fill();
        });
        backoffMs = FIRST_BACKOFF_MS;
      } catch (error) {
        this.#warn(`warm pool: could not start a container, retrying in ${backoffMs} ms: ${(error as Error).message}`);
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, backoffMs);
          this.#interruptBackoff = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        this.#interruptBackoff = undefined;
        backoffMs = Math.min(backoffMs * 2, MAX_BACKOFF_MS);
      } finally {
        for (const wake of this.#waiters.splice(0)) wake();
      }
    }
  }

  async #startOne(): Promise<Slot> {
    const traits = await this.#backend.runtime();
    const slotId = randomBytes(6).toString("hex");
    const path = await this.mounts.create(slotId);
    try {
      const started = await startNew(this.#backend, sandboxSpec({
        name: poolContainerName(this.#options.namespace, slotId),
        image: this.#options.image,
        runtime: this.#options.runtime,
        labels: { [LABELS.namespace]: this.#options.namespace, [LABELS.replica]: this.#options.replicaId, [LABELS.pool]: path },
        user: this.#options.operator.sandbox,
        workspace: { kind: "slot", path },
        network: false,
        traits,
        agentDir: this.#agent.dir,
      }), `pool slot ${slotId}`);
      return { slotId, path, containerId: started.id, channel: started.channel };
    } catch (error) {
      await this.mounts.remove(slotId);
      throw error;
    }
  }
}
