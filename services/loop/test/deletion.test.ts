import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { removeNamespace, waitFor } from "@tack/testkit";
import { Bus, LlmRpc, LoopRpc, SandboxRpc, TackError, ToolsRpc } from "@tack/bus";
import { ensureLogStream, readAll, SpillBucket } from "@tack/log";
import { CallToolResponse, CreateSessionRequest, DeleteSessionResponse, ListToolsResponse, ReleaseSandboxRequest, Role, type ToolCall } from "@tack/proto";
import { startLoopService, type LoopService } from "@tack/loop-service";

// The loop's side of deleting a session, against real NATS JetStream; the model, the tools and
// the sandbox service are scripted responders on the bus (real containers: test/security/deletion.test.ts).
const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const namespace = `t${randomBytes(5).toString("hex")}`;
const workspace = mkdtempSync(join(tmpdir(), "tack-loop-deletion-"));
const TENANT = "acme";
let bus: Bus;
let jsm: JetStreamManager;
let loops: LoopService[] = [];
let llmCalls = 0;
let gate: Promise<void> = Promise.resolve();
const released: ReleaseSandboxRequest[] = [];

beforeAll(async () => {
  bus = await Bus.connect({ url: NATS_URL, namespace, name: "loop-deletion-test" });
  jsm = await jetstreamManager(bus.nc);
  await ensureLogStream(bus.nc, bus.names);
  bus.serve(LlmRpc.Complete, async (req, w) => {
    llmCalls++;
    await gate;
    const first = req.messages.filter((m) => m.role === Role.ROLE_ASSISTANT).length === 0;
    const toolCalls: ToolCall[] = first ? [{ id: "call_0_0", name: "bash", arguments: "{}" }] : [];
    w.send({ index: 0, body: { $case: "done", value: {
      content: first ? "" : "Done.", reasoningContent: "", toolCalls, finishReason: first ? "tool_calls" : "stop",
      usage: { inputMissTokens: 10, inputHitTokens: 0, outputTokens: 2, reasoningTokens: 0 }, model: "scripted", costUsd: 0, priceWindow: "",
    } } });
  });
  bus.serve(LlmRpc.CheckModel, async () => ({ provider: "scripted" }));
  bus.serve(ToolsRpc.ListTools, async () => ListToolsResponse.fromPartial({ tools: [{ name: "bash", description: "run", parametersJson: "{}" }] }));
  // Over the loop's spill threshold below, so the result goes to the object store.
  bus.serve(ToolsRpc.CallTool, async () => CallToolResponse.fromPartial({ content: "x".repeat(5_000), isError: false, durationMs: 1 }));
  bus.serve(SandboxRpc.ReleaseSandbox, async (req) => {
    released.push(req);
    return { removed: true };
  });
});

afterEach(async () => {
  await Promise.all(loops.map((l) => l.stop()));
  loops = [];
  gate = Promise.resolve();
  released.length = 0;
});

afterAll(async () => {
  await removeNamespace(bus.nc, namespace);
  await bus.close();
});

async function startLoop(options: { logMaxBytes?: number; logMaxAgeDays?: number } = {}): Promise<LoopService> {
  const loop = await startLoopService({ natsUrl: NATS_URL, namespace, leaseTtlMs: 2_000, spillBytes: 1_000, ...options });
  loops.push(loop);
  return loop;
}

async function create(): Promise<string> {
  return (await bus.request(LoopRpc.CreateSession, CreateSessionRequest.fromPartial({ tenant: TENANT, model: "scripted:test", workspace }))).sessionId;
}

async function submit(sessionId: string): Promise<void> {
  await bus.request(LoopRpc.SubmitMessage, { tenant: TENANT, sessionId, text: "go" });
}

async function waitForLog(sessionId: string, type: string): Promise<void> {
  await waitFor(`${type} in the log of ${sessionId}`, async () =>
    (await readAll(bus.nc, bus.names, { tenant: TENANT, sessionId })).some((e) => e.type === type), { timeoutMs: 15_000, intervalMs: 50 });
}

function deleteSession(sessionId: string, owner = false): Promise<DeleteSessionResponse> {
  return bus.request(owner ? LoopRpc.DeleteSession.at({ session: sessionId }) : LoopRpc.DeleteSession, { tenant: TENANT, sessionId, deletedBy: "key:test" }, { timeoutMs: 30_000 });
}

async function logMessages(sessionId: string): Promise<number> {
  const subject = bus.names.logSubject(TENANT, sessionId);
  return (await jsm.streams.info(bus.names.logStream, { subjects_filter: subject })).state.subjects?.[subject] ?? 0;
}

async function leaseTraces(sessionId: string): Promise<string[]> {
  const info = await jsm.streams.info(`KV_${bus.names.leaseBucket}`, { subjects_filter: ">" });
  return Object.keys(info.state.subjects ?? {}).filter((s) => s.includes(sessionId));
}

const refusal = (p: Promise<unknown>) => p.then(() => { throw new Error("not refused"); }, (error: unknown) => error as TackError);

describe("loop deletion", () => {
  it("deletion - an idle session's sandboxes (every mode), spilled results, log subject and lease go; a repeat finds nothing", async () => {
    await startLoop();
    const id = await create();
    await submit(id);
    await waitForLog(id, "turn/end");
    const spills = (await SpillBucket.open(bus.nc, bus.names))!;
    expect(await spills.get({ tenant: TENANT, sessionId: id }, "call_0_0")).toBeDefined();
    const messages = await logMessages(id);
    expect(messages).toBeGreaterThan(10);

    expect(await deleteSession(id)).toEqual({ existed: true, logMessages: messages, spillObjects: 1, sandboxesRemoved: true });
    expect(released).toEqual([{ sessionId: id, mode: "" }]);
    expect(await logMessages(id)).toBe(0);
    expect(await spills.get({ tenant: TENANT, sessionId: id }, "call_0_0")).toBeUndefined();
    expect(await leaseTraces(id)).toEqual([]);

    // Nothing left to remove; with no log to prove whose they are, sandboxes are not touched.
    expect(await deleteSession(id)).toEqual({ existed: false, logMessages: 0, spillObjects: 0, sandboxesRemoved: false });
    expect(released).toHaveLength(1);
    // A message for the deleted session is refused and leaves no lease held (its claim is given up at once).
    expect((await refusal(submit(id))).code).toBe("loop.unknown_session");
    const lease = await (await new Kvm(bus.nc).open(bus.names.leaseBucket)).get(`${TENANT}.${id}`);
    expect(lease === null || lease.operation !== "PUT").toBe(true);
  });

  it("deletion - refused while a turn runs, by its owner (loop.busy) and by another replica waiting out the lease (loop.session_busy)", async () => {
    await startLoop();
    const id = await create();
    let open!: () => void;
    gate = new Promise<void>((resolve) => { open = resolve; });
    await submit(id);
    await waitForLog(id, "step/start");
    const before = await logMessages(id);
    expect((await refusal(deleteSession(id, true))).code).toBe("loop.busy");
    // A second replica has no runtime of the session: it waits for the owner's lease, which is renewed.
    const other = await startLoop();
    expect(other.session(id, TENANT)).toBeUndefined();
    expect(["loop.busy", "loop.session_busy"]).toContain((await refusal(deleteSession(id))).code);
    expect(await logMessages(id)).toBe(before);
    expect(released).toEqual([]);
    open();
    await waitForLog(id, "turn/end");
    expect(await deleteSession(id)).toMatchObject({ existed: true, spillObjects: 1 });
    expect(await logMessages(id)).toBe(0);
  });

  it("deletion - a session whose owner died mid-turn is deleted once the lease expires, without being resumed", async () => {
    const first = await startLoop();
    const id = await create();
    gate = new Promise<void>(() => undefined);
    await submit(id);
    await waitForLog(id, "step/start");
    // Stopping mid-turn keeps the lease until it expires, as a crash would.
    await first.stop();
    loops = loops.filter((l) => l !== first);
    const calls = llmCalls;
    gate = Promise.resolve();
    await startLoop();
    expect(await deleteSession(id)).toMatchObject({ existed: true, sandboxesRemoved: true });
    expect(llmCalls).toBe(calls);
    expect(await logMessages(id)).toBe(0);
    expect(await leaseTraces(id)).toEqual([]);
  });

  it("retention - the loop gives an existing log stream its configured max_bytes / max_age and lifts limits no longer configured", async () => {
    await startLoop({ logMaxBytes: 64 * 1024 * 1024, logMaxAgeDays: 7 });
    let config = (await jsm.streams.info(bus.names.logStream)).config;
    expect(config.max_bytes).toBe(64 * 1024 * 1024);
    expect(config.max_age).toBe(7 * 86_400_000 * 1_000_000);
    await Promise.all(loops.map((l) => l.stop()));
    loops = [];
    await startLoop();
    config = (await jsm.streams.info(bus.names.logStream)).config;
    expect(config.max_bytes).toBe(-1);
    expect(config.max_age).toBe(0);
  });
});
