import { createInbox, headers as newHeaders, type Msg } from "@nats-io/nats-core";
import { SpanKind } from "@opentelemetry/api";
import { BusError } from "@tack/proto";
import type { Bus, Codec } from "./bus.js";
import { ALIVE_HEADER, askForHeartbeats, ERROR_HEADER, heartbeat, MAX_BUS_PAYLOAD, noResponders, workerLost } from "./bus.js";
import { TackError } from "./errors.js";
import { extractTrace, injectTrace, inSpan } from "./trace.js";

/** Sends the messages of one streamed reply, in order. */
export interface StreamWriter<T> {
  /** Publishes one message of the reply stream. */
  send(message: T): void;
}

/**
 * Streamed request: publishes `request` with a private reply inbox and passes every reply
 * message to `onMessage` until `isLast` says the stream is over. Fails on no responders,
 * on a BusError reply and when no message arrives for `idleTimeoutMs`. With `silenceMs`, the
 * handler is asked for heartbeats (which count as life but not as messages), and a handler
 * silent for that long fails the stream with `bus.worker_lost` (retryable): it died.
 */
export async function requestStream<Req, Res>(
  bus: Bus,
  subject: string,
  requestCodec: Codec<Req>,
  request: Req,
  responseCodec: Codec<Res>,
  onMessage: (message: Res) => void,
  isLast: (message: Res) => boolean,
  options: { idleTimeoutMs?: number; silenceMs?: number } = {},
): Promise<void> {
  const idleTimeoutMs = options.idleTimeoutMs ?? 60_000;
  const silenceMs = options.silenceMs;
  const payload = requestCodec.encode(request).finish();
  if (payload.length > MAX_BUS_PAYLOAD) {
    throw new TackError("bus.payload_too_large", `request for ${subject} is ${payload.length} bytes, over the ${MAX_BUS_PAYLOAD}-byte bus limit`);
  }
  await inSpan(`request ${subject}`, { "messaging.destination": subject }, async () => {
    // Under the connection's own prefix: a NATS user may subscribe only to its own inboxes.
    const inbox = createInbox(bus.inboxPrefix);
    const sub = bus.nc.subscribe(inbox);
    let timer: NodeJS.Timeout | undefined;
    let silence: NodeJS.Timeout | undefined;
    let silent = false;
    let heard = false;
    const idle = () => {
      clearTimeout(timer);
      timer = setTimeout(() => sub.unsubscribe(), idleTimeoutMs);
    };
    const alive = () => {
      if (silenceMs === undefined) return;
      clearTimeout(silence);
      silence = setTimeout(() => {
        silent = true;
        sub.unsubscribe();
      }, silenceMs);
    };
    let timedOut = true;
    try {
      const h = newHeaders();
      injectTrace(h);
      if (silenceMs !== undefined) askForHeartbeats(h, silenceMs);
      bus.nc.publish(subject, payload, { reply: inbox, headers: h });
      idle();
      alive();
      for await (const msg of sub) {
        alive();
        if (msg.headers?.get(ALIVE_HEADER)) {
          heard = true;
          continue;
        }
        idle();
        if (msg.headers?.code === 503) {
          timedOut = false;
          throw noResponders(subject);
        }
        if (msg.headers?.get(ERROR_HEADER)) {
          timedOut = false;
          throw TackError.fromBusError(BusError.decode(msg.data));
        }
        const message = responseCodec.decode(msg.data);
        onMessage(message);
        if (isLast(message)) {
          timedOut = false;
          break;
        }
      }
      if (timedOut && silent) throw workerLost(subject, silenceMs!, heard);
      if (timedOut) throw new TackError("bus.timeout", `no reply on ${subject} for ${idleTimeoutMs} ms`, { retryable: true, details: { subject } });
    } finally {
      clearTimeout(timer);
      clearTimeout(silence);
      sub.unsubscribe();
    }
  }, { kind: SpanKind.CLIENT });
}

/**
 * Serves streamed requests on `subject` (queue group `queue`). The handler writes any number
 * of messages with `writer.send`; a thrown error is sent as a final BusError message.
 */
export function serveStream<Req, Res>(
  bus: Bus,
  subject: string,
  queue: string,
  requestCodec: Codec<Req>,
  responseCodec: Codec<Res>,
  handler: (request: Req, writer: StreamWriter<Res>) => Promise<void>,
): void {
  const handle = async (msg: Msg) => {
    const reply = msg.reply;
    const stopBeating = heartbeat(bus.nc, msg);
    await inSpan(`handle ${subject}`, { "messaging.destination": subject }, async () => {
      try {
        let request: Req;
        try {
          request = requestCodec.decode(msg.data);
        } catch (error) {
          throw new TackError("bus.bad_request", `malformed request on ${subject}: ${(error as Error).message}`, { cause: error });
        }
        await handler(request, {
          send: (message) => {
            if (reply) bus.nc.publish(reply, responseCodec.encode(message).finish());
          },
        });
      } catch (error) {
        const h = newHeaders();
        h.set(ERROR_HEADER, "1");
        stopBeating();
        if (reply) bus.nc.publish(reply, BusError.encode(TackError.from(error).toBusError()).finish(), { headers: h });
      }
    }, { parent: extractTrace(msg.headers), kind: SpanKind.SERVER }).catch(() => undefined);
    stopBeating();
  };
  bus.nc.subscribe(subject, { queue, callback: (err, msg) => { if (!err) void handle(msg); } });
}
