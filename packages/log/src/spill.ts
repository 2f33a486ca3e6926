import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { Base64UrlPaddedCodec, Objm, StorageType, type ObjectStore } from "@nats-io/obj";
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
  readonly #nc: NatsConnection;
  readonly #bucket: string;

  private constructor(store: ObjectStore, nc: NatsConnection, bucket: string) {
    this.#store = store;
    this.#nc = nc;
    this.#bucket = bucket;
  }

  /** Opens the bucket, creating it when missing (only options nats-server 2.9 knows). */
  static async ensure(nc: NatsConnection, names: Names, options: SpillBucketOptions = {}): Promise<SpillBucket> {
    return new SpillBucket(await new Objm(nc).create(names.spillBucket, { storage: StorageType.File, replicas: options.replicas ?? 1 }), nc, names.spillBucket);
  }

  /** Opens the bucket if it exists; undefined when nothing was ever spilled in this namespace. */
  static async open(nc: NatsConnection, names: Names): Promise<SpillBucket | undefined> {
    try {
      return new SpillBucket(await new Objm(nc).open(names.spillBucket), nc, names.spillBucket);
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

  /**
   * Deletes every object of one session (named `<tenant>.<session>.<call id>`) without a trace:
   * its chunks, and its metadata including the deletion marker the object store would keep
   * (it carries the name). Returns how many objects were deleted. Found through the bucket's
   * metadata subjects rather than the session's log, so objects spilled by a call whose
   * `tool/result` was never logged (a crash in between) go too.
   */
  async deleteSession(address: SessionAddress): Promise<number> {
    const stream = `OBJ_${this.#bucket}`;
    const metaPrefix = `$O.${this.#bucket}.M.`;
    const prefix = spillObjectName(address, "");
    const jsm = await jetstreamManager(this.#nc);
    const info = await jsm.streams.info(stream, { subjects_filter: `${metaPrefix}>` });
    let deleted = 0;
    for (const subject of Object.keys(info.state.subjects ?? {})) {
      // The object store encodes names with the same codec (not decoded as UTF-8: it encodes with btoa).
      const name = String(Base64UrlPaddedCodec.decode(subject.slice(metaPrefix.length)));
      if (!name.startsWith(prefix)) continue;
      const object = await this.#store.info(name);
      if (object) {
        // Also for an object already marked deleted: a crash may have left its chunks.
        await this.#store.delete(name);
        if (!object.deleted) deleted++;
      }
      await jsm.streams.purge(stream, { filter: subject });
    }
    return deleted;
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
