import type { NatsConnection } from "@nats-io/nats-core";
import { Objm, StorageType, type ObjectStore } from "@nats-io/obj";
import type { Names } from "@tack/bus";
import type { SessionAddress } from "./writer.js";

/**
 * Object name of a spilled tool result. Tenant and session ids are subject tokens (no dots),
 * so the prefix is unambiguous: whatever call id a session asks for, it can only name its own objects.
 */
export function spillObjectName(address: SessionAddress, callId: string): string {
  return `${address.tenant}.${address.sessionId}.${callId}`;
}

/** Options of the spill bucket. */
export interface SpillBucketOptions {
  /** JetStream replicas: 1 locally, 3 in production (like the log). */
  replicas?: number;
}

/**
 * The object store holding whole tool results that were too large for the log (bucket
 * `names.spillBucket`); the log's `tool/result` keeps a preview and the object name.
 */
export class SpillBucket {
  readonly #store: ObjectStore;

  private constructor(store: ObjectStore) {
    this.#store = store;
  }

  /** Opens the bucket, creating it when missing (only options nats-server 2.9 knows). */
  static async ensure(nc: NatsConnection, names: Names, options: SpillBucketOptions = {}): Promise<SpillBucket> {
    return new SpillBucket(await new Objm(nc).create(names.spillBucket, { storage: StorageType.File, replicas: options.replicas ?? 1 }));
  }

  /** Opens the bucket if it exists; undefined when nothing was ever spilled in this namespace. */
  static async open(nc: NatsConnection, names: Names): Promise<SpillBucket | undefined> {
    try {
      return new SpillBucket(await new Objm(nc).open(names.spillBucket));
    } catch (error) {
      if ((error as Error).message === "object store not found") return undefined;
      throw error;
    }
  }

  /** Stores the whole result of call `callId` of a session; returns its object name. */
  async put(address: SessionAddress, callId: string, data: Uint8Array): Promise<string> {
    const name = spillObjectName(address, callId);
    await this.#store.putBlob({ name }, data);
    return name;
  }

  /** The whole spilled result of call `callId` of this session, or undefined when the session spilled none under that id. */
  async get(address: SessionAddress, callId: string): Promise<Uint8Array | undefined> {
    return (await this.#store.getBlob(spillObjectName(address, callId))) ?? undefined;
  }

  /** Deletes the bucket and everything in it (tests and namespace teardown). */
  async destroy(): Promise<void> {
    await this.#store.destroy();
  }
}

const SPILL_PATH_PREFIX = "tack-spill:";

/** The path the `read` tool takes to read a spilled result of this session (what the model is told to use). */
export function spillPath(callId: string): string {
  return `${SPILL_PATH_PREFIX}${callId}`;
}

/** The call id named by a spill path, or undefined when `path` is an ordinary file path. */
export function parseSpillPath(path: string): string | undefined {
  return path.startsWith(SPILL_PATH_PREFIX) ? path.slice(SPILL_PATH_PREFIX.length) : undefined;
}
