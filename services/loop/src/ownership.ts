import type { Subscription } from "@nats-io/nats-core";
import { TackError, type Bus } from "@tack/bus";
import type { DeleteSessionResponse } from "@tack/proto";
import type { Logger } from "@tack/telemetry";
import { deleteSessionData } from "./deletion.js";
import { Leases, type Lease } from "./lease.js";
import type { SessionRuntime, SessionDeps } from "./session.js";

/** What `Ownership` needs from the service around it. */
export interface OwnershipDeps {
  readonly bus: Bus;
  readonly leases: Leases;
  readonly log: Logger;
  readonly leaseTtlMs: number;
  /** A session with no turn running keeps its lease this long (warm); 0 releases at once. */
  readonly idleReleaseMs: number;
  /** Loads a session whose lease was just claimed; `onIdle` is the runtime's hook back into `forget`. */
  load(tenant: string, sessionId: string, lease: Lease, onIdle: SessionDeps["onIdle"]): Promise<SessionRuntime>;
  /** Opens the owner subjects of a session just loaded (the router's per-session handlers). */
  serve(runtime: SessionRuntime): Subscription[];
}

/**
 * The sessions this process owns, and the only place their leases are taken, kept warm, released
 * and deleted under: claimed sessions (`acquire`), claims in flight, sessions being deleted (never
 * claimed again meanwhile: the lease is already ours) and the idle timers of warm sessions.
 */
export class Ownership {
  readonly #deps: OwnershipDeps;
  readonly #owned = new Map<string, { runtime: SessionRuntime; subscriptions: Subscription[] }>();
  readonly #acquiring = new Map<string, Promise<SessionRuntime>>();
  readonly #deleting = new Set<string>();
  /** Idle sessions waiting for their release (warm: their next message needs no claim and no log read). */
  readonly #idleTimers = new Map<string, NodeJS.Timeout>();
  #stopped = false;

  constructor(deps: OwnershipDeps) {
    this.#deps = deps;
  }

  /** The runtime of a session this process owns right now. */
  runtime(tenant: string, sessionId: string): SessionRuntime | undefined {
    return this.#owned.get(Leases.key(tenant, sessionId))?.runtime;
  }

  /** True when this process owns, is claiming or is deleting the session: a call for it is handled here, not forwarded. */
  holds(tenant: string, sessionId: string): boolean {
    const key = Leases.key(tenant, sessionId);
    return this.#owned.has(key) || this.#acquiring.has(key) || this.#deleting.has(key);
  }

  /** Waits for a claim of the session in flight (recovery parking its waiting calls, or starting a turn) to finish. */
  async settled(runtime: SessionRuntime): Promise<void> {
    await this.#acquiring.get(Leases.key(runtime.tenant, runtime.sessionId))?.catch(() => undefined);
  }

  /** Claims a session (waiting out another owner's lease up to `waitMs`), loads it, opens its owner subjects and runs recovery. */
  acquire(tenant: string, sessionId: string, waitMs: number): Promise<SessionRuntime> {
    const key = Leases.key(tenant, sessionId);
    if (this.#deleting.has(key)) return Promise.reject(new TackError("loop.session_busy", `session ${sessionId} is being deleted`, { retryable: true }));
    const have = this.#owned.get(key);
    if (have) {
      // Warm: in use again, so not released while it works (the turn's end schedules the release anew).
      this.#unschedule(key);
      return Promise.resolve(have.runtime);
    }
    const inflight = this.#acquiring.get(key);
    if (inflight) return inflight;
    const p = (async () => {
      const { lease, previousOwner } = await this.#deps.leases.claim(key, waitMs);
      let runtime: SessionRuntime;
      try {
        runtime = await this.#deps.load(tenant, sessionId, lease, this.forget);
      } catch (error) {
        // Reading the log or opening its writer failed (NATS restarting, a writer still finishing):
        // the lease is left to expire rather than deleted, so the recovery scan (here or on another
        // replica) tries again. A deleted lease is no longer scanned, which stranded a session whose
        // turn was interrupted (the chaos test caught one).
        this.#deps.log.warn("session not loaded; its lease is left to expire so that recovery tries again", { session: sessionId, tenant, error: (error as Error).message });
        throw error;
      }
      this.#owned.set(key, { runtime, subscriptions: this.#deps.serve(runtime) });
      if (runtime.meta) {
        const recovered = await runtime.recover(previousOwner);
        if (recovered) this.#deps.log.info("session recovered", { session: sessionId, previous_owner: previousOwner });
      }
      return runtime;
    })().finally(() => this.#acquiring.delete(key));
    this.#acquiring.set(key, p);
    return p;
  }

  /**
   * Called when a session has nothing running: it stays warm (lease renewed, projection kept)
   * for `idleReleaseMs`, then is released. A lost lease or an empty session is released at once (a lost one left to expire).
   */
  readonly forget = (runtime: SessionRuntime): void => {
    const key = Leases.key(runtime.tenant, runtime.sessionId);
    const entry = this.#owned.get(key);
    if (!entry || entry.runtime !== runtime || runtime.working) return;
    if (runtime.lost || !runtime.meta || this.#deps.idleReleaseMs === 0 || this.#stopped) return this.#release(runtime);
    this.#unschedule(key);
    const timer = setTimeout(() => {
      this.#idleTimers.delete(key);
      this.#release(runtime);
    }, this.#deps.idleReleaseMs);
    timer.unref();
    this.#idleTimers.set(key, timer);
  };

  /**
   * Deletes a session with everything kept for it (`deleteSessionData`) under its lease: taken
   * over from this process's idle runtime, or claimed. Refused (`loop.busy`) while a turn runs or
   * a sandbox mode change is checked here; a lease another loop keeps renewing past the wait is
   * `loop.session_busy`. The running turn is not cancelled: see docs/decisions/0006-deletion.md.
   */
  async remove(tenant: string, sessionId: string, deletedBy: string): Promise<DeleteSessionResponse> {
    if (!deletedBy) throw new TackError("loop.bad_request", "deleted_by is empty; say who deletes the session (an API key id or retention)");
    const key = Leases.key(tenant, sessionId);
    const busy = (what: string) => new TackError("loop.busy", `session ${sessionId} ${what}; wait for its turn/end (answer or reject a pending approval to end it sooner), then delete it`, { retryable: true });
    if (this.#deleting.has(key)) throw busy("is being deleted by another request");
    // A claim in flight may be about to resume an interrupted turn: let it decide first.
    await this.#acquiring.get(key)?.catch(() => undefined);
    const entry = this.#owned.get(key);
    if (entry?.runtime.working) throw busy("is running a turn or changing its sandbox mode");
    if (this.#deleting.has(key)) throw busy("is being deleted by another request");
    this.#deleting.add(key);
    try {
      let lease: Lease;
      if (entry) {
        // Idle but still ours: stop serving it, keep the lease for the deletion.
        this.#drop(key);
        lease = entry.runtime.lease;
      } else {
        lease = (await this.#deps.leases.claim(key, this.#deps.leaseTtlMs + 1_000)).lease;
      }
      try {
        const deleted = await deleteSessionData({ bus: this.#deps.bus, leases: this.#deps.leases }, { tenant, sessionId }, lease);
        this.#deps.log.info("session deleted", { session: sessionId, tenant, deleted_by: deletedBy, ...deleted });
        return deleted;
      } catch (error) {
        // Released rather than left to expire, so no replica recovers (and resumes) what is half deleted.
        await this.#deps.leases.release(lease);
        throw error;
      }
    } finally {
      this.#deleting.delete(key);
    }
  }

  /** Takes over the sessions whose owner stopped renewing its lease (crashed or partitioned away). */
  async scan(): Promise<void> {
    for (const state of await this.#deps.leases.all()) {
      if (this.#stopped) return;
      // An expired lease of our own that no runtime here holds is one this process gave up (lost lease, broken writer): taken over like any other.
      if (state.expiresAt > Date.now() || this.#owned.has(state.key)) continue;
      const dot = state.key.indexOf(".");
      const runtime = await this.acquire(state.key.slice(0, dot), state.key.slice(dot + 1), 0).catch(() => undefined);
      if (runtime) this.forget(runtime);
    }
  }

  /** Stops serving every session; a session mid-turn keeps its lease until it expires, so another replica recovers it. */
  async stop(): Promise<void> {
    this.#stopped = true;
    for (const timer of this.#idleTimers.values()) clearTimeout(timer);
    this.#idleTimers.clear();
    for (const { runtime, subscriptions } of this.#owned.values()) {
      for (const subscription of subscriptions) subscription.unsubscribe();
      runtime.dispose();
      if (!runtime.busy) await this.#deps.leases.release(runtime.lease);
    }
    this.#owned.clear();
  }

  /**
   * Stops serving a session and gives its lease back, unless the runtime gave the session up (lost
   * lease, broken writer): that lease is left to expire, so that a replica's scan takes the session
   * over and resumes a turn it may have been in. Deleted, no scan would ever see it again.
   */
  #release(runtime: SessionRuntime): void {
    const key = Leases.key(runtime.tenant, runtime.sessionId);
    const entry = this.#owned.get(key);
    if (!entry || entry.runtime !== runtime || runtime.working) return;
    const gaveUp = runtime.lost;
    this.#drop(key);
    if (!gaveUp) void this.#deps.leases.release(runtime.lease);
  }

  /** Stops serving an owned session (its subscriptions, its runtime); the lease is the caller's to handle. */
  #drop(key: string): void {
    const entry = this.#owned.get(key);
    if (!entry) return;
    this.#unschedule(key);
    this.#owned.delete(key);
    for (const subscription of entry.subscriptions) subscription.unsubscribe();
    entry.runtime.dispose();
  }

  #unschedule(key: string): void {
    clearTimeout(this.#idleTimers.get(key));
    this.#idleTimers.delete(key);
  }
}
