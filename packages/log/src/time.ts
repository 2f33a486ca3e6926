import type { Timestamp } from "@tack/proto";

/** Milliseconds since the epoch (fractional) of a Timestamp. */
export function timestampMs(t: Timestamp | undefined): number {
  return t ? t.seconds * 1000 + t.nanos / 1e6 : 0;
}
