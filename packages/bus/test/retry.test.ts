import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { retryAfterMs, retryDelay, retrying, retryPolicy, TackError, type RetryNote } from "../src/index.js";

const flaky = new TackError("test.flaky", "failed for now; retry", { retryable: true });
const fatal = new TackError("test.fatal", "failed for good");
const limited = (retryAfter: string) => new TackError("test.rate_limited", "slow down", { retryable: true, details: { retry_after: retryAfter } });

beforeEach(() => {
  vi.useFakeTimers({ now: new Date("2030-01-01T00:00:00Z") });
});
afterEach(() => {
  vi.useRealTimers();
});

/** An operation that fails with `errors` in turn, then returns "ok"; it records when each attempt started. */
function failing(...errors: unknown[]) {
  const starts: number[] = [];
  const attempt = async (n: number) => {
    starts.push(Date.now());
    expect(n).toBe(starts.length);
    if (n <= errors.length) throw errors[n - 1];
    return "ok";
  };
  return { attempt, starts };
}

describe("retry", () => {
  it("retry - backoff doubles from baseDelayMs with equal jitter and is capped at maxDelayMs", () => {
    const low = retryPolicy({ baseDelayMs: 100, maxDelayMs: 1000, random: () => 0 });
    const high = retryPolicy({ baseDelayMs: 100, maxDelayMs: 1000, random: () => 0.999999 });
    expect([1, 2, 3, 4, 5, 6].map((n) => retryDelay(low, n))).toEqual([50, 100, 200, 400, 500, 500]);
    expect([1, 2, 3, 4, 5, 6].map((n) => retryDelay(high, n))).toEqual([100, 200, 400, 800, 1000, 1000]);
    // A very late attempt stays at the cap (no overflow to Infinity or NaN).
    expect(retryDelay(high, 5000)).toBe(1000);
    expect(retryDelay(retryPolicy({ random: () => 0.5 }), 1)).toBe(188);
  });

  it("retry - a retry_after detail (seconds or HTTP date) replaces the backoff, capped at maxDelayMs", () => {
    const policy = retryPolicy({ baseDelayMs: 100, maxDelayMs: 5000, random: () => 0 });
    expect(retryDelay(policy, 1, limited("2"))).toBe(2000);
    expect(retryDelay(policy, 4, limited("0.25"))).toBe(250);
    expect(retryDelay(policy, 1, limited("60"))).toBe(5000);
    expect(retryDelay(policy, 1, limited(new Date(Date.now() + 3000).toUTCString()))).toBe(3000);
    expect(retryDelay(policy, 1, limited("Wed, 21 Oct 2015 07:28:00 GMT"))).toBe(0);
    // Unreadable values fall back to the backoff.
    for (const value of ["soon", " ", "-1", "0x10", "1e3"]) expect(retryDelay(policy, 3, limited(value)), value).toBe(200);
  });

  it("retry - retryAfterMs reads plain seconds and HTTP dates only", () => {
    expect(retryAfterMs(undefined)).toBeUndefined();
    expect(retryAfterMs("")).toBeUndefined();
    expect(retryAfterMs("  ")).toBeUndefined();
    expect(retryAfterMs(" 3 ")).toBe(3000);
    expect(retryAfterMs("1.5")).toBe(1500);
    expect(retryAfterMs("-1")).toBeUndefined();
    expect(retryAfterMs("0x10")).toBeUndefined();
    expect(retryAfterMs(new Date(Date.now() + 10_000).toUTCString())).toBe(10_000);
  });

  it("retry - retries retryable failures after each delay, telling onRetry first, until one succeeds", async () => {
    const policy = retryPolicy({ baseDelayMs: 100, maxDelayMs: 1000, random: () => 0 });
    const { attempt, starts } = failing(flaky, limited("0.7"), flaky);
    const notes: RetryNote[] = [];
    const result = retrying(policy, attempt, { onRetry: (note) => void notes.push(note) });
    await vi.advanceTimersByTimeAsync(49);
    expect(starts).toHaveLength(1); // still waiting out the first 50 ms
    await vi.advanceTimersByTimeAsync(5000);
    await expect(result).resolves.toBe("ok");
    const t0 = starts[0]!;
    expect(starts.map((t) => t - t0)).toEqual([0, 50, 750, 950]);
    expect(notes.map(({ attempt: n, error, delayMs }) => [n, error.code, delayMs])).toEqual([[1, "test.flaky", 50], [2, "test.rate_limited", 700], [3, "test.flaky", 200]]);
  });

  it("retry - gives up after maxAttempts with the last error", async () => {
    const { attempt, starts } = failing(flaky, flaky, flaky, flaky);
    const result = retrying(retryPolicy({ maxAttempts: 3, baseDelayMs: 10 }), attempt);
    const settled = expect(result).rejects.toBe(flaky);
    await vi.runAllTimersAsync();
    await settled;
    expect(starts).toHaveLength(3);
  });

  it("retry - a non-retryable error is thrown at once, without a wait or a note", async () => {
    const onRetry = vi.fn();
    const { attempt, starts } = failing(fatal);
    await expect(retrying(retryPolicy({ maxAttempts: 10 }), attempt, { onRetry })).rejects.toBe(fatal);
    expect(starts).toHaveLength(1);
    expect(onRetry).not.toHaveBeenCalled();
    // Anything that is not a TackError is not retryable either; it comes back wrapped as `internal`.
    const plain = failing(new Error("socket closed"));
    await expect(retrying(retryPolicy(), plain.attempt)).rejects.toMatchObject({ code: "internal", message: "socket closed", retryable: false });
    expect(plain.starts).toHaveLength(1);
    // The caller may say what is retryable.
    const conflict = new TackError("test.conflict", "someone else wrote first");
    const chosen = failing(conflict, conflict);
    const result = retrying(retryPolicy({ baseDelayMs: 1 }), chosen.attempt, { retryable: (e) => e.code === "test.conflict" });
    await vi.runAllTimersAsync();
    await expect(result).resolves.toBe("ok");
    expect(chosen.starts).toHaveLength(3);
  });

  it("retry - a window stops retrying once the next wait would end past it", async () => {
    // Waits of 200, 400, 800 ms: after the third failure (600 ms in) the next wait would end at 1400 ms.
    const { attempt, starts } = failing(flaky, flaky, flaky, flaky, flaky, flaky);
    const result = retrying(retryPolicy({ windowMs: 1000, baseDelayMs: 400, maxDelayMs: 10_000, random: () => 0 }), attempt);
    const settled = expect(result).rejects.toBe(flaky);
    await vi.runAllTimersAsync();
    await settled;
    const t0 = starts[0]!;
    expect(starts.map((t) => t - t0)).toEqual([0, 200, 600]);
  });

  it("retry - an abort during the wait ends it at once with the last error, and no attempt follows", async () => {
    const controller = new AbortController();
    const { attempt, starts } = failing(flaky, flaky);
    const result = retrying(retryPolicy({ baseDelayMs: 60_000, random: () => 0 }), attempt, { signal: controller.signal });
    const settled = expect(result).rejects.toBe(flaky);
    await vi.advanceTimersByTimeAsync(1000);
    controller.abort();
    await settled;
    expect(starts).toHaveLength(1);
    expect(vi.getTimerCount()).toBe(0);
    // Already aborted when an attempt fails: no wait at all.
    const late = failing(flaky);
    await expect(retrying(retryPolicy(), late.attempt, { signal: AbortSignal.abort() })).rejects.toBe(flaky);
    expect(late.starts).toHaveLength(1);
  });

  it("retry - bad options are refused by name, with the caller's code", () => {
    expect(() => retryPolicy({ maxAttempts: 0 })).toThrow(/retry\.maxAttempts is 0; it must be an integer of at least 1/);
    expect(() => retryPolicy({ baseDelayMs: 1.5 })).toThrow(/retry\.baseDelayMs/);
    expect(() => retryPolicy({ maxDelayMs: -1 })).toThrow(/retry\.maxDelayMs/);
    expect(() => retryPolicy({ windowMs: Number.NaN })).toThrow(/retry\.windowMs/);
    expect(() => retryPolicy({ maxAttempts: 0 }, "llm.bad_options")).toThrow(expect.objectContaining({ code: "llm.bad_options", details: { option: "retry.maxAttempts" } }));
    expect(retryPolicy()).toMatchObject({ maxAttempts: 5, windowMs: Number.POSITIVE_INFINITY, baseDelayMs: 250, maxDelayMs: 5000 });
    expect(retryPolicy({ windowMs: 1000 }).maxAttempts).toBe(Number.MAX_SAFE_INTEGER);
  });
});
