import { TackError } from "@tack/bus";
import { ExecRequest, ExecResponse, type EnsureSandboxRequest } from "@tack/proto";
import { describe, expect, it } from "vitest";
import { CallSandbox, sandboxRetryPolicy, type SandboxClient } from "../src/sandbox.js";

/** A sandbox whose first `failures` execs fail as if the replica running them died; it records every exec it is sent. */
function dyingSandbox(failures: number): SandboxClient & { sent: ExecRequest[] } {
  const sent: ExecRequest[] = [];
  return {
    sent,
    ensure: async (_request: EnsureSandboxRequest) => undefined,
    exec: async (request) => {
      sent.push(request);
      if (sent.length <= failures) throw new TackError("bus.worker_lost", "the service handling sandbox.exec stopped answering", { retryable: true });
      return ExecResponse.fromPartial({ stdout: Buffer.from("ok\n"), exitCode: 0 });
    },
    spawn: async () => {
      throw new TackError("sandbox.not_found", "no container in this test");
    },
  };
}

describe("call sandbox", () => {
  it("call sandbox - an exec re-sent after its sandbox replica died goes as a retry (attempt > 1), keyed like the first send", async () => {
    // Chaos test finding: re-sent with the call's attempt 1, the exec ran a second time in the container that replaced the dead replica's.
    const inner = dyingSandbox(2);
    const call = new CallSandbox(inner, { callId: "call_0_0", attempt: 1, firstAttemptAtMs: 1_000 }, sandboxRetryPolicy(10_000), new AbortController().signal);
    const response = await call.exec(ExecRequest.fromPartial({ sessionId: "s1", argv: ["true"] }), new AbortController().signal);
    expect(response.exitCode).toBe(0);
    expect(inner.sent.map((r) => [r.execKey, r.attempt, Number(r.firstAttemptAtMs)])).toEqual([
      ["call_0_0#1", 1, 1_000],
      ["call_0_0#1", 2, 1_000],
      ["call_0_0#1", 3, 1_000],
    ]);
    expect(call.retries.map((r) => r.code)).toEqual(["bus.worker_lost", "bus.worker_lost"]);
  });

  it("call sandbox - on the loop's second attempt, re-sends count on from it", async () => {
    const inner = dyingSandbox(1);
    const call = new CallSandbox(inner, { callId: "call_1_0", attempt: 2, firstAttemptAtMs: 5 }, sandboxRetryPolicy(10_000), new AbortController().signal);
    await call.exec(ExecRequest.fromPartial({ sessionId: "s1", argv: ["true"] }), new AbortController().signal);
    expect(inner.sent.map((r) => r.attempt)).toEqual([2, 3]);
  });
});
