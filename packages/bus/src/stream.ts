import { createInbox, headers as newHeaders, type Msg, type Subscription } from "@nats-io/nats-core";
import { SpanKind } from "@opentelemetry/api";
import { BusError } from "@tack/proto";
import type { Bus, RequestContext, ServeOptions } from "./bus.js";
import { ALIVE_HEADER, askForHeartbeats, ERROR_HEADER, heartbeat, MAX_BUS_PAYLOAD, noResponders, RPC_HEADER, workerLost } from "./bus.js";
import { rpcSubject, type Rpc } from "./descriptor.js";
import { decodeReply, decodeRequest } from "./rpc-checks.js";
import { TackError } from "./errors.js";
import { extractTrace, injectTrace, inSpan } from "./trace.js";

/** Sends the messages of one streamed reply, in order. */
export interface StreamWriter<T> {
  /** Publishes one message of the reply stream. */
  send(message: T): void;
}

/** Options of a streamed request. */
export interface StreamRequestOptions {
  /** Fail when no message arrives for this long (default 60 s). */
  readonly idleTimeoutMs?: number;
  /** Ask the handler for heartbeats and give up on it after this long without one (`bus.worker_lost`). */
  readonly silenceMs?: number;
}

/**
 * Streamed request for `rpc` (a streaming descriptor such as `LlmRpc.Complete`): publishes
 * `request` with a private reply inbox and passes every reply message to `onMessage` until
 * `isLast` says the stream is over. Fails on no responders, on a BusError reply and when no
 * message arrives for `idleTimeoutMs`. With `silenceMs`, the handler is asked for heartbeats
 * (which count as life but not as messages), and a handler silent for that long fails the
 * stream with `bus.worker_lost` (retryable): it died. Errors name the rpc.
 */
export async function requestStream<Req, Res>(
  bus: Bus, rpc: Rpc<Req, Res, true, string>, request: Req, onMessage: (message: Res) => void, isLast: (message: Res) => boolean, options: StreamRequestOptions = {},
): Promise<void> {
  const subject = rpcSubject(bus.names.namespace, rpc);
  const what = `${rpc.fullName} (${subject})`;
  const idleTimeoutMs = options.idleTimeoutMs ?? 60_000;
  const silenceMs = options.silenceMs;
  const payload = rpc.requestType.encode(request).finish();
  if (payload.length > MAX_BUS_PAYLOAD) {
    throw new TackError("bus.payload_too_large", `request for ${what} is ${payload.length} bytes, over the ${MAX_BUS_PAYLOAD}-byte bus limit`);
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
      h.set(RPC_HEADER, rpc.fullName);
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
          throw noResponders(subject, undefined, rpc.fullName);
        }
        if (msg.headers?.get(ERROR_HEADER)) {
          timedOut = false;
          throw TackError.fromBusError(BusError.decode(msg.data));
        }
        const message = decodeReply(msg, rpc.responseType, rpc, subject);
        onMessage(message);
        if (isLast(message)) {
          timedOut = false;
          break;
        }
      }
      if (timedOut && silent) throw workerLost(subject, silenceMs!, heard, rpc.fullName);
      if (timedOut) throw new TackError("bus.timeout", `no reply on ${what} for ${idleTimeoutMs} ms`, { retryable: true, details: { subject } });
    } finally {
      clearTimeout(timer);
      clearTimeout(silence);
      sub.unsubscribe();
    }
  }, { kind: SpanKind.CLIENT });
}

/**
 * Serves streaming `rpc` on its subject and queue group (`options.queue` overrides it); what
 * `bus.serve` does for a streaming descriptor. The handler writes any number of messages with
 * `writer.send`; a thrown error is sent as a final BusError message.
 */
export function serveStream<Req, Res>(bus: Bus, rpc: Rpc<Req, Res, true, string>, handler: (request: Req, writer: StreamWriter<Res>, context: RequestContext) => Promise<void>, options: ServeOptions = {}): Subscription {
  const subject = rpcSubject(bus.names.namespace, rpc);
  const queue = options.queue ?? rpc.queue;
  const handle = async (msg: Msg) => {
    const reply = msg.reply;
    const stopBeating = heartbeat(bus.nc, msg);
    await inSpan(`handle ${subject}`, { "messaging.destination": subject }, async () => {
      try {
        const request = decodeRequest(msg, rpc.requestType, rpc);
        const h = newHeaders();
        h.set(RPC_HEADER, rpc.fullName);
        await handler(request, {
          send: (message) => {
            if (reply) bus.nc.publish(reply, rpc.responseType.encode(message).finish(), { headers: h });
          },
        }, { subject: msg.subject, headers: msg.headers });
      } catch (error) {
        const h = newHeaders();
        h.set(ERROR_HEADER, "1");
        stopBeating();
        if (reply) bus.nc.publish(reply, BusError.encode(TackError.from(error).toBusError()).finish(), { headers: h });
      }
    }, { parent: extractTrace(msg.headers), kind: SpanKind.SERVER }).catch(() => undefined);
    stopBeating();
  };
  return bus.track(bus.nc.subscribe(subject, { queue, callback: (err, msg) => { if (!err) void handle(msg); } }));
}
