// Long-lived processes whose stdio travels over NATS (sandbox.stdio.open, decision 0016).
import { randomBytes } from "node:crypto";
import type { Subscription } from "@nats-io/nats-core";
import { SandboxRpc } from "@tack/bus";
import { OpenStdioRequest, type OpenStdioResponse, StdioFrame } from "@tack/proto";
import { waitFor } from "@tack/testkit";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stdioSubjects } from "../src/stdio.js";
import { Harness, rejection } from "./helpers.js";

/** One stream as a test drives it: frames sent in order, output collected. */
class TestStream {
  readonly frames: StdioFrame[] = [];
  #seq = 1;
  constructor(readonly h: Harness, readonly id: string, readonly subscription: Subscription) {}

  static async open(h: Harness, sessionId: string, argv: string[], extra: Partial<OpenStdioRequest> = {}): Promise<[TestStream, OpenStdioResponse]> {
    const id = randomBytes(16).toString("hex");
    const subscription = h.bus.nc.subscribe(stdioSubjects(h.namespace, id).output);
    const stream = new TestStream(h, id, subscription);
    void (async () => {
      for await (const message of subscription) stream.frames.push(StdioFrame.decode(message.data));
    })();
    try {
      const response = await h.bus.request(SandboxRpc.OpenStdio, OpenStdioRequest.fromPartial({ sessionId, argv, streamId: id, ...extra }), { timeoutMs: 30_000 });
      return [stream, response];
    } catch (error) {
      subscription.unsubscribe();
      throw error;
    }
  }

  send(frame: Partial<StdioFrame>, seq = this.#seq++): void {
    this.h.bus.nc.publish(stdioSubjects(this.h.namespace, this.id).input, StdioFrame.encode(StdioFrame.fromPartial({ ...frame, seq })).finish());
  }

  text(fd = 1): string {
    return Buffer.concat(this.frames.filter((f) => f.fd === fd).map((f) => Buffer.from(f.data))).toString();
  }

  async ping(): Promise<boolean> {
    try {
      await this.h.bus.nc.request(stdioSubjects(this.h.namespace, this.id).input, StdioFrame.encode(StdioFrame.fromPartial({})).finish(), { timeout: 2_000 });
      return true;
    } catch {
      return false;
    }
  }

  exited(): Promise<StdioFrame> {
    return waitFor("the exit frame", () => this.frames.find((f) => f.exited));
  }
}

describe("sandbox stdio streams", () => {
  let h: Harness;
  beforeAll(async () => {
    h = await Harness.start();
    await h.ensure({ sessionId: "s1", workspace: await h.workspace() });
  });
  afterAll(async () => {
    await h.cleanup();
  });

  it("stdio - streams stdin to a long-lived process and its stdout and stderr back, in numbered frames", async () => {
    const [stream, opened] = await TestStream.open(h, "s1", ["bash", "-c", "echo started >&2; while read line; do echo \"got $line\"; done; echo bye"]);
    expect(opened.pid).toBeGreaterThan(1);
    stream.send({ data: Buffer.from("one\n") });
    await waitFor("the first answer", () => stream.text().includes("got one\n"));
    stream.send({ data: Buffer.from("two\n") });
    stream.send({ eof: true });
    const exit = await stream.exited();
    expect(exit).toMatchObject({ exitCode: 0, reason: "" });
    expect(stream.text()).toBe("got one\ngot two\nbye\n");
    expect(stream.text(2)).toBe("started\n");
    expect(stream.frames.map((f) => Number(f.seq))).toEqual(stream.frames.map((_, i) => i + 1));
    expect(await stream.ping()).toBe(false);
  });

  it("stdio - gives the process the container's PATH, HOME and LANG plus its env, and answers pings", async () => {
    const [stream] = await TestStream.open(h, "s1", ["bash", "-c", "env | sort; cat"], { env: { MINE: "yes" } });
    expect(await stream.ping()).toBe(true);
    await waitFor("the environment", () => stream.text().includes("MINE=yes"));
    const names = stream.text().trim().split("\n").map((line) => line.split("=")[0]).filter((name) => !["PWD", "SHLVL", "_"].includes(name!));
    expect(names.sort()).toEqual(["HOME", "LANG", "MINE", "PATH"]);
    stream.send({ kill: true });
    expect(await stream.exited()).toMatchObject({ exitCode: 137, reason: "closed by its caller" });
  });

  it("stdio - a missing input frame ends the stream and says so", async () => {
    const [stream] = await TestStream.open(h, "s1", ["cat"]);
    stream.send({ data: Buffer.from("a") }, 1);
    stream.send({ data: Buffer.from("c") }, 3);
    const exit = await stream.exited();
    expect(exit.reason).toContain("input frame 2 of stream");
  });

  it("stdio - a process killed inside the container ends its stream with its signal", async () => {
    const [stream, opened] = await TestStream.open(h, "s1", ["sleep", "300"]);
    await h.exec("s1", ["kill", "-9", String(opened.pid)]);
    expect(await stream.exited()).toMatchObject({ exitCode: 137, reason: "" });
  });

  it("stdio - a command that cannot start, a bad stream id and an unknown session are refused", async () => {
    const missing = await rejection(TestStream.open(h, "s1", ["no-such-server"]));
    expect(missing).toMatchObject({ code: "sandbox.spawn_failed" });
    expect(missing.message).toContain("no-such-server: command not found");
    const badId = await rejection(h.bus.request(SandboxRpc.OpenStdio, OpenStdioRequest.fromPartial({ sessionId: "s1", argv: ["cat"], streamId: "x" })));
    expect(badId).toMatchObject({ code: "sandbox.bad_request" });
    expect(await rejection(TestStream.open(h, "nobody", ["cat"]))).toMatchObject({ code: "sandbox.not_found" });
  });

  it("stdio - releasing the sandbox ends its streams with the reason", async () => {
    await h.ensure({ sessionId: "s2", workspace: await h.workspace() });
    const [stream] = await TestStream.open(h, "s2", ["cat"]);
    await h.release("s2");
    const exit = await stream.exited();
    expect(exit.exitCode).toBe(-1);
    expect(exit.reason).toContain("exec agent stopped");
  });
});
