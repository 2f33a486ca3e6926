import { jetstreamManager, RetentionPolicy, StorageType, DiscardPolicy, type JetStreamManager, type StreamInfo } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { TackError, type Names } from "@tack/bus";

/** The Msg-Id dedup window of the log: a retried append within it is stored once. */
const DUPLICATE_WINDOW_MS = 120_000;

/** Size and age limits of the whole log stream (JetStream `max_bytes` / `max_age`); an absent field means no limit. */
export interface LogStreamLimits {
  /**
   * Bytes the stream may hold. The stream discards new messages, so once it is full appends
   * fail rather than silently dropping the oldest events of live sessions.
   */
  maxBytes?: number;
  /** Messages older than this are removed by the server; at least the 2-minute dedup window. */
  maxAgeMs?: number;
}

/** Options of the session log stream. */
export interface LogStreamOptions {
  /** JetStream replicas: 1 locally, 3 in production. */
  replicas?: number;
  /**
   * The stream's limits. When given, a new stream gets them and an existing one is updated to
   * exactly these (an absent field lifts that limit); when omitted, existing limits are kept.
   */
  limits?: LogStreamLimits;
}

/**
 * Creates the session log stream if it does not exist (one stream, one subject per session) and,
 * when `options.limits` is given, makes its `max_bytes` / `max_age` those limits.
 */
export async function ensureLogStream(nc: NatsConnection, names: Names, options: LogStreamOptions = {}): Promise<JetStreamManager> {
  const jsm = await jetstreamManager(nc);
  const limits = options.limits && streamLimits(options.limits);
  let info: StreamInfo | undefined;
  try {
    info = await jsm.streams.info(names.logStream);
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
      duplicate_window: DUPLICATE_WINDOW_MS * 1_000_000,
      allow_direct: true,
      ...limits,
    }).catch(async (error: unknown) => {
      // A concurrent creator won the race; the stream exists now (its limits are checked below).
      info = await jsm.streams.info(names.logStream).catch(() => { throw error; });
    });
  }
  if (info && limits && (info.config.max_bytes !== limits.max_bytes || info.config.max_age !== limits.max_age)) {
    await jsm.streams.update(names.logStream, limits);
  }
  return jsm;
}

/** The stream config fields of `limits` (JetStream: -1 bytes and 0 ns mean unlimited). */
function streamLimits(limits: LogStreamLimits): { max_bytes: number; max_age: number } {
  const { maxBytes, maxAgeMs } = limits;
  if (maxBytes !== undefined && !(Number.isInteger(maxBytes) && maxBytes > 0)) {
    throw new TackError("log.bad_limits", `log max bytes ${maxBytes} is not a positive whole number; leave it out for no limit`);
  }
  // JetStream refuses a dedup window longer than the maximum age.
  if (maxAgeMs !== undefined && !(maxAgeMs >= DUPLICATE_WINDOW_MS)) {
    throw new TackError("log.bad_limits", `log max age ${maxAgeMs} ms is shorter than the log's ${DUPLICATE_WINDOW_MS / 60_000}-minute dedup window; give at least that, or leave it out for no limit`);
  }
  return { max_bytes: maxBytes ?? -1, max_age: maxAgeMs === undefined ? 0 : Math.round(maxAgeMs) * 1_000_000 };
}
