import { EVENT_CATALOG, Event, type EventPayloadCase, type EventTypeInfo, type Surface, type Timestamp } from "@tack/proto";

export { timestampMs } from "./time.js";

const byCase = new Map<string, EventTypeInfo>(EVENT_CATALOG.map((e) => [e.payloadCase, e]));
const byType = new Map<string, EventTypeInfo>(EVENT_CATALOG.map((e) => [e.type, e]));

/** The payload union of an Event. */
export type Payload = NonNullable<Event["payload"]>;
/** The value type of one payload case. */
export type PayloadOf<C extends EventPayloadCase> = Extract<Payload, { $case: C }>["value"];
/** An event whose payload is known to be of case C. */
export type EventOf<C extends EventPayloadCase> = Event & { payload: Extract<Payload, { $case: C }> };

/** Looks up a known event type by its type string (e.g. `tool/result`). */
export function eventTypeInfo(type: string): EventTypeInfo | undefined {
  return byType.get(type);
}

/** An event before the writer assigns its seq and time. */
export interface Draft {
  readonly payload: Payload;
  readonly source: string;
  readonly surface?: Surface;
}

/**
 * Builds a draft of a known payload case; type and ignorable come from the catalog. Fields
 * left out of `value` take their protobuf defaults (so adding a field never breaks writers).
 */
export function draft<C extends EventPayloadCase>(payloadCase: C, value: Partial<PayloadOf<C>>, source: string, surface?: Surface): Draft {
  const filled = Event.fromPartial({ payload: { $case: payloadCase, value } as never }).payload;
  if (!filled) throw new Error(`payload case ${payloadCase} is unknown; run make gen`);
  return { payload: filled, source, surface };
}

/** Turns a draft into a full event with its seq and time. */
export function materialize(d: Draft, seq: number, time: Timestamp): Event {
  const info = byCase.get(d.payload.$case);
  if (!info) throw new Error(`payload case ${d.payload.$case} has no entry in the event catalog; run make gen`);
  return Event.fromPartial({
    seq, time, type: info.type, source: d.source, ignorable: info.ignorable, surface: d.surface, payload: d.payload,
  });
}

/** Narrows an event to a payload case. */
export function isCase<C extends EventPayloadCase>(event: Event, payloadCase: C): event is EventOf<C> {
  return event.payload?.$case === payloadCase;
}

/** Microsecond wall clock as a protobuf Timestamp. */
export function now(): Timestamp {
  const micros = Math.round((performance.timeOrigin + performance.now()) * 1000);
  return { seconds: Math.floor(micros / 1e6), nanos: (micros % 1e6) * 1000 };
}
