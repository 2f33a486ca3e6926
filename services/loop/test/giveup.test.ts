import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { Kvm } from "@nats-io/kv";
import { removeNamespace, waitFor } from "@tack/testkit";
import { Bus, LlmRpc, LoopRpc, TackError, ToolsRpc } from "@tack/bus";
import { draft, ensureLogStream, readAll, SessionLogWriter } from "@tack/log";
import { CallToolResponse, CreateSessionRequest, ListToolsResponse, Role, type Event, type ToolCall } from "@tack/proto";
import { Leases, RECOVERY_TEXT, startLoopService, type LoopService } from "@tack/loop-service";

// A loop that gives a session up mid-turn (its log writer found another writer's event, or its
// lease could not be renewed) must leave the lease to expire, so that a scan takes the session
// over and finishes the turn. The chaos test (test/e2e/chaos.test.ts) saw the lease deleted
// instead: the session's turn never ended. The model and the tools are scripted responders.
const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const namespace = `t${randomBytes(5).toString("hex")}`;
const workspace = mkdtempSync(join(tmpdir(), "tack-giveup-"));
let bus: Bus;
let loop: LoopService | undefined;
let openGate: () => void = () => undefined;
let gate: Promise<void> = Promise.resolve();

beforeAll(async () => {
  bus = await Bus.connect({ url: NATS_URL, namespace, name: "giveup-test" });
  await ensureLogStream(bus.nc, bus.names);
  bus.serve(LlmRpc.Complete, async (req, w) => {
    const n = req.messages.filter((m) => m.role === Role.ROLE_ASSISTANT).length;
    const toolCalls: ToolCall[] = n === 0 ? [{ id: "call_0_0", name: "bash", arguments: "{}" }] : [];
    w.send({ index: 0, body: { $case: "done", value: { content: n === 0 ? "" : "Done.", reasoningContent: "", toolCalls, finishReason: toolCalls.length ? "tool_calls" : "stop", usage: { inputMissTokens: 10, inputHitTokens: 0, outputTokens: 2, reasoningTokens: 0 }, model: "scripted", costUsd: 0, priceWindow: "" } } });
  });
  bus.serve(LlmRpc.EstimateCost, async () => ({ costUsd: 0, priceWindow: "standard" }));
  bus.serve(LlmRpc.CheckModel, async (req) => {
    if (!req.model.startsWith("scripted:")) throw new TackError("llm.unknown_model", `unknown model ${req.model}`);
    return { provider: "scripted" };
  });
  bus.serve(ToolsRpc.ListTools, async () => ListToolsResponse.fromPartial({ tools: [{ name: "bash", description: "run", parametersJson: "{}" }] }));
  bus.serve(ToolsRpc.CallTool, async () => {
    await gate;
    return CallToolResponse.fromPartial({ content: "ran", isError: false, durationMs: 1 });
  });
});

afterEach(async () => {
  openGate();
  await loop?.stop();
  loop = undefined;
});

afterAll(async () => {
  await removeNamespace(bus.nc, bus.names.namespace);
  await bus.close();
  rmSync(workspace, { recursive: true, force: true });
});

describe("giving a session up", () => {
  it("giveup - a loop whose writer meets another writer mid-turn leaves the lease to expire, and the session is taken over and its turn finished", async () => {
    loop = await startLoopService({ natsUrl: NATS_URL, namespace, leaseTtlMs: 1_000 });
    gate = new Promise((resolve) => { openGate = resolve; });
    const { sessionId } = await bus.request(LoopRpc.CreateSession, CreateSessionRequest.fromPartial({ tenant: "local", model: "scripted:test", workspace }));
    await bus.request(LoopRpc.SubmitMessage, { tenant: "local", sessionId, text: "go" });
    const log = () => readAll(bus.nc, bus.names, { tenant: "local", sessionId });
    await waitFor("the tool call", async () => (await log()).some((e) => e.type === "tool/call"), { timeoutMs: 10_000, intervalMs: 20 });
    // Another writer gets an event in while the call runs: the loop's next append (the result) is refused and it gives the session up.
    await (await SessionLogWriter.open(bus.nc, bus.names, { tenant: "local", sessionId }))
      .append(draft("error", { code: "test.other_writer", message: "written by another writer", turn: 1, step: 1 }, "test"));
    openGate();
    const lease = async () => (await new Kvm(bus.nc).open(bus.names.leaseBucket)).get(Leases.key("local", sessionId));
    const events: Event[] = await waitFor("the turn to end after the session was given up", async () => {
      const all = await log();
      return all.some((e) => e.type === "turn/end") && all;
    }, { timeoutMs: 20_000, intervalMs: 100 }).catch(async (error: unknown) => {
      const entry = await lease();
      throw new Error(`${(error as Error).message}; the lease: ${entry ? `${entry.operation} ${entry.string()}` : "none"}`);
    });
    const types = events.map((e) => e.type);
    expect(types).toContain("session/recovered");
    const results = events.filter((e) => e.type === "tool/result");
    expect(results).toHaveLength(1);
    expect(results[0]!.payload).toMatchObject({ value: { callId: "call_0_0", content: RECOVERY_TEXT.mayHaveRun, synthesized: true } });
    expect(events.at(-1)!.payload).toMatchObject({ $case: "turnEnd", value: { reason: "completed" } });
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
  }, 40_000);
});
