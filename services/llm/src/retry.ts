import { setTimeout as sleep } from "node:timers/promises";
import { TackError } from "@tack/bus";
import type { RetryNotice } from "@tack/proto";
import { cancelled } from "./provider.js";

/** How the service retries a provider call that failed in a retryable way. */
export interface RetryOptions {
  /** Attempts in all, the first included (default 5). */
  maxAttempts?: number;
  /** Wait before the second attempt, doubling before each further one (default 500 ms). */
  baseDelayMs?: number;
  /** Longest wait, also the cap on a server's `retry-after` (default 10 s). */
  maxDelayMs?: number;
  /** Jitter source returning [0, 1) (default `Math.random`); tests pin it. */
  random?: () => number;
}

/** Retry options validated and defaulted. */
export type RetryPolicy = Required<RetryOptions>;

/** Validates and defaults retry options; a bad value is `llm.bad_options`. */
export function compileRetryPolicy(options: RetryOptions = {}): RetryPolicy {
  const policy = { maxAttempts: 5, baseDelayMs: 500, maxDelayMs: 10_000, random: Math.random, ...options };
  for (const [name, value, least] of [["maxAttempts", policy.maxAttempts, 1], ["baseDelayMs", policy.baseDelayMs, 0], ["maxDelayMs", policy.maxDelayMs, 0]] as const) {
    if (!Number.isInteger(value) || value < least) {
      throw new TackError("llm.bad_options", `retry.${name} is ${value}; it must be an integer of at least ${least}`, { details: { option: `retry.${name}` } });
    }
  }
  return policy;
}

/**
 * The wait after failed attempt `attempt` (1-based): the server's `retry-after` when it gave
 * one, else exponential backoff with equal jitter (half the backoff plus a random part of the
 * other half, so that clients spread out but never retry at once); both capped at `maxDelayMs`.
 */
export function retryDelay(policy: RetryPolicy, attempt: number, error: TackError): number {
  const retryAfter = retryAfterMs(error.details.retry_after);
  if (retryAfter !== undefined) return Math.min(policy.maxDelayMs, retryAfter);
  const backoff = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** (attempt - 1));
  return Math.round(backoff / 2 + (policy.random() * backoff) / 2);
}

/**
 * Runs `attempt` until it succeeds, fails in a way that is not retryable, or has failed
 * `maxAttempts` times; then throws the last error. Before each new attempt it reports a
 * notice to `onRetry` and waits. An aborted `signal` stops retrying with `llm.cancelled`.
 */
export async function withRetries<T>(
  policy: RetryPolicy,
  attempt: (n: number) => Promise<T>,
  onRetry: (notice: RetryNotice) => void,
  signal: AbortSignal,
): Promise<T> {
  for (let n = 1; ; n++) {
    try {
      return await attempt(n);
    } catch (thrown) {
      const error = TackError.from(thrown);
      if (!error.retryable || signal.aborted || n >= policy.maxAttempts) throw error;
      const delayMs = retryDelay(policy, n, error);
      onRetry({ attempt: n, code: error.code, message: error.message, delayMs });
      await sleep(delayMs, undefined, { signal }).catch(() => {
        throw cancelled();
      });
    }
  }
}

/** A `retry-after` value (seconds, or an HTTP date) in milliseconds from now; undefined when absent or unreadable. */
function retryAfterMs(value: string | undefined): number | undefined {
  if (value === undefined || value.trim() === "") return undefined;
  if (/^\d+(\.\d+)?$/.test(value.trim())) return Math.round(Number(value) * 1000);
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}
