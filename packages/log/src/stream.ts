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
  /**
   * JetStream replicas: 1 on a single server, 3 (or 5) on a cluster (operator `log.replicas`).
   * When given, a new stream gets them and an existing one is scaled to them; when omitted, a new
   * stream has 1 and an existing one keeps its own.
   */
  replicas?: number;
  /**
   * The stream's limits. When given, a new stream gets them and an existing one is updated to
   * exactly these (an absent field lifts that limit); when omitted, existing limits are kept.
   */
  limits?: LogStreamLimits;
}

/**
 * Creates the session log stream if it does not exist (one stream, one subject per session) and,
 * when `options.limits` / `options.replicas` are given, makes its `max_bytes` / `max_age` and
 * replica count those. Fails with `log.replicas_unavailable` when the servers cannot hold that
 * many replicas (a single server, or a cluster with fewer servers).
 */
export async function ensureLogStream(nc: NatsConnection, names: Names, options: LogStreamOptions = {}): Promise<JetStreamManager> {
  const jsm = await jetstreamManager(nc);
  const limits = options.limits && streamLimits(options.limits);
  const replicas = options.replicas;
  if (replicas !== undefined && ![1, 3, 5].includes(replicas)) {
    throw new TackError("log.bad_replicas", `log replicas ${replicas} is not 1, 3 or 5; set log.replicas in the operator configuration to 1 (one NATS server) or 3 (a JetStream cluster)`);
  }
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
      num_replicas: replicas ?? 1,
      max_msg_size: 1024 * 1024,
      // Msg-Id dedup window: a retried append within this window is stored once.
      duplicate_window: DUPLICATE_WINDOW_MS * 1_000_000,
      allow_direct: true,
      ...limits,
    }).catch(async (error: unknown) => {
      // A concurrent creator won the race; the stream exists now (its limits are checked below).
      info = await jsm.streams.info(names.logStream).catch(() => { throw replicasUnavailable(error, replicas ?? 1); });
    });
  }
  // A single server takes a larger replica count on update without complaint, yet keeps one copy.
  if (info && replicas !== undefined && replicas > 1 && !info.cluster) {
    throw replicasUnavailable(new Error("the server is not part of a JetStream cluster"), replicas);
  }
  const change = {
    ...(limits && info && (info.config.max_bytes !== limits.max_bytes || info.config.max_age !== limits.max_age) ? limits : {}),
    ...(replicas !== undefined && info && info.config.num_replicas !== replicas ? { num_replicas: replicas } : {}),
  };
  if (Object.keys(change).length > 0) {
    await jsm.streams.update(names.logStream, change).catch((error: unknown) => { throw replicasUnavailable(error, replicas ?? 1); });
  }
  return jsm;
}

/** The server's refusal of a replica count as a TackError saying what to change; other errors as they are. */
function replicasUnavailable(error: unknown, replicas: number): unknown {
  const message = (error as Error).message ?? String(error);
  if (replicas > 1 && /replica|peer|resources|cluster/i.test(message)) {
    return new TackError("log.replicas_unavailable",
      `NATS cannot keep the log stream with ${replicas} replicas (${message}); run a JetStream cluster of at least ${replicas} servers, or set log.replicas: 1 in the operator configuration for a single server`,
      { cause: error });
  }
  return error;
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
