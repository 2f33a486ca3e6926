import { jetstreamManager, RetentionPolicy, StorageType, DiscardPolicy, type JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import type { Names } from "@tack/bus";

/** Options of the session log stream. */
export interface LogStreamOptions {
  /** JetStream replicas: 1 locally, 3 in production. */
  replicas?: number;
}

/** Creates the session log stream if it does not exist (one stream, one subject per session). */
export async function ensureLogStream(nc: NatsConnection, names: Names, options: LogStreamOptions = {}): Promise<JetStreamManager> {
  const jsm = await jetstreamManager(nc);
  try {
    await jsm.streams.info(names.logStream);
  } catch {
    await jsm.streams.add({
      name: names.logStream,
      subjects: [names.logSubjects],
      storage: StorageType.File,
      retention: RetentionPolicy.Limits,
      discard: DiscardPolicy.New,
      num_replicas: options.replicas ?? 1,
      max_msg_size: 1024 * 1024,
      // Msg-Id dedup window: a retried append within this window is stored once.
      duplicate_window: 120 * 1_000_000_000,
      allow_direct: true,
    }).catch(async (error: unknown) => {
      // A concurrent creator won the race; the stream exists now.
      await jsm.streams.info(names.logStream).catch(() => { throw error; });
    });
  }
  return jsm;
}
