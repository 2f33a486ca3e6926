import { TackError } from "@tack/bus";
import type { RetryNotice } from "@tack/proto";
import { describe, expect, it } from "vitest";
import { compileRetryPolicy, retryDelay, withRetries } from "../src/retry.js";

const serverError = new TackError("llm.server_error", "DeepSeek failed (HTTP 500); retry later", { retryable: true });

describe("retry", () => {
  it("retry - backs off from 500 ms, doubling up to 10 s, with equal jitter", () => {
    const low = compileRetryPolicy({ random: () => 0 });
    const high = compileRetryPolicy({ random: () => 0.999999 });
    expect([1, 2, 3, 4, 5, 6, 7].map((attempt) => retryDelay(low, attempt, serverError))).toEqual([250, 500, 1000, 2000, 4000, 5000, 5000]);
    expect([1, 2, 3, 4, 5, 6, 7].map((attempt) => retryDelay(high, attempt, serverError))).toEqual([500, 1000, 2000, 4000, 8000, 10000, 10000]);
  });

  it("retry - honours retry-after in seconds or as a date, capped at the longest wait", () => {
    const policy = compileRetryPolicy({ random: () => 0 });
    const limited = (retryAfter: string) => new TackError("llm.rate_limited", "slow down", { retryable: true, details: { retry_after: retryAfter } });
    expect(retryDelay(policy, 1, limited("3"))).toBe(3000);
    expect(retryDelay(policy, 1, limited("0.25"))).toBe(250);
    expect(retryDelay(policy, 1, limited("120"))).toBe(10_000);
    expect(retryDelay(compileRetryPolicy({ maxDelayMs: 20 }), 1, limited("7"))).toBe(20);
    const inTwoSeconds = new Date(Date.now() + 2000).toUTCString();
    expect(retryDelay(policy, 1, limited(inTwoSeconds))).toBeGreaterThan(500);
    expect(retryDelay(policy, 1, limited(inTwoSeconds))).toBeLessThanOrEqual(2000);
    expect(retryDelay(policy, 1, limited("soon"))).toBe(250);
  });

  it("retry - retries retryable failures, reporting each, and stops at the first success", async () => {
    const notices: RetryNotice[] = [];
    let calls = 0;
    const result = await withRetries(compileRetryPolicy({ baseDelayMs: 1, random: () => 0 }), async (n) => {
      calls++;
      if (n < 3) throw serverError;
      return "ok";
    }, (notice) => notices.push(notice), new AbortController().signal);
    expect(result).toBe("ok");
    expect(calls).toBe(3);
    expect(notices).toEqual([
      { attempt: 1, code: "llm.server_error", message: serverError.message, delayMs: 1 },
      { attempt: 2, code: "llm.server_error", message: serverError.message, delayMs: 1 },
    ]);
  });

  it("retry - gives up after the last attempt, at once on a non-retryable error, and when cancelled", async () => {
    const policy = compileRetryPolicy({ baseDelayMs: 1, maxAttempts: 5 });
    let calls = 0;
    const signal = new AbortController().signal;
    await expect(withRetries(policy, async () => { calls++; throw serverError; }, () => undefined, signal)).rejects.toBe(serverError);
    expect(calls).toBe(5);
    calls = 0;
    const auth = new TackError("llm.auth", "bad key");
    await expect(withRetries(policy, async () => { calls++; throw auth; }, () => undefined, signal)).rejects.toBe(auth);
    expect(calls).toBe(1);
    const stopping = new AbortController();
    const pending = withRetries(compileRetryPolicy({ baseDelayMs: 60_000 }), async () => { throw serverError; }, () => stopping.abort(), stopping.signal);
    await expect(pending).rejects.toMatchObject({ code: "llm.cancelled" });
  });

  it("retry - bad options are refused by name", () => {
    expect(() => compileRetryPolicy({ maxAttempts: 0 })).toThrow(/retry.maxAttempts is 0/);
    expect(() => compileRetryPolicy({ baseDelayMs: 1.5 })).toThrow(/retry.baseDelayMs/);
  });
});
