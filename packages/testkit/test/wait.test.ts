import { describe, expect, it } from "vitest";
import { stopWaiting, waitFor } from "@tack/testkit";

describe("waitFor", () => {
  it("wait - returns the first answer that is not undefined, null or false, asking again meanwhile", async () => {
    const answers = [undefined, null, false, 0, 5];
    let asked = 0;
    // 0 is a value: only undefined, null and false mean "not yet".
    expect(await waitFor("a value", () => answers[asked++], { intervalMs: 1 })).toBe(0);
    expect(asked).toBe(4);
  });

  it("wait - a probe that throws counts as not yet", async () => {
    let asked = 0;
    const value = await waitFor("the server to start", async () => {
      if (++asked < 3) throw new Error("connection refused");
      return { ready: true };
    }, { intervalMs: 1 });
    expect(value).toEqual({ ready: true });
    expect(asked).toBe(3);
  });

  it("wait - on timeout fails with testkit.timeout naming what it waited for and the last answer", async () => {
    const started = Date.now();
    await expect(waitFor("the turn to end", () => false, { timeoutMs: 50, intervalMs: 10 })).rejects.toMatchObject({
      code: "testkit.timeout",
      message: expect.stringMatching(/^timed out after 50 ms \(\d+ probes\) waiting for the turn to end; the last probe answered false$/),
    });
    expect(Date.now() - started).toBeGreaterThanOrEqual(50);
    await expect(waitFor("the log", async () => { throw new Error("no turn/end yet: turn/start, step/start"); }, { timeoutMs: 30, intervalMs: 5 })).rejects.toMatchObject({
      code: "testkit.timeout",
      message: expect.stringContaining("waiting for the log; the last probe failed: Error: no turn/end yet: turn/start, step/start"),
      cause: expect.objectContaining({ message: "no turn/end yet: turn/start, step/start" }),
    });
  });

  it("wait - stopWaiting in a probe fails the wait at once with its reason", async () => {
    let asked = 0;
    const started = Date.now();
    const failed = await waitFor("a process to be ready", () => {
      if (++asked === 2) stopWaiting(new Error("the process exited with code 1"));
      return false;
    }, { timeoutMs: 10_000, intervalMs: 1 }).catch((error: unknown) => error);
    expect(failed).toEqual(new Error("the process exited with code 1"));
    expect(asked).toBe(2);
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it("wait - refuses a timeout or interval that makes no sense", async () => {
    await expect(waitFor("x", () => true, { timeoutMs: 0 })).rejects.toMatchObject({ code: "testkit.bad_wait", message: expect.stringContaining("timeoutMs is 0") });
    await expect(waitFor("x", () => true, { intervalMs: -1 })).rejects.toMatchObject({ code: "testkit.bad_wait", message: expect.stringContaining("intervalMs is -1") });
  });
});
