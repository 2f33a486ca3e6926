import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { removeNamespace, waitFor as waitForValue } from "@tack/testkit";
import { Bus, LlmRpc, LoopRpc, TackError, ToolsRpc } from "@tack/bus";
import { ensureLogStream, readAll, timestampMs } from "@tack/log";
import { CallToolResponse, CreateSessionRequest, ListToolsResponse, DecideApprovalResponse, Role, type Event, type ToolCall } from "@tack/proto";
import { APPROVAL_TEXT, startLoopService, type LoopOptions, type LoopService } from "@tack/loop-service";

// The loop's side of escalation against real NATS JetStream; the model and the tools are
// scripted responders on the bus (the real tools and sandbox are covered in test/e2e).
const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const namespace = `t${randomBytes(5).toString("hex")}`;
const workspace = mkdtempSync(join(tmpdir(), "tack-approvals-"));
let bus: Bus;
let loops: LoopService[] = [];

type Call = { name: string; args: Record<string, unknown> };
/** Replies of the scripted model; `replies[n]` answers a request holding n assistant messages. */
let replies: Call[][] = [];
/** Every call the tools responder received, with the mode it was to run under. */
let ran: Array<{ callId: string; command: unknown; mode: string }> = [];

beforeAll(async () => {
  bus = await Bus.connect({ url: NATS_URL, namespace, name: "approvals-test" });
  await ensureLogStream(bus.nc, bus.names);
  bus.serve(LlmRpc.Complete, async (req, w) => {
    const n = req.messages.filter((m) => m.role === Role.ROLE_ASSISTANT).length;
    const toolCalls: ToolCall[] = (replies[n] ?? []).map((c, i) => ({ id: `call_${n}_${i}`, name: c.name, arguments: JSON.stringify(c.args) }));
    w.send({ index: 0, body: { $case: "done", value: {
      content: toolCalls.length ? "" : "done", reasoningContent: "", toolCalls, finishReason: toolCalls.length ? "tool_calls" : "stop",
      usage: undefined, model: "scripted", costUsd: 0, priceWindow: "",
    } } });
  });
  bus.serve(LlmRpc.CheckModel, async () => ({ provider: "scripted" }));
  // What each can be denied and its operation argument come from the tools service, as here.
  bus.serve(ToolsRpc.ListTools, async () => ListToolsResponse.fromPartial({
    tools: [
      { name: "bash", description: "bash", parametersJson: "{}", deniable: ["writes", "network"], operationArgument: "command" },
      { name: "write", description: "write", parametersJson: "{}", deniable: ["writes"] },
    ],
  }));
  bus.serve(ToolsRpc.CallTool, async (req) => {
    const args = JSON.parse(req.arguments) as Record<string, unknown>;
    ran.push({ callId: req.callId, command: args.command ?? args.path, mode: req.sandboxMode });
    return CallToolResponse.fromPartial({ content: `ran in ${req.sandboxMode}`, isError: false, durationMs: 1 });
  });
});

afterEach(async () => {
  await Promise.all(loops.map((l) => l.stop()));
  loops = [];
  replies = [];
  ran = [];
});

afterAll(async () => {
  // Streams, lease/spend buckets and spill store of this test's namespace.
  await removeNamespace(bus.nc, bus.names.namespace);
  await bus.close();
});

async function startLoop(options: Partial<LoopOptions> = {}): Promise<LoopService> {
  const loop = await startLoopService({ natsUrl: NATS_URL, namespace, leaseTtlMs: 1_000, ...options });
  loops.push(loop);
  return loop;
}

async function session(sandboxMode: string, approvalPolicy = "ask"): Promise<string> {
  const created = await bus.request(LoopRpc.CreateSession, CreateSessionRequest.fromPartial({
    tenant: "local", model: "scripted:test", workspace, sandboxMode, approvalPolicy,
  }));
  return created.sessionId;
}

async function submit(sessionId: string, text = "go"): Promise<void> {
  await bus.request(LoopRpc.SubmitMessage, { tenant: "local", sessionId, text });
}

/** Sends a decision the way the gateway does: to the owner, or to any loop when none owns the session. */
async function decide(sessionId: string, callId: string, decision: string): Promise<DecideApprovalResponse> {
  const request = { tenant: "local", sessionId, callId, decision, decidedBy: "tester" };
  try {
    return await bus.request(LoopRpc.DecideApproval.at({ session: sessionId }), request, { timeoutMs: 10_000 });
  } catch (error) {
    if (!(error instanceof TackError && error.code === "bus.no_responders")) throw error;
    return bus.request(LoopRpc.DecideApproval, request, { timeoutMs: 10_000 });
  }
}

function waitFor(sessionId: string, done: (events: Event[]) => boolean, timeoutMs = 15_000): Promise<Event[]> {
  return waitForValue(`the log of ${sessionId} to reach the expected state`, async () => {
    const events = await readAll(bus.nc, bus.names, { tenant: "local", sessionId });
    return done(events) && events;
  }, { timeoutMs, intervalMs: 30 });
}

const has = (type: string, count = 1) => (events: Event[]) => events.filter((e) => e.type === type).length >= count;
const results = (events: Event[]) => Object.fromEntries(events.flatMap((e) => (e.payload?.$case === "toolResult" ? [[e.payload.value.callId, e.payload.value.content]] : [])));
const decisions = (events: Event[]) => events.flatMap((e) => (e.payload?.$case === "approvalDecided" ? [e.payload.value] : []));
const touch = (extra: Record<string, unknown> = {}): Call => ({ name: "bash", args: { command: "touch x", ...extra } });
const escalated = (mode = "workspace-write") => touch({ sandbox_permissions: mode, justification: "create the file the user asked for" });

describe("approvals", () => {
  it("approvals - an approved escalation runs once under the wider mode while the step's other calls go on", async () => {
    await startLoop();
    replies = [[touch()], [escalated(), { name: "bash", args: { command: "echo other" } }], [touch()]];
    const id = await session("read-only");
    await submit(id);
    const asked = await waitFor(id, (e) => has("approval/asked")(e) && "call_1_1" in results(e));
    const card = asked.find((e) => e.payload?.$case === "approvalAsked")!;
    expect(card.payload?.$case === "approvalAsked" && card.payload.value).toEqual({
      callId: "call_1_0", toolName: "bash", operation: "touch x", currentMode: "read-only", requestedMode: "workspace-write",
      justification: "create the file the user asked for", turn: 1, step: 2, kind: "sandbox",
    });
    expect(ran.map((r) => r.callId)).toEqual(["call_0_0", "call_1_1"]);

    const { seq } = await decide(id, "call_1_0", "allow_once");
    const events = await waitFor(id, has("turn/end"));
    expect(events.find((e) => e.seq === seq)?.payload).toEqual({ $case: "approvalDecided", value: { callId: "call_1_0", decision: "allow_once", decidedBy: "tester" } });
    // Only the approved call ran in the wider mode; the next step is back in the session's mode.
    expect(ran).toEqual([
      { callId: "call_0_0", command: "touch x", mode: "read-only" },
      { callId: "call_1_1", command: "echo other", mode: "read-only" },
      { callId: "call_1_0", command: "touch x", mode: "workspace-write" },
      { callId: "call_2_0", command: "touch x", mode: "read-only" },
    ]);
    expect(results(events).call_1_0).toBe(`${APPROVAL_TEXT.allowedOnce("workspace-write", "read-only")}\nran in workspace-write`);
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
    expect(events.at(-1)!.payload).toMatchObject({ $case: "turnEnd", value: { reason: "completed", steps: 4 } });
  });

  it("approvals - a rejected escalation never runs and says so", async () => {
    await startLoop();
    replies = [[escalated()]];
    const id = await session("read-only");
    await submit(id);
    await waitFor(id, has("approval/asked"));
    await decide(id, "call_0_0", "reject");
    const events = await waitFor(id, has("turn/end"));
    expect(ran).toEqual([]);
    expect(events.some((e) => e.type === "tool/call")).toBe(false);
    expect(results(events)).toEqual({ call_0_0: APPROVAL_TEXT.rejected("workspace-write", "read-only") });
    expect(decisions(events)).toEqual([{ callId: "call_0_0", decision: "reject", decidedBy: "tester" }]);
  });

  it("approvals - policy never rejects without asking anyone", async () => {
    await startLoop();
    replies = [[escalated()]];
    const id = await session("read-only", "never");
    await submit(id);
    const events = await waitFor(id, has("turn/end"));
    expect(ran).toEqual([]);
    expect(events.some((e) => e.type === "approval/asked")).toBe(false);
    expect(decisions(events)).toEqual([{ callId: "call_0_0", decision: "reject", decidedBy: "policy:never" }]);
    expect(results(events)).toEqual({ call_0_0: APPROVAL_TEXT.policyNever("workspace-write", "read-only") });
  });

  it("approvals - a turn escalates only once; the next turn may ask again", async () => {
    await startLoop();
    // Two escalations in one step: only the first asks. A third in a later step of the turn is refused too.
    replies = [[escalated(), escalated()], [escalated()], [], [escalated()]];
    const id = await session("read-only");
    await submit(id);
    const first = await waitFor(id, (e) => has("approval/asked")(e) && "call_0_1" in results(e));
    expect(results(first)).toEqual({ call_0_1: APPROVAL_TEXT.alreadyUsed("call_0_0", "read-only") });
    await decide(id, "call_0_0", "allow_once");
    const turn1 = await waitFor(id, has("turn/end"));
    expect(results(turn1).call_1_0).toBe(APPROVAL_TEXT.alreadyUsed("call_0_0", "read-only"));
    expect(turn1.filter((e) => e.type === "approval/asked")).toHaveLength(1);
    expect(ran.map((r) => [r.callId, r.mode])).toEqual([["call_0_0", "workspace-write"]]);

    await submit(id, "again");
    await waitFor(id, has("approval/asked", 2));
    await decide(id, "call_3_0", "allow_once");
    await waitFor(id, has("turn/end", 2));
    expect(ran.map((r) => [r.callId, r.mode])).toEqual([["call_0_0", "workspace-write"], ["call_3_0", "workspace-write"]]);
  });

  it("approvals - escalations that break the rules are refused without asking", async () => {
    await startLoop();
    replies = [[
      { name: "write", args: { path: "f", content: "x", sandbox_permissions: "danger-full-access", justification: "j" } },
      touch({ sandbox_permissions: "danger-full-access" }),
      touch({ sandbox_permissions: "read-only", justification: "j" }),
      touch({ sandbox_permissions: "workspace-write", justification: "already in this mode" }),
    ]];
    const id = await session("workspace-write");
    await submit(id);
    const events = await waitFor(id, has("turn/end"));
    expect(results(events)).toEqual({
      call_0_0: APPROVAL_TEXT.notNarrowest("write", "danger-full-access", "workspace-write", []),
      call_0_1: APPROVAL_TEXT.noJustification("danger-full-access"),
      call_0_2: APPROVAL_TEXT.notWider("read-only", "workspace-write"),
      call_0_3: "ran in workspace-write",
    });
    expect(events.some((e) => e.type === "approval/asked" || e.type === "approval/decided")).toBe(false);
    expect(ran.map((r) => r.callId)).toEqual(["call_0_3"]);
  });

  it("approvals - from read-only, write may ask only for workspace-write and a blank justification is refused", async () => {
    await startLoop();
    replies = [[
      { name: "write", args: { path: "f", content: "x", sandbox_permissions: "danger-full-access", justification: "j" } },
      touch({ sandbox_permissions: "workspace-write", justification: " " }),
    ]];
    const id = await session("read-only");
    await submit(id);
    const events = await waitFor(id, has("turn/end"));
    expect(results(events)).toEqual({
      call_0_0: APPROVAL_TEXT.notNarrowest("write", "danger-full-access", "read-only", ["workspace-write"]),
      call_0_1: APPROVAL_TEXT.noJustification("workspace-write"),
    });
    expect(ran).toEqual([]);
  });

  it("approvals - no answer within the timeout is unavailable, and the command never runs", async () => {
    await startLoop({ approvalTimeoutMs: 300 });
    replies = [[escalated("danger-full-access")]];
    const id = await session("workspace-write");
    await submit(id);
    const events = await waitFor(id, has("turn/end"));
    expect(decisions(events)).toEqual([{ callId: "call_0_0", decision: "unavailable", decidedBy: "timeout" }]);
    expect(results(events)).toEqual({ call_0_0: APPROVAL_TEXT.unavailable("danger-full-access", "workspace-write") });
    expect(ran).toEqual([]);
    // A decision that comes too late finds nothing pending.
    await expect(decide(id, "call_0_0", "allow_once")).rejects.toMatchObject({ code: "loop.no_pending_approval" });
  });

  it("approvals - stopping the turn while it waits cancels the approval and ends the turn", async () => {
    const loop = await startLoop();
    replies = [[escalated()], [touch()]];
    const id = await session("read-only");
    await submit(id);
    await waitFor(id, has("approval/asked"));
    await loop.session(id)!.stopTurn("tester");
    const events = await waitFor(id, has("turn/end"));
    expect(decisions(events)).toEqual([{ callId: "call_0_0", decision: "cancelled", decidedBy: "tester" }]);
    expect(results(events)).toEqual({ call_0_0: APPROVAL_TEXT.cancelled("workspace-write") });
    expect(events.at(-1)!.payload).toMatchObject({ $case: "turnEnd", value: { reason: "cancelled", steps: 1 } });
    expect(ran).toEqual([]);
  });

  it("approvals - a pending approval survives a loop restart and the decision completes the turn on the new process", async () => {
    const first = await startLoop();
    replies = [[escalated(), { name: "bash", args: { command: "echo other" } }], [touch()]];
    const id = await session("read-only");
    await submit(id);
    await waitFor(id, (e) => has("approval/asked")(e) && has("tool/result")(e));
    await first.stop();
    loops = loops.filter((l) => l !== first);
    // A long lease means a slow recovery scan (every 5 s): here the decision itself claims the
    // unowned session through the queue group once the old lease (1 s) expires.
    const second = await startLoop({ leaseTtlMs: 10_000 });
    const claimed = Date.now();
    const { seq } = await decide(id, "call_0_0", "allow_once");
    expect(Date.now() - claimed).toBeLessThan(4_000);
    const events = await waitFor(id, has("turn/end"));
    expect(second.owner).not.toBe(first.owner);
    const recovery = events.find((e) => e.payload?.$case === "recovery");
    expect(recovery?.payload).toMatchObject({ value: { previousOwner: first.owner, owner: second.owner, interruptedCallIds: [], unstartedCallIds: [] } });
    expect(recovery!.seq).toBeLessThan(seq);
    expect(ran.map((r) => [r.callId, r.mode])).toEqual([["call_0_1", "read-only"], ["call_0_0", "workspace-write"], ["call_1_0", "read-only"]]);
    expect(results(events).call_0_0).toBe(`${APPROVAL_TEXT.allowedOnce("workspace-write", "read-only")}\nran in workspace-write`);
    expect(events.filter((e) => e.type === "approval/decided")).toHaveLength(1);
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
    expect(events.at(-1)!.payload).toMatchObject({ $case: "turnEnd", value: { reason: "completed", steps: 3 } });
  });

  it("approvals - after a restart the timeout still counts from when the approval was asked", async () => {
    const first = await startLoop({ approvalTimeoutMs: 2_500 });
    replies = [[escalated()]];
    const id = await session("read-only");
    await submit(id);
    await waitFor(id, has("approval/asked"));
    await first.stop();
    loops = [];
    await startLoop({ approvalTimeoutMs: 2_500 });
    const events = await waitFor(id, has("turn/end"));
    expect(decisions(events)).toEqual([{ callId: "call_0_0", decision: "unavailable", decidedBy: "timeout" }]);
    // The new owner takes over only after the old lease expired (1 s), so a fresh 2.5 s wait would end later.
    const at = (type: string) => timestampMs(events.find((e) => e.type === type)!.time);
    expect(at("approval/decided") - at("approval/asked")).toBeGreaterThan(2_400);
    expect(at("approval/decided") - at("approval/asked")).toBeLessThan(3_200);
    expect(at("session/recovered")).toBeLessThan(at("approval/decided"));
    expect(ran).toEqual([]);
  });

  it("approvals - decisions are checked: unknown call, unknown decision", async () => {
    await startLoop();
    replies = [[escalated()]];
    const id = await session("read-only");
    await submit(id);
    await waitFor(id, has("approval/asked"));
    await expect(decide(id, "call_9_9", "allow_once")).rejects.toMatchObject({ code: "loop.no_pending_approval" });
    await expect(decide(id, "call_0_0", "sure")).rejects.toMatchObject({ code: "loop.bad_decision", message: 'decision "sure" is unknown; answer allow_once or reject' });
    await decide(id, "call_0_0", "reject");
    await waitFor(id, has("turn/end"));
    await expect(decide(id, "call_0_0", "reject")).rejects.toMatchObject({ code: "loop.no_pending_approval" });
  });
});
