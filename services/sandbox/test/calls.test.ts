import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSandboxService } from "../src/index.js";
import { Harness, rejection } from "./helpers.js";

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";

// Keyed execs: what a retried tool call relies on so that a command never runs twice.
describe("sandbox exec memory", () => {
  let h: Harness;
  beforeAll(async () => {
    h = await Harness.start();
    await h.ensure({ sessionId: "m1", workspace: await h.workspace() });
  });
  afterAll(async () => {
    await h.cleanup();
  });

  const lines = async (file: string) => (await h.exec("m1", ["bash", "-c", `wc -l < ${file}`])).stdout.trim();

  it("exec memory - a repeated exec key returns the first run's result (replayed) and does not run the command again", async () => {
    const key = { execKey: "call_a#1", attempt: 1, firstAttemptAtMs: Date.now() };
    const first = await h.exec("m1", ["bash", "-c", "echo ran >> /workspace/a.log; date +%s%N"], key);
    expect(first).toMatchObject({ exitCode: 0, replayed: false });
    const again = await h.exec("m1", ["bash", "-c", "echo ran >> /workspace/a.log; date +%s%N"], { ...key, attempt: 2 });
    expect(again).toMatchObject({ exitCode: 0, replayed: true, stdout: first.stdout });
    expect(await lines("/workspace/a.log")).toBe("1");
    // Another key of the same call (its next exec) does run.
    await h.exec("m1", ["bash", "-c", "echo ran >> /workspace/a.log"], { ...key, execKey: "call_a#2", attempt: 2 });
    expect(await lines("/workspace/a.log")).toBe("2");
  });

  it("exec memory - a retry that arrives while the first run still runs waits for that run instead of starting another", async () => {
    const key = { execKey: "call_b#1", attempt: 1, firstAttemptAtMs: Date.now() };
    const command = ["bash", "-c", "sleep 1; echo ran >> /workspace/b.log; echo done"];
    const [first, retry] = await Promise.all([h.exec("m1", command, key), h.exec("m1", command, { ...key, attempt: 2 })]);
    expect(first).toMatchObject({ stdout: "done\n", replayed: false });
    expect(retry).toMatchObject({ stdout: "done\n", replayed: true });
    expect(await lines("/workspace/b.log")).toBe("1");
  });

  it("exec memory - after a restart of the sandbox service, a retry of a call sent before it with an unknown key is refused as fate unknown", async () => {
    const firstAttemptAtMs = Date.now();
    // The process that held the container dies (a stop keeps the containers); its memory goes with it.
    await h.service.stop();
    h.service = await startSandboxService({ natsUrl: NATS_URL, namespace: h.namespace, poolSize: 0 });
    const error = await rejection(h.exec("m1", ["bash", "-c", "echo ran >> /workspace/c.log"], { execKey: "call_c#1", attempt: 2, firstAttemptAtMs }));
    expect(error).toMatchObject({ code: "sandbox.call_fate_unknown", retryable: false });
    expect(error.message).toContain("call_c#1");
    expect((await h.exec("m1", ["bash", "-c", "test -e /workspace/c.log; echo $?"])).stdout.trim()).toBe("1");
    // A call first sent after the restart runs normally.
    expect(await h.exec("m1", ["bash", "-c", "echo fine"], { execKey: "call_e#1", attempt: 2, firstAttemptAtMs: Date.now() })).toMatchObject({ stdout: "fine\n", replayed: false });
  });

  it("exec memory - a retry whose first attempt never reached the sandbox runs (the key is new and this process started the container)", async () => {
    const result = await h.exec("m1", ["bash", "-c", "echo ran >> /workspace/d.log; echo ok"], { execKey: "call_d#1", attempt: 2, firstAttemptAtMs: Date.now() });
    expect(result).toMatchObject({ stdout: "ok\n", replayed: false });
    expect(await lines("/workspace/d.log")).toBe("1");
  });
});
