import { DeliverPolicy, jetstream, jetstreamManager, JetStreamApiError } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import type { Names } from "@tack/bus";
import { Event } from "@tack/proto";
import { FORMAT_VERSION, UnknownEventTypeError, UnsupportedFormatError } from "./errors.js";
import { eventTypeInfo } from "./event.js";
import type { SessionAddress } from "./writer.js";

/**
 * Checks one decoded event: a known type must carry its own payload; an unknown type is
 * skipped only when marked ignorable (returns false), otherwise the log is refused.
 */
export function checkEvent(event: Event): boolean {
  const info = eventTypeInfo(event.type);
  if (!info) {
    if (event.ignorable) return false;
    throw new UnknownEventTypeError(event.type, event.seq);
  }
  if (event.payload?.$case !== info.payloadCase) {
    throw new UnknownEventTypeError(`${event.type} (payload ${event.payload?.$case ?? "missing"})`, event.seq);
  }
  if (event.payload.$case === "sessionCreated" && event.payload.value.formatVersion !== FORMAT_VERSION) {
    throw new UnsupportedFormatError(event.payload.value.formatVersion);
  }
  return true;
}

/** Options for reading a session log. */
export interface ReadOptions {
  /** First per-session seq to yield (default 1). */
  fromSeq?: number;
  /** Keep waiting for new events instead of stopping at the current end. */
  follow?: boolean;
  /** Stops a following read. */
  signal?: AbortSignal;
}

/** Reads a session's events in order, validated by `checkEvent`. */
export async function* readSession(nc: NatsConnection, names: Names, address: SessionAddress, options: ReadOptions = {}): AsyncGenerator<Event> {
  const subject = names.logSubject(address.tenant, address.sessionId);
  const fromSeq = options.fromSeq ?? 1;
  if (!options.follow) {
    const jsm = await jetstreamManager(nc);
    const last = await jsm.streams.getMessage(names.logStream, { last_by_subj: subject }).catch((error: unknown) => {
      if (error instanceof JetStreamApiError && error.code === 10037) return null;
      throw error;
    });
    if (!last) return;
  }
  const js = jetstream(nc);
  const consumer = await js.consumers.get(names.logStream, { filter_subjects: subject, deliver_policy: DeliverPolicy.All });
  const messages = await consumer.consume();
  const abort = () => void messages.stop();
  options.signal?.addEventListener("abort", abort, { once: true });
  try {
    if (options.signal?.aborted) return;
    for await (const m of messages) {
      const event = Event.decode(m.data);
      if (event.seq >= fromSeq && checkEvent(event)) yield event;
      if (!options.follow && m.info.pending === 0) break;
    }
  } finally {
    options.signal?.removeEventListener("abort", abort);
    await messages.close().catch(() => undefined);
  }
}

/** Reads a whole session log into memory. */
export async function readAll(nc: NatsConnection, names: Names, address: SessionAddress): Promise<Event[]> {
  const out: Event[] = [];
  for await (const e of readSession(nc, names, address)) out.push(e);
  return out;
}
