import { Kvm, type KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/nats-core";
import { TackError } from "@tack/bus";
import type { SandboxMode } from "./spec.js";

/** Where one session's container of one mode lives, as recorded in the namespace's placement bucket. */
export interface Placement {
  /** Replica that owns the container and holds its agent channel. */
  readonly replica: string;
  readonly container_id: string;
  readonly tenant: string;
  /** Canonical host path of the workspace. */
  readonly workspace: string;
  readonly runtime: string;
  /** Epoch milliseconds; the earliest of a session's containers is the one an exec without a mode runs in. */
  readonly created_at: number;
  /** Host path of the warm pool slot the workspace is mounted onto, for a container claimed from the pool. */
  readonly slot?: string;
}

/** A placement with the KV revision it was read at. */
export interface PlacementEntry {
  readonly placement: Placement;
  readonly revision: number;
}

/** Name of the placement bucket of a namespace (beside the bus's `<NS>_LOG` and `<NS>_LEASES`). */
export function placementBucket(namespace: string): string {
  return `${namespace.toUpperCase().replace(/-/g, "_")}_SANDBOXES`;
}

/** The subject a replica serves requests for its own containers on: `<ns>.sandbox.replica.<id>.<verb>`. */
export function replicaSubject(namespace: string, replicaId: string, verb: "ensure" | "exec" | "release" | "processes" | "stdio_open" | "ping"): string {
  return `${namespace}.sandbox.replica.${replicaId}.${verb}`;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * Which replica owns which container: the JetStream KV bucket `<NS>_SANDBOXES`, one key per
 * session and mode (`<session>.<mode>`). A record is created atomically by the replica that
 * started the container, so two replicas never both own one session's mode.
 */
export class Placements {
  readonly #kv: KV;

  private constructor(kv: KV) {
    this.#kv = kv;
  }

  /** Opens the namespace's bucket, creating it when needed. */
  static async open(nc: NatsConnection, namespace: string): Promise<Placements> {
    try {
      return new Placements(await new Kvm(nc).create(placementBucket(namespace), { history: 1 }));
    } catch (error) {
      throw new TackError(
        "sandbox.placements_unavailable",
        `could not open the JetStream KV bucket ${placementBucket(namespace)} (${(error as Error).message}); NATS must run with JetStream enabled (\`nats-server -js\`)`,
        { retryable: true, cause: error },
      );
    }
  }

  /** The record of a session's mode, if any. */
  async get(sessionId: string, mode: SandboxMode): Promise<PlacementEntry | undefined> {
    const entry = await this.#kv.get(key(sessionId, mode));
    if (!entry || entry.operation !== "PUT" || entry.value.length === 0) return undefined;
    return { placement: JSON.parse(decoder.decode(entry.value)) as Placement, revision: entry.revision };
  }

  /**
   * Records a new container (or reserves the session's mode while one starts, with an empty
   * `container_id`); returns the record's revision, or undefined when the session's mode already
   * has a record (another replica won).
   */
  async create(sessionId: string, mode: SandboxMode, placement: Placement): Promise<number | undefined> {
    try {
      return await this.#kv.create(key(sessionId, mode), encoder.encode(JSON.stringify(placement)));
    } catch (error) {
      if (await this.get(sessionId, mode)) return undefined;
      throw error;
    }
  }

  /** Replaces a record read or written at `revision`; fails when it changed since. */
  async update(sessionId: string, mode: SandboxMode, placement: Placement, revision: number): Promise<void> {
    await this.#kv.update(key(sessionId, mode), encoder.encode(JSON.stringify(placement)), revision);
  }

  /** Deletes the record of a session's mode if it still names `containerId`. */
  async delete(sessionId: string, mode: SandboxMode, containerId: string): Promise<void> {
    const current = await this.get(sessionId, mode);
    if (current?.placement.container_id !== containerId) return;
    // A concurrent change of the record wins; it then names another container.
    await this.#kv.delete(key(sessionId, mode), { previousSeq: current.revision }).catch(() => undefined);
  }
}

function key(sessionId: string, mode: SandboxMode): string {
  return `${sessionId}.${mode}`;
}
