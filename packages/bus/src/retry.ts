// The one retry policy of Tack: exponential backoff with equal jitter, bounded by attempts and/or a time window.
import { TackError } from "./errors.js";

/** How an operation is retried. Every field has a default; give `windowMs`, `maxAttempts` or both. */
export interface RetryOptions {
  /** Attempts in all, the first included (default: unbounded when `windowMs` is set, else 5). */
  readonly maxAttempts?: number;
  /** No new attempt starts once this many ms have passed since the first failure (default: none). */
  readonly windowMs?: number;
  /** Wait before the second attempt, doubling before each further one (default 250 ms). */
  readonly baseDelayMs?: number;
  /** Longest wait between attempts, also the cap on a server's `retry_after` detail (default 5 s). */
  readonly maxDelayMs?: number;
  /** Jitter source returning [0, 1) (default `Math.random`); tests pin it. */
  readonly random?: () => number;
}

/** Retry options validated and defaulted. */
export interface RetryPolicy {
  readonly maxAttempts: number;
  readonly windowMs: number;
  readonly baseDelayMs: number;
  readonly maxDelayMs: number;
  readonly random: () => number;
}

/** What `retrying` tells its caller before it waits for the next attempt. */
export interface RetryNote {
  /** The attempt that failed (1-based). */
  readonly attempt: number;
  readonly error: TackError;
  /** How long it waits before attempt `attempt + 1`. */
  readonly delayMs: number;
}

/** Validates and defaults retry options; a bad value throws `config.invalid` naming the option. */
export function retryPolicy(options: RetryOptions = {}, code = "config.invalid"): RetryPolicy {
  const windowMs = options.windowMs ?? Number.POSITIVE_INFINITY;
  const policy: RetryPolicy = {
    maxAttempts: options.maxAttempts ?? (Number.isFinite(windowMs) ? Number.MAX_SAFE_INTEGER : 5),
    windowMs,
    baseDelayMs: options.baseDelayMs ?? 250,
    maxDelayMs: options.maxDelayMs ?? 5_000,
    random: options.random ?? Math.random,
  };
  const checks: Array<[string, number, number]> = [["maxAttempts", policy.maxAttempts, 1], ["baseDelayMs", policy.baseDelayMs, 0], ["maxDelayMs", policy.maxDelayMs, 0], ["windowMs", policy.windowMs, 0]];
  for (const [name, value, least] of checks) {
    if (value === Number.POSITIVE_INFINITY && name === "windowMs") continue;
    if (!Number.isInteger(value) || value < least) {
      throw new TackError(code, `retry.${name} is ${value}; it must be an integer of at least ${least}`, { details: { option: `retry.${name}` } });
    }
  }
  return policy;
}

/**
 * The wait after failed attempt `attempt` (1-based): the error's `retry_after` detail (seconds
 * or an HTTP date) when it has one, else exponential backoff with equal jitter (half the
 * backoff plus a random part of the other half); both capped at `maxDelayMs`.
 */
export function retryDelay(policy: RetryPolicy, attempt: number, error?: TackError): number {
  const retryAfter = retryAfterMs(error?.details.retry_after);
  if (retryAfter !== undefined) return Math.min(policy.maxDelayMs, retryAfter);
  const backoff = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** Math.min(30, attempt - 1));
  return Math.round(backoff / 2 + (policy.random() * backoff) / 2);
}

/**
 * Runs `attempt` until it succeeds or fails for good; then throws the last error (as a
 * TackError). A failure is retried when `retryable(error)` says so (default: the error's own
 * `retryable` flag), attempts remain, the window (counted from the first failure, so a long
 * call that fails late still gets all of it) leaves room for the wait, and `signal` is not
 * aborted. `onRetry` hears of each retry before the wait (to log it as an event, say).
 */
export async function retrying<T>(
  policy: RetryPolicy,
  attempt: (n: number) => Promise<T>,
  options: { onRetry?: (note: RetryNote) => void | Promise<void>; retryable?: (error: TackError) => boolean; signal?: AbortSignal } = {},
): Promise<T> {
  let failingSince: number | undefined;
  const retryable = options.retryable ?? ((e: TackError) => e.retryable);
  for (let n = 1; ; n++) {
    try {
      return await attempt(n);
    } catch (thrown) {
      const error = TackError.from(thrown);
      if (!retryable(error) || options.signal?.aborted || n >= policy.maxAttempts) throw error;
      const delayMs = retryDelay(policy, n, error);
      failingSince ??= Date.now();
      if (Date.now() - failingSince + delayMs > policy.windowMs) throw error;
      await options.onRetry?.({ attempt: n, error, delayMs });
      await sleep(delayMs, options.signal);
      if (options.signal?.aborted) throw error;
    }
  }
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

/**
 * `retry_after` as ms: seconds (`"2"`, `"1.5"`) or an HTTP date; undefined when absent or
 * unreadable. Only plain decimal seconds count as seconds: `Number()` would read `" "` as 0
 * and `"0x10"` as 16, and hand `"-1"` to `Date.parse`, which takes it for a year.
 */
export function retryAfterMs(value: string | undefined): number | undefined {
  const text = value?.trim();
  if (!text) return undefined;
  if (/^\d+(\.\d+)?$/.test(text)) return Math.round(Number(text) * 1000);
  if (/^[+-]?[\d.eE+-]+$|^0[xXoObB]/.test(text)) return undefined;
  const date = Date.parse(text);
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now());
}
