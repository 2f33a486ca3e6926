import { context, propagation, SpanKind, SpanStatusCode, trace, type Context } from "@opentelemetry/api";
import type { MsgHdrs } from "@nats-io/nats-core";

const setter = { set: (carrier: MsgHdrs, key: string, value: string) => carrier.set(key, value) };
const getter = {
  get: (carrier: MsgHdrs | undefined, key: string) => carrier?.get(key) || undefined,
  keys: (carrier: MsgHdrs | undefined) => (carrier ? carrier.keys() : []),
};

/** Writes the active trace context (W3C `traceparent`) into NATS headers. */
export function injectTrace(headers: MsgHdrs, ctx: Context = context.active()): void {
  propagation.inject(ctx, headers, setter);
}

/** Reads a trace context from NATS headers. */
export function extractTrace(headers: MsgHdrs | undefined): Context {
  return propagation.extract(context.active(), headers, getter);
}

const tracer = trace.getTracer("@tack/bus");

/** Runs `fn` inside a span named `name`, recording failures. */
export async function inSpan<T>(
  name: string,
  attributes: Record<string, string | number | boolean>,
  fn: () => Promise<T>,
  options: { parent?: Context; kind?: SpanKind } = {},
): Promise<T> {
  const parent = options.parent ?? context.active();
  return tracer.startActiveSpan(name, { attributes, kind: options.kind ?? SpanKind.INTERNAL }, parent, async (span) => {
    try {
      return await fn();
    } catch (error) {
      span.recordException(error as Error);
      span.setStatus({ code: SpanStatusCode.ERROR, message: (error as Error).message });
      throw error;
    } finally {
      span.end();
    }
  });
}
