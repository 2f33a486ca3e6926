import { readSession } from "@tack/log";
import type { Event } from "@tack/proto";
import type { Call } from "./call.js";
import { GatewayError } from "./errors.js";
import type { EventSink } from "./feeds.js";
import { requireSession, type GatewayContext } from "./gateway-context.js";
import type { SessionRow } from "./store.js";

/** Where an event stream starts and whether it follows the log. */
export interface StreamPosition {
  readonly fromSeq: number;
  readonly follow: boolean;
}

/**
 * Reads a stream's position: after `lastEventId` (a reconnecting SSE client: the last seq it
 * received) or at `from`; `follow` `0`/`false` stops at the current end of the log. Each refused
 * with 400 naming what to send.
 */
export function streamPosition(request: { lastEventId?: string | undefined; from?: string | undefined; follow?: string | undefined }): StreamPosition {
  const { lastEventId, from, follow } = request;
  let fromSeq = 1;
  if (lastEventId !== undefined && lastEventId !== "") {
    if (!/^\d{1,15}$/.test(lastEventId)) throw new GatewayError(400, "gateway.invalid_last_event_id", `Last-Event-ID must be the seq of the last event received, got ${JSON.stringify(lastEventId)}`);
    fromSeq = Number(lastEventId) + 1;
  } else if (from !== undefined && from !== "") {
    if (!/^[1-9]\d{0,14}$/.test(from)) throw new GatewayError(400, "gateway.invalid_query", `from must be the first seq to send (an integer ≥ 1), got ${JSON.stringify(from)}`);
    fromSeq = Number(from);
  }
  if (follow !== undefined && follow !== "" && !["0", "1", "false", "true"].includes(follow)) {
    throw new GatewayError(400, "gateway.invalid_query", `follow must be 0 or 1, got ${JSON.stringify(follow)}`);
  }
  return { fromSeq, follow: follow !== "0" && follow !== "false" };
}

/** An open event stream of one session: its events, and what ends it. */
export interface OpenEvents {
  /**
   * The session log from the position asked for, in batches of events that arrived together;
   * ends at the log's end unless following, or when `signal` aborts.
   */
  readonly batches: AsyncIterable<readonly Event[]>;
  /**
   * The same events written to `out` as they come (an SSE response: no queue or wake-up per
   * follower); resolves when the stream ended (at the log's end, or when `signal` aborts).
   * Use either this or `batches`, once.
   */
  pipe(out: EventSink): Promise<void>;
  /** Aborted when the caller goes away, the gateway stops or the caller's key is revoked. */
  readonly signal: AbortSignal;
  /** Frees the stream's slot (`max_event_streams`); call once the stream ended. */
  close(): void;
}

/**
 * `StreamEvents`: the caller's session log from a seq, for SSE and gRPC server streaming alike.
 * Refused before anything is sent: another tenant's or an unknown session (404), a bad
 * position (400), `max_event_streams` reached (429).
 */
export async function openEvents(context: GatewayContext, call: Call, id: string, position: StreamPosition, gone: AbortSignal): Promise<OpenEvents> {
  const row = await requireSession(context, call, id);
  // Refused (max_event_streams) before the first event; ends when the caller's key is revoked.
  const slot = context.policy.openStream(call);
  const signal = AbortSignal.any([gone, context.shutdown, slot.signal]);
  // A follower shares the session's feed with every other; a read to the log's current end has its own consumer.
  const batches = position.follow ? context.feeds.follow(row, position.fromSeq, signal) : history(context, row, position.fromSeq, signal);
  const pipe = async (out: EventSink): Promise<void> => {
    if (position.follow) return context.feeds.stream(row, position.fromSeq, signal, out);
    for await (const batch of batches) {
      if (!out.write(batch)) await out.drained();
    }
  };
  return { batches, pipe, signal, close: () => slot.close() };
}

/** Events written at once when the history is read from the log. */
const HISTORY_BATCH = 256;

/**
 * The log from `fromSeq` to its current end: from the session's feed when it keeps all of it (one
 * batch, no consumer), else read from the log in batches of up to `HISTORY_BATCH` events.
 */
async function* history(context: GatewayContext, row: SessionRow, fromSeq: number, signal: AbortSignal): AsyncGenerator<readonly Event[]> {
  const kept = await context.feeds.history(row, fromSeq);
  if (kept) {
    if (kept.length > 0 && !signal.aborted) yield kept;
    return;
  }
  let batch: Event[] = [];
  for await (const event of readSession(context.bus.nc, context.bus.names, { tenant: row.tenant, sessionId: row.id }, { fromSeq, signal })) {
    batch.push(event);
    if (batch.length >= HISTORY_BATCH) {
      yield batch;
      batch = [];
    }
  }
  if (batch.length > 0 && !signal.aborted) yield batch;
}
