// The session event stream over Server-Sent Events: fetch + ReadableStream + eventsource-parser,
// so the same code runs in browsers and in Node ≥ 18 (no Node-only APIs).
import { createParser, type EventSourceMessage } from "eventsource-parser";
import { TackApiError, errorFromBody } from "./errors.js";
import type { EventJson } from "./events.js";

/** How a followed stream reconnects after a dropped connection. */
export interface ReconnectOptions {
  /** First wait before reconnecting (default 250 ms); doubles up to `maxDelayMs`. */
  initialDelayMs?: number;
  /** Longest wait between attempts (default 5,000 ms). */
  maxDelayMs?: number;
  /** Give up when connecting has failed for this long without receiving an event (default 60,000 ms; Infinity never gives up). */
  giveUpAfterMs?: number;
}

/** What a stream is doing, for a caller that shows it (e.g. a "live" badge). */
export type StreamState =
  | { state: "connecting"; fromSeq: number }
  | { state: "open"; fromSeq: number }
  | { state: "reconnecting"; lastSeq: number; attempt: number; delayMs: number; error: TackApiError }
  | { state: "closed"; lastSeq: number };

/** Options of `TackClient.events`. */
export interface EventStreamOptions {
  /** The first seq to receive (default 1). */
  from?: number;
  /** Keep the stream open for new events (default true). With false it ends at the current end of the log. */
  follow?: boolean;
  /** Ends the stream (the generator returns without an error). */
  signal?: AbortSignal;
  /** Reconnection of a followed stream; `false` turns it off (a drop is thrown). */
  reconnect?: ReconnectOptions | false;
  /** Told when the stream connects, opens, drops and reconnects, and closes. */
  onState?: (state: StreamState) => void;
}

/** How the stream performs one HTTP request: what `TackClient` gives it. */
export type StreamRequest = (path: string, headers: Record<string, string>, signal: AbortSignal) => Promise<Response>;

/**
 * The session's events in seq order, each exactly once. A followed stream that drops (network
 * error, the gateway restarting, an in-band `error` event of a 5xx kind) is resumed with
 * `Last-Event-ID` = the last seq received, after a backoff; events already received are never
 * yielded again, and a gap (a seq skipped) is an error rather than silently lost data.
 */
export function streamSessionEvents(request: StreamRequest, sessionId: string, options: EventStreamOptions = {}): AsyncGenerator<EventJson> {
  const path = `/v1/sessions/${encodeURIComponent(sessionId)}/events?follow=${(options.follow ?? true) ? 1 : 0}`;
  return resumeInOrder<EventJson>(sessionId, options, async function* (fromSeq, signal, opened) {
    // Resuming the SSE way: the gateway starts after the last event received.
    const headers: Record<string, string> = { accept: "text/event-stream" };
    if (fromSeq > 1) headers["last-event-id"] = String(fromSeq - 1);
    const response = await request(path, headers, signal);
    if (!response.body) throw new TackApiError(0, "client.stream_dropped", `the event stream of ${sessionId} has no body`);
    opened();
    for await (const message of sseMessages(response.body, signal)) {
      if (message.event === "error") throw streamError(message.data);
      yield parseEvent(message.data);
    }
  }, (error) => asApiError(error, sessionId));
}

/**
 * One session's events, each once and in seq order, over any transport: `connect(fromSeq, signal,
 * opened)` opens a stream from a seq (calling `opened` once it is accepted) and yields its events;
 * a followed stream that drops is opened again from the seq after the last one received, after a
 * backoff (`options.reconnect`), and a refusal (`failure(error)` not retryable) is thrown. Used by
 * the SSE stream here and by the gRPC client (`@tack/client/grpc`).
 */
export async function* resumeInOrder<T extends { seq: number }>(
  sessionId: string,
  options: EventStreamOptions,
  connect: (fromSeq: number, signal: AbortSignal, opened: () => void) => AsyncIterable<T>,
  failure: (error: unknown) => TackApiError,
): AsyncGenerator<T> {
  const follow = options.follow ?? true;
  const from = options.from ?? 1;
  if (!Number.isInteger(from) || from < 1) {
    throw new TackApiError(0, "client.bad_argument", `from must be the first seq to receive, an integer ≥ 1; got ${String(from)}`);
  }
  const reconnect = options.reconnect === false ? undefined : {
    initialDelayMs: options.reconnect?.initialDelayMs ?? 250,
    maxDelayMs: options.reconnect?.maxDelayMs ?? 5_000,
    giveUpAfterMs: options.reconnect?.giveUpAfterMs ?? 60_000,
  };
  let last = from - 1;
  let attempt = 0;
  let failingSince: number | undefined;
  const stop = new AbortController();
  const onAbort = () => stop.abort();
  options.signal?.addEventListener("abort", onAbort, { once: true });
  try {
    for (;;) {
      if (stop.signal.aborted) return;
      const connection = new AbortController();
      const signal = AbortSignal.any([stop.signal, connection.signal]);
      let dropped: TackApiError;
      try {
        options.onState?.({ state: "connecting", fromSeq: last + 1 });
        const fromSeq = last + 1;
        for await (const event of connect(fromSeq, signal, () => options.onState?.({ state: "open", fromSeq }))) {
          if (event.seq <= last) continue;
          if (event.seq !== last + 1) {
            throw new TackApiError(0, "client.event_gap", `the event stream of ${sessionId} jumped from seq ${last} to ${event.seq}; events in between were lost`, { details: { last_seq: String(last), seq: String(event.seq) } });
          }
          last = event.seq;
          attempt = 0;
          failingSince = undefined;
          yield event;
        }
        if (stop.signal.aborted) return;
        if (!follow) return;
        dropped = new TackApiError(0, "client.stream_dropped", `the event stream of ${sessionId} ended after seq ${last}`);
      } catch (error) {
        if (stop.signal.aborted) return;
        const refused = failure(error);
        if (!follow || !reconnect || !refused.retryable) throw refused;
        dropped = refused;
      } finally {
        connection.abort();
      }
      failingSince ??= Date.now();
      attempt += 1;
      const delayMs = Math.min(reconnect!.maxDelayMs, reconnect!.initialDelayMs * 2 ** (attempt - 1));
      if (Date.now() - failingSince + delayMs > reconnect!.giveUpAfterMs) throw dropped;
      options.onState?.({ state: "reconnecting", lastSeq: last, attempt, delayMs, error: dropped });
      await sleep(delayMs, stop.signal);
    }
  } finally {
    options.signal?.removeEventListener("abort", onAbort);
    options.onState?.({ state: "closed", lastSeq: last });
  }
}

/** The SSE messages of a response body, parsed by eventsource-parser as bytes arrive. */
export async function* sseMessages(body: ReadableStream<Uint8Array>, signal?: AbortSignal): AsyncGenerator<EventSourceMessage> {
  const queue: EventSourceMessage[] = [];
  const parser = createParser({ onEvent: (message) => queue.push(message) });
  const reader = body.getReader();
  const decoder = new TextDecoder();
  const cancel = () => void reader.cancel().catch(() => undefined);
  signal?.addEventListener("abort", cancel, { once: true });
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      parser.feed(decoder.decode(value, { stream: true }));
      while (queue.length > 0) yield queue.shift()!;
    }
  } finally {
    signal?.removeEventListener("abort", cancel);
    cancel();
  }
}

function parseEvent(data: string): EventJson {
  let json: unknown;
  try {
    json = JSON.parse(data);
  } catch {
    throw new TackApiError(0, "client.bad_event", `the gateway sent an event that is not JSON: ${data.slice(0, 200)}`);
  }
  const event = json as EventJson;
  if (!json || typeof json !== "object" || typeof event.type !== "string" || typeof event.seq !== "number") {
    throw new TackApiError(0, "client.bad_event", `the gateway sent an event without a seq and type: ${data.slice(0, 200)}`);
  }
  return event;
}

/** An in-band `event: error` of a stream that failed after its status line (status 502 unless the body says more). */
function streamError(data: string): TackApiError {
  let body: unknown;
  try {
    body = JSON.parse(data);
  } catch {
    body = undefined;
  }
  return errorFromBody(502, body) ?? new TackApiError(502, "client.stream_failed", `the event stream failed: ${data.slice(0, 200)}`);
}

function asApiError(error: unknown, sessionId: string): TackApiError {
  if (error instanceof TackApiError) return error;
  return new TackApiError(0, "client.stream_dropped", `the event stream of ${sessionId} dropped (${(error as Error).message})`, { cause: error });
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}
