import { inspect } from "node:util";
import { TackError } from "@tack/bus";

/** How long `waitFor` keeps asking, and how often. */
export interface WaitOptions {
  /** Give up after this many ms (default 30 s). Keep it below the test's own timeout, or the test runner fails first with a vaguer message. */
  timeoutMs?: number;
  /** Pause between two probes, in ms (default 100). */
  intervalMs?: number;
}

/** What a probe answers: a value when the wait is over; undefined, null or false while it is not. */
export type Probe<T> = () => Promise<T | undefined | null | false> | T | undefined | null | false;

/** What `stopWaiting` throws: a verdict rather than a "not yet". */
class StopWaiting {
  constructor(readonly reason: unknown) {}
}

/**
 * Called in a probe when what it waits for can no longer happen (the process it waits on
 * exited, say): the `waitFor` fails at once with `reason` instead of waiting out its timeout.
 */
export function stopWaiting(reason: unknown): never {
  throw new StopWaiting(reason);
}

/**
 * Asks `probe` until it answers a value other than undefined, null or false, and returns that
 * value. A probe that throws counts as "not yet" (a server still starting, say; `stopWaiting`
 * ends the wait at once instead). When the time
 * is up it fails with `testkit.timeout`, naming `what` it waited for and the last answer or
 * error it saw, so a failing test says what never happened and what was there instead.
 */
export async function waitFor<T>(what: string, probe: Probe<T>, options: WaitOptions = {}): Promise<T> {
  const timeoutMs = options.timeoutMs ?? 30_000;
  const intervalMs = options.intervalMs ?? 100;
  if (!(timeoutMs > 0) || !Number.isFinite(timeoutMs)) throw new TackError("testkit.bad_wait", `waitFor(${JSON.stringify(what)}): timeoutMs is ${timeoutMs}; give a positive number of ms`);
  if (!(intervalMs >= 0) || !Number.isFinite(intervalMs)) throw new TackError("testkit.bad_wait", `waitFor(${JSON.stringify(what)}): intervalMs is ${intervalMs}; give 0 or more ms`);
  const deadline = Date.now() + timeoutMs;
  let last: { value: unknown } | { error: unknown } | undefined;
  for (let probes = 1; ; probes++) {
    try {
      const value = await probe();
      if (value !== undefined && value !== null && value !== false) return value;
      last = { value };
    } catch (error) {
      if (error instanceof StopWaiting) throw error.reason;
      last = { error };
    }
    const left = deadline - Date.now();
    if (left <= 0) {
      const seen = last && "error" in last ? `the last probe failed: ${describe(last.error)}` : `the last probe answered ${describe(last?.value)}`;
      throw new TackError("testkit.timeout", `timed out after ${timeoutMs} ms (${probes} probes) waiting for ${what}; ${seen}`, {
        cause: last && "error" in last ? last.error : undefined,
      });
    }
    await new Promise((resolve) => setTimeout(resolve, Math.min(intervalMs, left)));
  }
}

/** A short readable rendering of a probe's answer or error for the timeout message. */
function describe(value: unknown): string {
  if (value instanceof Error) return `${value.name}: ${value.message}`;
  const text = inspect(value, { depth: 4, breakLength: Infinity, maxArrayLength: 50, maxStringLength: 500 });
  return text.length > 2_000 ? `${text.slice(0, 2_000)}… (${text.length} characters)` : text;
}
