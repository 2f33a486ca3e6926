import { JetStreamApiError, jetstreamManager } from "@nats-io/jetstream";
import { Kvm, type KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/nats-core";
import { TackError, type Names } from "@tack/bus";

interface LeaseValue {
  owner: string;
  expires_at: number;
}

/** A held lease; `revision` is the fencing token (the KV revision of our last write). */
export interface Lease {
  readonly key: string;
  revision: number;
}

/** What a lease entry says now. */
export interface LeaseState {
  readonly key: string;
  readonly owner: string;
  readonly expiresAt: number;
  readonly revision: number;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();
/** JetStream's answer to a compare-and-set whose revision is no longer the key's latest. */
const WRONG_LAST_SEQUENCE = 10071;

/**
 * Session ownership through a JetStream KV bucket: one key per session, claimed with
 * create/compare-and-set, renewed while working, taken over only after it expired.
 */
export class Leases {
  readonly #kv: KV;
  readonly #nc: NatsConnection;
  readonly #bucket: string;
  readonly owner: string;
  readonly ttlMs: number;

  private constructor(kv: KV, nc: NatsConnection, bucket: string, owner: string, ttlMs: number) {
    this.#kv = kv;
    this.#nc = nc;
    this.#bucket = bucket;
    this.owner = owner;
    this.ttlMs = ttlMs;
  }

  /**
   * Opens (creating if needed) the lease bucket of a deployment; a new bucket gets `replicas`
   * JetStream replicas (the log's: 1 on one server, 3 in a cluster), an existing one keeps its own.
   */
  static async open(nc: NatsConnection, names: Names, owner: string, ttlMs: number, options: { replicas?: number } = {}): Promise<Leases> {
    const kvm = new Kvm(nc);
    const kv = await kvm.create(names.leaseBucket, { history: 1, replicas: options.replicas ?? 1 });
    return new Leases(kv, nc, names.leaseBucket, owner, ttlMs);
  }

  /** Lease key of a session. */
  static key(tenant: string, sessionId: string): string {
    return `${tenant}.${sessionId}`;
  }

  #value(): Uint8Array {
    return encoder.encode(JSON.stringify({ owner: this.owner, expires_at: Date.now() + this.ttlMs } satisfies LeaseValue));
  }

  /** Reads a lease entry (undefined when free). */
  async state(key: string): Promise<LeaseState | undefined> {
    const entry = await this.#kv.get(key);
    if (!entry || entry.operation !== "PUT" || entry.value.length === 0) return undefined;
    const v = JSON.parse(decoder.decode(entry.value)) as LeaseValue;
    return { key, owner: v.owner, expiresAt: v.expires_at, revision: entry.revision };
  }

  /** Tries to claim a lease: succeeds when free, expired or already ours; otherwise returns the holder. */
  async tryClaim(key: string): Promise<{ lease: Lease; previousOwner?: string } | { heldBy: LeaseState }> {
    const current = await this.state(key);
    try {
      if (!current) {
        const entry = await this.#kv.get(key);
        const revision = entry
          ? await this.#kv.update(key, this.#value(), entry.revision)
          : await this.#kv.create(key, this.#value());
        return { lease: { key, revision } };
      }
      if (current.owner !== this.owner && current.expiresAt > Date.now()) return { heldBy: current };
      const revision = await this.#kv.update(key, this.#value(), current.revision);
      return { lease: { key, revision }, previousOwner: current.owner === this.owner ? undefined : current.owner };
    } catch {
      // Lost a race with another claimer: report whoever holds it now.
      const now = await this.state(key);
      if (now && now.owner === this.owner) return { lease: { key, revision: now.revision } };
      return { heldBy: now ?? { key, owner: "unknown", expiresAt: Date.now() + this.ttlMs, revision: 0 } };
    }
  }

  /** Claims a lease, waiting up to `waitMs` for another holder's lease to expire. */
  async claim(key: string, waitMs: number): Promise<{ lease: Lease; previousOwner?: string }> {
    const deadline = Date.now() + waitMs;
    for (;;) {
      const r = await this.tryClaim(key);
      if ("lease" in r) return r;
      if (Date.now() >= deadline) {
        throw new TackError("loop.session_busy", `session ${key} is owned by loop ${r.heldBy.owner} until ${new Date(r.heldBy.expiresAt).toISOString()}; retry later`, {
          retryable: true, details: { owner: r.heldBy.owner },
        });
      }
      await new Promise((res) => setTimeout(res, Math.min(250, Math.max(10, r.heldBy.expiresAt - Date.now() + 5))));
    }
  }

  /**
   * Extends a held lease; throws `loop.lease_lost` when someone else took it (we must stop
   * writing). A write that fails without a verdict (a JetStream leader election in a cluster, a
   * reconnect, a timeout) is retried for up to twice the TTL: the compare-and-set keeps it safe,
   * since a loop that took the lease over meanwhile changed the revision. Calls made while one
   * is under way share it.
   */
  renew(lease: Lease): Promise<void> {
    const inflight = this.#renewing.get(lease);
    if (inflight) return inflight;
    const run = this.#renew(lease).finally(() => this.#renewing.delete(lease));
    this.#renewing.set(lease, run);
    return run;
  }

  readonly #renewing = new WeakMap<Lease, Promise<void>>();

  async #renew(lease: Lease): Promise<void> {
    const giveUpAt = Date.now() + 2 * this.ttlMs;
    for (let attempt = 1; ; attempt++) {
      try {
        lease.revision = await this.#kv.update(lease.key, this.#value(), lease.revision);
        return;
      } catch (error) {
        if (error instanceof JetStreamApiError && error.code === WRONG_LAST_SEQUENCE) {
          // Our own earlier attempt may have been stored before its reply was lost: only we write our owner id.
          const now = await this.state(lease.key).catch(() => undefined);
          if (now?.owner === this.owner) {
            lease.revision = now.revision;
            return;
          }
          throw new TackError("loop.lease_lost", `lost the lease on ${lease.key}: loop ${now?.owner ?? "(none)"} took over the session`, { cause: error });
        }
        const delay = Math.min(1_000, Math.max(50, this.ttlMs / 8), 100 * 2 ** attempt);
        if (Date.now() + delay >= giveUpAt) {
          throw new TackError("loop.lease_lost", `could not renew the lease on ${lease.key} for ${2 * this.ttlMs} ms (${(error as Error).message}); is NATS reachable? Another loop takes the session over once it expires`, { cause: error });
        }
        await new Promise((resolve) => setTimeout(resolve, delay));
      }
    }
  }

  /** Gives a lease up (only if still ours). */
  async release(lease: Lease): Promise<void> {
    await this.#kv.delete(lease.key, { previousSeq: lease.revision }).catch(() => undefined);
  }

  /**
   * Removes every trace of a lease key, value and delete markers alike (a KV delete keeps a
   * marker that names the key): for a deleted session, whose lease the caller holds.
   */
  async erase(key: string): Promise<void> {
    const jsm = await jetstreamManager(this.#nc);
    await jsm.streams.purge(`KV_${this.#bucket}`, { filter: `$KV.${this.#bucket}.${key}` });
  }

  /** Every lease currently recorded (held or expired). */
  async all(): Promise<LeaseState[]> {
    const out: LeaseState[] = [];
    const keys = await this.#kv.keys();
    for await (const k of keys) {
      const s = await this.state(k);
      if (s) out.push(s);
    }
    return out;
  }
}
