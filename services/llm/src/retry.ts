// The llm service's provider retry: Tack's one retry policy (@tack/bus `retrying`) with the
// service's defaults, its `llm.bad_options` error and its `retry` notices.
import { retrying, retryPolicy, TackError, type RetryPolicy } from "@tack/bus";
import type { RetryNotice } from "@tack/proto";
import { cancelled } from "./provider.js";

export { retryDelay, type RetryPolicy } from "@tack/bus";

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

/** Validates and defaults retry options; a bad value is `llm.bad_options`. */
export function compileRetryPolicy(options: RetryOptions = {}): RetryPolicy {
  return retryPolicy({
    maxAttempts: options.maxAttempts ?? 5,
    baseDelayMs: options.baseDelayMs ?? 500,
    maxDelayMs: options.maxDelayMs ?? 10_000,
    ...(options.random ? { random: options.random } : {}),
  }, "llm.bad_options");
}

/**
 * Runs `attempt` until it succeeds, fails in a way that is not retryable, or has failed
 * `maxAttempts` times; then throws the last error. Before each new attempt it reports a
 * notice to `onRetry` and waits (backoff with jitter, or the server's `retry-after`). An
 * aborted `signal` during the wait stops retrying with `llm.cancelled`.
 */
export async function withRetries<T>(
  policy: RetryPolicy,
  attempt: (n: number) => Promise<T>,
  onRetry: (notice: RetryNotice) => void,
  signal: AbortSignal,
): Promise<T> {
  let waiting = false;
  try {
    return await retrying(policy, (n) => {
      waiting = false;
      return attempt(n);
    }, {
      signal,
      onRetry: ({ attempt: n, error, delayMs }) => {
        onRetry({ attempt: n, code: error.code, message: error.message, delayMs });
        waiting = true;
      },
    });
  } catch (error) {
    // Stopped between attempts: the completion was cancelled, whatever the last attempt said.
    if (waiting && signal.aborted) throw cancelled();
    throw TackError.from(error);
  }
}
