import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MAX_OUTPUT_BYTES } from "../src/index.js";
import { Harness, rejection } from "./helpers.js";

describe("sandbox exec", () => {
  let h: Harness;
  beforeAll(async () => {
    h = await Harness.start();
    await h.ensure({ sessionId: "s1", workspace: await h.workspace() });
  });
  afterAll(async () => {
    await h.cleanup();
  });

  it("exec - returns stdout, stderr and the exit code separately", async () => {
    const result = await h.exec("s1", ["bash", "-c", "echo to-out; echo to-err >&2; exit 7"]);
    expect(result).toMatchObject({ exitCode: 7, stdout: "to-out\n", stderr: "to-err\n", timedOut: false, truncated: false });
    expect(result.durationMs).toBeGreaterThan(0);
  });

  it("exec - writes stdin to the command and then closes it", async () => {
    const result = await h.exec("s1", ["bash", "-c", "cat; echo '<eof>'"], { stdin: "line one\nline two\n" });
    expect(result).toMatchObject({ exitCode: 0, stdout: "line one\nline two\n<eof>\n" });
    // Without stdin the command still sees end of input instead of hanging.
    expect((await h.exec("s1", ["wc", "-c"])).stdout.trim()).toBe("0");
  });

  it("exec - runs argv without a shell, in /workspace unless cwd says otherwise", async () => {
    expect((await h.exec("s1", ["echo", "$HOME", "a b"])).stdout).toBe("$HOME a b\n");
    expect((await h.exec("s1", ["pwd"])).stdout).toBe("/workspace\n");
    expect((await h.exec("s1", ["pwd"], { cwd: "/tmp" })).stdout).toBe("/tmp\n");
  });

  it("exec - a missing command reports exit code 127", async () => {
    const result = await h.exec("s1", ["no-such-command"]);
    expect(result.exitCode).toBe(127);
    expect(result.stderr).toContain("no-such-command");
  });

  it("exec - the timeout kills the command and its children and reports timed_out", async () => {
    const result = await h.exec("s1", ["bash", "-c", "sleep 300 & sleep 301; echo never"], { timeoutMs: 1000 });
    expect(result).toMatchObject({ timedOut: true, stdout: "" });
    expect(result.durationMs).toBeLessThan(10_000);
    const left = await h.exec("s1", ["ps", "-eo", "args"]);
    expect(left.stdout).not.toMatch(/sleep 30[01]/);
  });

  it("exec - at the timeout the whole process group gets SIGKILL, whatever it traps (137)", async () => {
    const result = await h.exec("s1", ["bash", "-c", "trap '' TERM; sleep 300"], { timeoutMs: 500 });
    expect(result).toMatchObject({ timedOut: true, exitCode: 137 });
  });

  it("exec - a command exiting 124 by itself has not timed out", async () => {
    expect(await h.exec("s1", ["bash", "-c", "exit 124"])).toMatchObject({ exitCode: 124, timedOut: false });
  });

  it("exec - stdout and stderr are each cut at max_output_bytes", async () => {
    const result = await h.exec("s1", ["bash", "-c", "head -c 5000 /dev/zero | tr '\\0' o; head -c 300 /dev/zero | tr '\\0' e >&2"], { maxOutputBytes: 1000 });
    expect(result).toMatchObject({ exitCode: 0, truncated: true, stdout: "o".repeat(1000), stderr: "e".repeat(300) });
    expect((await h.exec("s1", ["printf", "abc"], { maxOutputBytes: 3 })).truncated).toBe(false);
  });

  it("exec - output is held to what fits in one bus reply", async () => {
    const result = await h.exec("s1", ["bash", "-c", "head -c 2000000 /dev/zero; head -c 2000000 /dev/zero >&2"], { maxOutputBytes: 2_000_000 });
    expect(result.truncated).toBe(true);
    expect(result.stdout.length).toBe(MAX_OUTPUT_BYTES);
    expect(result.stderr.length).toBe(MAX_OUTPUT_BYTES);
  });

  it("exec - large stdin reaches a command that reads it slowly", async () => {
    const input = "x".repeat(600_000);
    const result = await h.exec("s1", ["bash", "-c", "sleep 0.3; wc -c"], { stdin: input });
    expect(result.stdout.trim()).toBe("600000");
    // A command that never reads its input still finishes.
    expect((await h.exec("s1", ["true"], { stdin: input })).exitCode).toBe(0);
  });

  it("exec - several commands run at once in one sandbox", async () => {
    const startedAt = performance.now();
    const results = await Promise.all([1, 2, 3, 4].map((i) => h.exec("s1", ["bash", "-c", `sleep 1; echo ${i}`])));
    expect(results.map((result) => result.stdout)).toEqual(["1\n", "2\n", "3\n", "4\n"]);
    expect(performance.now() - startedAt).toBeLessThan(3500);
  });

  it("exec - a working directory that does not exist fails with exit code 126 and says so", async () => {
    const result = await h.exec("s1", ["true"], { cwd: "/workspace/missing" });
    expect(result.exitCode).toBe(126);
    expect(result.stderr).toContain("cannot use working directory /workspace/missing");
  });

  it("exec - a command whose background child keeps the output open still returns", async () => {
    const result = await h.exec("s1", ["bash", "-c", "sleep 30 & echo started"], { timeoutMs: 20_000 });
    expect(result).toMatchObject({ exitCode: 0, stdout: "started\n", timedOut: false });
    expect(result.durationMs).toBeLessThan(5000);
  });

  it("exec - bad requests are refused with sandbox.bad_request", async () => {
    expect((await rejection(h.exec("s1", []))).code).toBe("sandbox.bad_request");
    expect((await rejection(h.exec("s1", ["true"], { timeoutMs: 600_001 }))).code).toBe("sandbox.bad_request");
    expect((await rejection(h.exec("s1", ["true"], { cwd: "relative" }))).code).toBe("sandbox.bad_request");
  });
});
