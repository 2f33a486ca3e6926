import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { Bus, discoverMicro, LlmRpc, LoopRpc, SandboxRpc, TackError } from "@tack/bus";
import { ensureLogStream, readAll } from "@tack/log";
import { CreateSessionRequest, Delta_Kind, Role, type Event, type ToolCall } from "@tack/proto";
import { removeNamespace, waitFor } from "@tack/testkit";
import { startSandboxService, type SandboxService } from "@tack/sandbox-service";
import { startLoopService, type LoopService } from "@tack/loop-service";

// Durable dispatch against the real tools service (as processes that are SIGKILLed), the real
// sandbox service and Docker, and the real loop; only the model is a scripted responder.
const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const REPO = fileURLToPath(new URL("../../../", import.meta.url));
const namespace = `t${randomBytes(5).toString("hex")}`;
const workspace = mkdtempSync(join(tmpdir(), "tack-durable-"));
let bus: Bus;
let sandbox: SandboxService;
let loop: LoopService;
let llm: Bus | undefined;
const workers = new Set<ChildProcess>();

type Reply = { content?: string; calls?: Array<{ name: string; args: object }> };
let script: Reply[] = [];

async function startLlm(): Promise<Bus> {
  const b = await Bus.connect({ url: NATS_URL, namespace, name: "durable-llm" });
  b.serve(LlmRpc.Complete, async (req, w) => {
    const n = req.messages.filter((m) => m.role === Role.ROLE_ASSISTANT).length;
    const reply = script[n] ?? { content: "done" };
    const toolCalls: ToolCall[] = (reply.calls ?? []).map((c, i) => ({ id: `call_${n}_${i}`, name: c.name, arguments: JSON.stringify(c.args) }));
    w.send({ index: 0, body: { $case: "done", value: { content: reply.content ?? "", reasoningContent: "", toolCalls, finishReason: toolCalls.length ? "tool_calls" : "stop", usage: { inputMissTokens: 10, inputHitTokens: 0, outputTokens: 2, reasoningTokens: 0 }, model: "scripted", costUsd: 0, priceWindow: "" } } });
  });
  b.serve(LlmRpc.EstimateCost, async () => ({ costUsd: 0, priceWindow: "standard" }));
  b.serve(LlmRpc.CheckModel, async (req) => {
    if (!req.model.startsWith("scripted:")) throw new TackError("llm.unknown_model", `unknown model ${req.model}`);
    return { provider: "scripted" };
  });
  await b.nc.flush();
  return b;
}

/** A tools service as its own process, resolved once it answers tools.list. */
async function startWorker(): Promise<ChildProcess> {
  const child = spawn(process.execPath, ["--import", "tsx", "services/tools/src/main.ts"], {
    cwd: REPO, env: { ...process.env, NATS_URL, TACK_NAMESPACE: namespace }, stdio: ["ignore", "ignore", "inherit"],
  });
  workers.add(child);
  child.once("exit", () => workers.delete(child));
  // Ready once this very process answers micro-service discovery (it registers after it serves).
  await waitFor(`tools worker pid ${child.pid} to answer $SRV.PING`, async () =>
    (await discoverMicro(bus, { service: "tools", waitMs: 300 })).some((found) => found.instance.pid === child.pid), { timeoutMs: 30_000 });
  return child;
}

function kill(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once("exit", () => resolve());
    child.kill("SIGKILL");
  });
}

beforeAll(async () => {
  bus = await Bus.connect({ url: NATS_URL, namespace, name: "durable-test" });
  await ensureLogStream(bus.nc, bus.names);
  sandbox = await startSandboxService({ natsUrl: NATS_URL, namespace, poolSize: 0 });
  loop = await startLoopService({ natsUrl: NATS_URL, namespace, leaseTtlMs: 2_000, retryWindowMs: 30_000 });
});

afterEach(async () => {
  await Promise.all([...workers].map(kill));
  await llm?.close();
  llm = undefined;
});

afterAll(async () => {
  await loop.stop();
  await sandbox.stop({ removeContainers: true });
  await removeNamespace(bus.nc, namespace);
  await bus.close();
  rmSync(workspace, { recursive: true, force: true });
}, 60_000);

async function create(): Promise<string> {
  const r = await bus.request(LoopRpc.CreateSession, CreateSessionRequest.fromPartial({ tenant: "local", model: "scripted:test", workspace }));
  return r.sessionId;
}

const submit = (sessionId: string, text: string) => bus.request(LoopRpc.SubmitMessage, { tenant: "local", sessionId, text });
const events = (sessionId: string) => readAll(bus.nc, bus.names, { tenant: "local", sessionId });
const ofType = (list: Event[], type: string) => list.filter((e) => e.type === type);
const turnEnded = (sessionId: string) => waitFor("turn/end", async () => {
  const list = await events(sessionId);
  return ofType(list, "turn/end").length > 0 && list;
}, { timeoutMs: 60_000, intervalMs: 50 });

describe("durable dispatch", () => {
  it("durable - a tools worker SIGKILLed mid-call: another worker completes the call within seconds, and the command ran once", async () => {
    llm = await startLlm();
    const first = await startWorker();
    const id = await create();
    // Long enough to be still running once a second worker is up (a process start takes seconds here).
    const command = "sleep 6; echo ran >> /workspace/once.log; wc -l < /workspace/once.log";
    script = [{ calls: [{ name: "bash", args: { command } }] }, { content: "Done." }];
    await submit(id, "run it");
    await waitFor("tool/call", async () => ofType(await events(id), "tool/call").length > 0, { intervalMs: 20 });
    // A second replica is up; then the one running the command (the only one there was) dies.
    await startWorker();
    await kill(first);
    const killedAt = Date.now();
    const list = await turnEnded(id);
    const result = ofType(list, "tool/result")[0]!;
    const at = (e: Event) => Number(e.time!.seconds) * 1000 + e.time!.nanos / 1e6;
    expect(result.payload?.$case === "toolResult" && result.payload.value).toMatchObject({ isError: false, content: expect.stringMatching(/^1\nexit code: 0$/) });
    // Detected by silence, sent again, answered from the sandbox's record of the first run.
    const retries = ofType(list, "tool/retry").map((e) => e.payload?.$case === "toolRetry" && e.payload.value);
    expect(retries[0]).toMatchObject({ callId: "call_0_0", attempt: 1, hop: "tools", code: "bus.worker_lost" });
    // The death is noticed by silence (at most 5 s after the last heartbeat) and the call sent again at once;
    // its result comes when the command, which went on running, ends.
    expect(at(ofType(list, "tool/retry")[0]!) - killedAt).toBeLessThan(6_000);
    expect(at(result) - at(ofType(list, "tool/call")[0]!)).toBeLessThan(6_000 + 5_000);
    expect(readFileSync(join(workspace, "once.log"), "utf8")).toBe("ran\n");
    expect(ofType(list, "tool/result")).toHaveLength(1);
    expect(ofType(list, "turn/end")[0]!.payload).toMatchObject({ value: { reason: "completed" } });
  }, 90_000);

  it("durable - with no tools worker and no llm for a while, the turn waits (retry events) and completes once they are back", async () => {
    // Created while the llm answers (creation checks the model), then the llm goes away.
    llm = await startLlm();
    const id = await create();
    await llm.close();
    script = [{ calls: [{ name: "bash", args: { command: "echo back" } }] }, { content: "Done." }];
    await submit(id, "go");
    // The tool list is asked first: no worker yet, so a tool/retry without a call id.
    await waitFor("a tool/retry for the tool list", async () => ofType(await events(id), "tool/retry").length > 0, { intervalMs: 50 });
    await startWorker();
    // Then the model: no llm, so llm/retry events until one is back.
    await waitFor("an llm/retry for the missing llm", async () => ofType(await events(id), "llm/retry").length > 0, { intervalMs: 50 });
    llm = await startLlm();
    const list = await turnEnded(id);
    expect(ofType(list, "tool/retry")[0]!.payload).toMatchObject({ value: { callId: "", code: "bus.no_responders", hop: "tools", attempt: 1 } });
    expect(ofType(list, "llm/retry")[0]!.payload).toMatchObject({ value: { code: "bus.no_responders", attempt: 1 } });
    const result = ofType(list, "tool/result")[0]!;
    expect(result.payload).toMatchObject({ value: { isError: false, content: "back\nexit code: 0" } });
    expect(ofType(list, "assistant/message")).toHaveLength(2);
    expect(ofType(list, "turn/end")[0]!.payload).toMatchObject({ value: { reason: "completed" } });
    expect(list.map((e) => e.seq)).toEqual(list.map((_, i) => i + 1));
  }, 90_000);

  it("durable - a container removed between two calls of a session is started again for the next call (the worker's ensure cache is not trusted blindly)", async () => {
    llm = await startLlm();
    await startWorker();
    const id = await create();
    script = [{ calls: [{ name: "bash", args: { command: "echo one" } }] }, { content: "ok" }, { calls: [{ name: "bash", args: { command: "echo two" } }] }, { content: "ok" }];
    await submit(id, "first");
    await turnEnded(id);
    const released = await bus.request(SandboxRpc.ReleaseSandbox, { sessionId: id, mode: "" }, { timeoutMs: 60_000 });
    expect(released.removed).toBe(true);
    await bus.request(LoopRpc.SubmitMessage, { tenant: "local", sessionId: id, text: "second" });
    const list = await waitFor("the second turn/end", async () => {
      const all = await events(id);
      return ofType(all, "turn/end").length === 2 && all;
    }, { timeoutMs: 60_000, intervalMs: 50 });
    const results = ofType(list, "tool/result").map((e) => e.payload?.$case === "toolResult" && e.payload.value);
    expect(results.map((r) => r && r.content)).toEqual(["one\nexit code: 0", "two\nexit code: 0"]);
  }, 90_000);

  it("prewarm - a new session's sandbox is started at creation, before its first message", async () => {
    llm = await startLlm();
    const id = await create();
    // The sandbox service lists the processes of a running container only.
    const listing = await waitFor("the session's container to run", () =>
      bus.request(SandboxRpc.ListProcesses, { sessionId: id, mode: "" }, { timeoutMs: 10_000 }), { timeoutMs: 60_000, intervalMs: 100 });
    expect(listing.processes).toEqual([]);
    expect(ofType(await events(id), "user/message")).toHaveLength(0);
  }, 90_000);

  it("durable - an llm replica that dies mid-stream: the call is sent again (llm/retry, bus.worker_lost) and one whole assistant message is logged", async () => {
    llm = await startLlm();
    await startWorker();
    const id = await create();
    await llm.close();
    // A replica that starts answering, then dies (its connection gone, no heartbeat ever again).
    const dying = await Bus.connect({ url: NATS_URL, namespace, name: "durable-llm-dying" });
    let died!: () => void;
    const dead = new Promise<void>((resolve) => { died = resolve; });
    dying.serve(LlmRpc.Complete, async (_req, w) => {
      w.send({ index: 0, body: { $case: "delta", value: { kind: Delta_Kind.KIND_TEXT, text: "half an ans", toolIndex: 0, toolCallId: "", toolName: "" } } });
      await dying.nc.flush();
      void dying.nc.close().then(died);
    });
    await dying.nc.flush();
    script = [{ content: "The whole answer." }];
    await submit(id, "answer me");
    await dead;
    llm = await startLlm();
    const list = await turnEnded(id);
    const retries = ofType(list, "llm/retry");
    expect(retries[0]!.payload).toMatchObject({ value: { code: "bus.worker_lost", attempt: 1 } });
    const messages = ofType(list, "assistant/message");
    expect(messages).toHaveLength(1);
    expect(messages[0]!.payload).toMatchObject({ value: { content: "The whole answer." } });
    expect(ofType(list, "turn/end")[0]!.payload).toMatchObject({ value: { reason: "completed" } });
  }, 90_000);
});
