import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { removeNamespace, waitFor as waitForValue } from "@tack/testkit";
import { Bus, LlmRpc, LoopRpc, TackError, ToolsRpc, type Codec, type Rpc } from "@tack/bus";
import { deriveRequest, ensureLogStream, isCase, readAll, type EventOf, type PayloadOf } from "@tack/log";
import { CallToolRequest, CallToolResponse, ChatMessage, CompleteRequest, CreateSessionRequest, AnswerQuestionRequest, AnswerQuestionResponse, DecideApprovalRequest, DecideApprovalResponse, DecidePlanRequest, DecidePlanResponse, Event, ListToolsRequest, QuestionAnswer, Role, SetPlanModeResponse, SetSessionModeResponse, Surface_Kind, ToolSpec, type EventPayloadCase, type ToolCall } from "@tack/proto";
import { callTool, listTools } from "@tack/tools-service";
import { LocalSandboxClient } from "../../tools/test/support/local-sandbox.js";
import { APPROVAL_TEXT, SESSION_TOOL_TEXT, startLoopService, type LoopOptions, type LoopService } from "@tack/loop-service";
import { searchLog } from "../src/session-tools.js";

// The loop's session tools, plan mode and session modes against real NATS JetStream. The tool
// list is the real tools service's (its schemas are what the loop validates against); the model
// and the tool executions are scripted responders on the bus.
const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const namespace = `t${randomBytes(5).toString("hex")}`;
const workspace = mkdtempSync(join(tmpdir(), "tack-session-tools-"));
let bus: Bus;
let loops: LoopService[] = [];

type Call = { name: string; args: Record<string, unknown> };
/** Replies of the scripted model; `replies[n]` answers a request holding n assistant messages. */
let replies: Call[][] = [];
/** Every model request, as the llm service received it. */
let requests: CompleteRequest[] = [];
/** Every call the tools responder received. */
let ran: CallToolRequest[] = [];
/** Every tools.list request. */
let lists: ListToolsRequest[] = [];

/** A tool only these tests have: what a sandbox mode can deny it and its operation come from its ToolSpec alone. */
const deploy = ToolSpec.fromPartial({ name: "deploy", description: "deploy", parametersJson: "{}", deniable: ["network"], operationArgument: "target" });

beforeAll(async () => {
  bus = await Bus.connect({ url: NATS_URL, namespace, name: "session-tools-test" });
  await ensureLogStream(bus.nc, bus.names);
  bus.serve(LlmRpc.Complete, async (req, w) => {
    requests.push(req);
    const n = req.messages.filter((m) => m.role === Role.ROLE_ASSISTANT).length;
    const toolCalls: ToolCall[] = (replies[n] ?? []).map((c, i) => ({ id: `call_${n}_${i}`, name: c.name, arguments: JSON.stringify(c.args) }));
    w.send({ index: 0, body: { $case: "done", value: {
      content: toolCalls.length ? "" : "done", reasoningContent: "", toolCalls, finishReason: toolCalls.length ? "tool_calls" : "stop",
      usage: undefined, model: "scripted", costUsd: 0, priceWindow: "",
    } } });
  });
  bus.serve(LlmRpc.CheckModel, async () => ({ provider: "scripted" }));
  // The real lists (unknown modes refused as the tools service refuses them), plus `deploy` in standard.
  bus.serve(ToolsRpc.ListTools, async (req) => {
    lists.push(req);
    return { tools: [...listTools(req.mode, req.defined), ...(req.mode === "standard" ? [deploy] : [])] };
  });
  bus.serve(ToolsRpc.CallTool, async (req) => {
    ran.push(req);
    // Creator mode runs the real tools (define_tool and the defined ones) on this host.
    if (req.sessionMode === "creator") return callTool(req, { sandbox: new LocalSandboxClient(workspace), spills: { get: async () => undefined }, signal: new AbortController().signal });
    if (req.name === "run_code") {
      return CallToolResponse.fromPartial({
        content: "2 files", durationMs: 5,
        innerCalls: [
          { name: "glob", arguments: '{"pattern":"*"}', content: "a\nb", isError: false, durationMs: 1 },
          { name: "read", arguments: '{"path":"nope"}', content: "no such file", isError: true, durationMs: 1 },
        ],
      });
    }
    return CallToolResponse.fromPartial({ content: `ran ${req.name} in ${req.sandboxMode}`, isError: false, durationMs: 1 });
  });
});

afterEach(async () => {
  await Promise.all(loops.map((l) => l.stop()));
  loops = [];
  replies = [];
  requests = [];
  ran = [];
  lists = [];
});

afterAll(async () => {
  await removeNamespace(bus.nc, bus.names.namespace);
  await bus.close();
});

async function startLoop(options: Partial<LoopOptions> = {}): Promise<LoopService> {
  const loop = await startLoopService({ natsUrl: NATS_URL, namespace, leaseTtlMs: 1_000, prewarmSandbox: false, ...options });
  loops.push(loop);
  return loop;
}

async function session(fields: Partial<CreateSessionRequest> = {}): Promise<string> {
  const created = await bus.request(LoopRpc.CreateSession, CreateSessionRequest.fromPartial({
    tenant: "local", model: "scripted:test", workspace, sandboxMode: "workspace-write", ...fields,
  }));
  return created.sessionId;
}

async function submit(sessionId: string, text = "go"): Promise<void> {
  await bus.request(LoopRpc.SubmitMessage, { tenant: "local", sessionId, text });
}

/** Sends a request the way the gateway does: to the owner, or to any loop when none owns the session. */
async function viaLoop<Req, Res>(rpc: Rpc<Req, Res, false, "session">, sessionId: string, request: Req): Promise<Res> {
  try {
    return await bus.request(rpc.at({ session: sessionId }), request, { timeoutMs: 10_000 });
  } catch (error) {
    if (!(error instanceof TackError && error.code === "bus.no_responders")) throw error;
    return bus.request(rpc, request, { timeoutMs: 10_000 });
  }
}

function answer(sessionId: string, fields: Partial<DecideApprovalRequest>): Promise<DecideApprovalResponse> {
  const request = DecideApprovalRequest.fromPartial({ tenant: "local", sessionId, decidedBy: "tester", ...fields });
  return viaLoop(LoopRpc.DecideApproval, sessionId, request);
}

function answerQuestion(sessionId: string, fields: Partial<AnswerQuestionRequest>): Promise<AnswerQuestionResponse> {
  const request = AnswerQuestionRequest.fromPartial({ tenant: "local", sessionId, decidedBy: "tester", ...fields });
  return viaLoop(LoopRpc.AnswerQuestion, sessionId, request);
}

function decidePlan(sessionId: string, fields: Partial<DecidePlanRequest>): Promise<DecidePlanResponse> {
  const request = DecidePlanRequest.fromPartial({ tenant: "local", sessionId, decidedBy: "tester", ...fields });
  return viaLoop(LoopRpc.DecidePlan, sessionId, request);
}

function setPlanMode(sessionId: string, on: boolean): Promise<SetPlanModeResponse> {
  return bus.request(LoopRpc.SetPlanMode, { tenant: "local", sessionId, on, changedBy: "tester" });
}

function setSessionMode(sessionId: string, mode: string): Promise<SetSessionModeResponse> {
  return bus.request(LoopRpc.SetSessionMode, { tenant: "local", sessionId, mode, changedBy: "tester" });
}

function waitFor(sessionId: string, done: (events: Event[]) => boolean, timeoutMs = 15_000): Promise<Event[]> {
  return waitForValue(`the log of ${sessionId} to reach the expected state`, async () => {
    const events = await readAll(bus.nc, bus.names, { tenant: "local", sessionId });
    return done(events) && events;
  }, { timeoutMs, intervalMs: 30 });
}

const has = (type: string, count = 1) => (events: Event[]) => events.filter((e) => e.type === type).length >= count;
const results = (events: Event[]) => Object.fromEntries(events.flatMap((e) => (e.payload?.$case === "toolResult" ? [[e.payload.value.callId, e.payload.value.content]] : [])));
const payloads = <C extends EventPayloadCase>(events: Event[], c: C): Array<PayloadOf<C>> =>
  events.filter((e): e is EventOf<C> => isCase(e, c)).map((e) => e.payload.value as PayloadOf<C>);
/** The tool message of call `id` in the last model request, as the model read it. */
const seenByModel = (id: string) => requests.at(-1)!.messages.find((m) => m.role === Role.ROLE_TOOL && m.toolCallId === id)?.content;

const questions = [
  { header: "Language", question: "Which language should the CLI use?", options: [{ label: "TypeScript", description: "like the rest" }, { label: "Go" }] },
  { header: "Extras", question: "Which extras?", options: [{ label: "tests" }, { label: "docs" }, { label: "ci" }], multi_select: true },
];

describe("session tools", () => {
  it("todo_write - each call logs the whole list; bad arguments are refused by the tool's own schema and log nothing", async () => {
    await startLoop();
    const list = [{ content: "read the code", status: "completed" }, { content: "write the fix", status: "in_progress", id: "fix" }, { content: "run the tests", status: "pending" }];
    replies = [
      [{ name: "todo_write", args: { todos: list.slice(0, 2) } }],
      [{ name: "todo_write", args: { todos: list } }, { name: "todo_write", args: { todos: [{ content: "x", status: "done" }] } }],
    ];
    const id = await session();
    await submit(id);
    const events = await waitFor(id, has("turn/end"));
    expect(payloads(events, "todoUpdated")).toEqual([
      { callId: "call_0_0", items: list.slice(0, 2).map((i) => ({ id: "", ...i })), turn: 1, step: 1 },
      { callId: "call_1_0", items: list.map((i) => ({ id: "", ...i })), turn: 1, step: 2 },
    ]);
    expect(results(events)).toEqual({
      call_0_0: "Task list updated: 2 tasks (1 in progress, 0 pending, 1 completed).",
      call_1_0: "Task list updated: 3 tasks (1 in progress, 1 pending, 1 completed).",
      call_1_1: 'Invalid arguments for todo_write: todos.0.status: Invalid option: expected one of "pending"|"in_progress"|"completed"',
    });
    // Carried out by the loop: nothing reached the tools service.
    expect(ran).toEqual([]);
  });

  it("ask_user_question - asked, answered over the bus, and the answers are the result the model reads", async () => {
    await startLoop();
    replies = [[{ name: "ask_user_question", args: { questions } }]];
    const id = await session();
    await submit(id);
    const asked = await waitFor(id, has("question/asked"));
    expect(payloads(asked, "questionAsked")[0]).toEqual({
      callId: "call_0_0", turn: 1, step: 1, questions: [
        { header: "Language", question: "Which language should the CLI use?", multiSelect: false, options: [{ label: "TypeScript", description: "like the rest" }, { label: "Go", description: "" }] },
        { header: "Extras", question: "Which extras?", multiSelect: true, options: [{ label: "tests", description: "" }, { label: "docs", description: "" }, { label: "ci", description: "" }] },
      ],
    });
    expect(asked.some((e) => e.type === "turn/end")).toBe(false);
    // Answers that do not fit the questions are refused, and the call keeps waiting.
    await expect(answerQuestion(id, { callId: "call_0_0", answers: [{ selected: ["Rust"], other: "" }, { selected: [], other: "" }] }))
      .rejects.toMatchObject({ code: "loop.bad_answer", message: expect.stringContaining('answer 1: "Rust" is not an option of "Language"') });
    await expect(answerQuestion(id, { callId: "call_0_0", answers: [{ selected: ["Go"], other: "" }] }))
      .rejects.toMatchObject({ code: "loop.bad_answer", message: expect.stringContaining("1 answer given for 2 questions") });
    await expect(answerQuestion(id, { callId: "call_0_0", answers: [{ selected: ["Go", "TypeScript"], other: "" }, { selected: ["ci"], other: "" }] }))
      .rejects.toMatchObject({ code: "loop.bad_answer", message: expect.stringContaining('"Language" takes one option, got 2') });
    await expect(answerQuestion(id, { callId: "call_9_9", answers: [] })).rejects.toMatchObject({ code: "loop.no_pending_question" });

    const { seq } = await answerQuestion(id, { callId: "call_0_0", answers: [{ selected: ["Go"], other: "" }, { selected: ["tests", "ci"], other: "and a README" }] });
    const events = await waitFor(id, has("turn/end"));
    expect(events.find((e) => e.seq === seq)?.payload).toEqual({ $case: "questionAnswered", value: {
      callId: "call_0_0", outcome: "answered", answeredBy: "tester", answers: [{ selected: ["Go"], other: "" }, { selected: ["tests", "ci"], other: "and a README" }],
    } });
    const expected = [
      "The user answered:",
      "1. Language: Which language should the CLI use?",
      "   -> Go",
      "2. Extras: Which extras?",
      "   -> tests, ci; in their own words: and a README",
    ].join("\n");
    expect(results(events).call_0_0).toBe(expected);
    expect(seenByModel("call_0_0")).toBe(expected);
    await expect(answerQuestion(id, { callId: "call_0_0", answers: [] })).rejects.toMatchObject({ code: "loop.no_pending_question" });
  });

  it("rolling upgrade - a question, a plan or a mode sent in the retired shapes (DecideApproval kind, SetSandboxMode setting) is refused naming the rpc to use; the call keeps waiting", async () => {
    await startLoop();
    replies = [[{ name: "ask_user_question", args: { questions } }]];
    const id = await session();
    await submit(id);
    await waitFor(id, has("question/asked"));
    // What a gateway older than AnswerQuestion sent: kind (field 6) and the answers (field 7, an Answers message), to either subject.
    const legacyAnswer: Codec<DecideApprovalRequest> = {
      encode: (message, writer) => {
        const w = DecideApprovalRequest.encode(message, writer).uint32(58).fork();
        QuestionAnswer.encode({ selected: ["Go"], other: "" }, w.uint32(10).fork()).join();
        return w.join();
      },
      decode: DecideApprovalRequest.decode,
    };
    const old = DecideApprovalRequest.fromPartial({ tenant: "local", sessionId: id, callId: "call_0_0", decidedBy: "tester", retiredKind: "question" });
    for (const rpc of [LoopRpc.DecideApproval.at({ session: id }), LoopRpc.DecideApproval]) {
      await expect(bus.request({ ...rpc, requestType: legacyAnswer }, old, { timeoutMs: 10_000 })).rejects.toMatchObject({
        code: "loop.outdated_request", message: expect.stringMatching(/^DecideApproval with kind "question" .* rpc AnswerQuestion \(loop\.answer\)\. Upgrade the gateway/),
      });
    }
    await expect(answer(id, { retiredKind: "plan", decision: "approve" })).rejects.toMatchObject({ code: "loop.outdated_request", message: expect.stringContaining("rpc DecidePlan (loop.decide_plan)") });
    await expect(answer(id, { retiredKind: "maybe", decision: "allow_once" })).rejects.toMatchObject({ code: "loop.bad_decision" });
    const mode = (setting: string) => bus.request(LoopRpc.SetSandboxMode, { tenant: "local", sessionId: id, mode: "on", changedBy: "tester", retiredSetting: setting });
    await expect(mode("plan")).rejects.toMatchObject({ code: "loop.outdated_request", message: expect.stringContaining("SetSandboxMode with setting \"plan\"") });
    await expect(mode("session")).rejects.toMatchObject({ code: "loop.outdated_request", message: expect.stringContaining("rpc SetSessionMode (loop.session_mode)") });
    // Nothing was logged for them: the question still waits and is answered by the new rpc.
    const { seq } = await answerQuestion(id, { callId: "call_0_0", answers: [{ selected: ["Go"], other: "" }, { selected: ["tests"], other: "" }] });
    const events = await waitFor(id, has("turn/end"));
    expect(events.filter((e) => e.type === "question/answered").map((e) => e.seq)).toEqual([seq]);
  });

  it("ask_user_question - a question pending across a loop restart is answered on the new process and asked only once", async () => {
    const first = await startLoop();
    replies = [[{ name: "ask_user_question", args: { questions: questions.slice(0, 1) } }, { name: "todo_write", args: { todos: [] } }]];
    const id = await session();
    await submit(id);
    await waitFor(id, (e) => has("question/asked")(e) && has("tool/result")(e));
    await first.stop();
    loops = loops.filter((l) => l !== first);
    const second = await startLoop({ leaseTtlMs: 10_000 });
    await answerQuestion(id, { callId: "call_0_0", answers: [{ selected: [], other: "whatever you think" }] });
    const events = await waitFor(id, has("turn/end"));
    const recovery = payloads(events, "recovery")[0];
    expect(recovery).toMatchObject({ previousOwner: first.owner, owner: second.owner, interruptedCallIds: [], unstartedCallIds: [] });
    expect(events.filter((e) => e.type === "question/asked")).toHaveLength(1);
    expect(events.filter((e) => e.type === "todo/updated")).toHaveLength(1);
    expect(seenByModel("call_0_0")).toBe("The user answered:\n1. Language: Which language should the CLI use?\n   -> in their own words: whatever you think");
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
    expect(events.at(-1)!.payload).toMatchObject({ $case: "turnEnd", value: { reason: "completed" } });
  });

  it("ask_user_question - no answer in time is unavailable; stopping the turn cancels it", async () => {
    const loop = await startLoop({ approvalTimeoutMs: 300 });
    replies = [[{ name: "ask_user_question", args: { questions: questions.slice(0, 1) } }]];
    const id = await session();
    await submit(id);
    const events = await waitFor(id, has("turn/end"));
    expect(payloads(events, "questionAnswered")).toEqual([{ callId: "call_0_0", outcome: "unavailable", answers: [], answeredBy: "timeout" }]);
    expect(results(events).call_0_0).toBe(SESSION_TOOL_TEXT.questionUnavailable);

    await loop.stop();
    loops = [];
    await startLoop();
    const other = await session();
    await submit(other);
    await waitFor(other, has("question/asked"));
    const owner = loops[0]!.session(other)!;
    await owner.stopTurn("tester");
    const stopped = await waitFor(other, has("turn/end"));
    expect(payloads(stopped, "questionAnswered")).toEqual([{ callId: "call_0_0", outcome: "cancelled", answers: [], answeredBy: "tester" }]);
    expect(stopped.at(-1)!.payload).toMatchObject({ $case: "turnEnd", value: { reason: "cancelled" } });
  });

  it("plan mode - tools that can write are refused, reading ones run; a rejected plan keeps it, an approved one ends it", async () => {
    await startLoop();
    const bash = { name: "bash", args: { command: "touch x" } };
    replies = [
      [bash, { name: "write", args: { path: "f", content: "x" } }, { name: "read", args: { path: "f" } }, { name: "bash", args: { command: "curl x", sandbox_permissions: "danger-full-access", justification: "j" } }],
      [{ name: "exit_plan_mode", args: { plan: "1. touch x" } }],
      [bash],
      [{ name: "exit_plan_mode", args: { plan: "1. touch x\n2. test it" } }],
      [bash],
      [{ name: "exit_plan_mode", args: { plan: "again" } }],
    ];
    const id = await session({ planMode: true });
    await submit(id);
    await waitFor(id, has("plan/submitted"));
    const first = await readAll(bus.nc, bus.names, { tenant: "local", sessionId: id });
    expect(payloads(first, "planMode")).toEqual([{ on: true, changedBy: "session" }]);
    expect(results(first)).toEqual({
      call_0_0: SESSION_TOOL_TEXT.planModeRefused("bash"),
      call_0_1: SESSION_TOOL_TEXT.planModeRefused("write"),
      call_0_2: "ran read in workspace-write",
      call_0_3: SESSION_TOOL_TEXT.planModeEscalation,
    });
    expect(payloads(first, "planSubmitted")).toEqual([{ callId: "call_1_0", plan: "1. touch x", turn: 1, step: 2 }]);

    await decidePlan(id, { approve: false, feedback: "also run the tests" });
    await waitFor(id, has("plan/submitted", 2));
    const rejected = await readAll(bus.nc, bus.names, { tenant: "local", sessionId: id });
    expect(results(rejected).call_1_0).toBe(SESSION_TOOL_TEXT.planRejected("also run the tests"));
    expect(results(rejected).call_2_0).toBe(SESSION_TOOL_TEXT.planModeRefused("bash"));

    // No call id: the plan waiting is the one decided.
    const { seq } = await decidePlan(id, { approve: true, feedback: "" });
    const events = await waitFor(id, has("turn/end"));
    const decided = events.findIndex((e) => e.seq === seq);
    expect(events[decided]!.payload).toEqual({ $case: "planDecided", value: { callId: "call_3_0", decision: "approve", feedback: "", decidedBy: "tester" } });
    expect(events[decided + 1]!.payload).toEqual({ $case: "planMode", value: { on: false, changedBy: "tester" } });
    expect(results(events).call_3_0).toBe(SESSION_TOOL_TEXT.planApproved(""));
    expect(results(events).call_4_0).toBe("ran bash in workspace-write");
    // Out of plan mode, exit_plan_mode has nothing to ask.
    expect(results(events).call_5_0).toBe(SESSION_TOOL_TEXT.notInPlanMode);
    expect(ran.map((r) => r.callId)).toEqual(["call_0_2", "call_4_0"]);
    await expect(decidePlan(id, { approve: true })).rejects.toMatchObject({ code: "loop.no_pending_plan" });
  });

  it("plan mode - entered later over the bus; in a read-only sandbox bash still runs (the sandbox keeps it from writing)", async () => {
    await startLoop();
    replies = [[{ name: "bash", args: { command: "ls" } }, { name: "edit", args: { path: "f", old_string: "a", new_string: "b" } }]];
    const id = await session({ sandboxMode: "read-only" });
    expect((await setPlanMode(id, true)).seq).toBeGreaterThan(0);
    expect((await setPlanMode(id, true)).seq).toBe(0);
    await submit(id);
    const events = await waitFor(id, has("turn/end"));
    expect(payloads(events, "planMode")).toEqual([{ on: true, changedBy: "tester" }]);
    expect(results(events)).toEqual({ call_0_0: "ran bash in read-only", call_0_1: "ran edit in read-only" });
  });

  it("session_search - finds text of earlier turns by substring or regex, never the searching call itself", async () => {
    await startLoop();
    replies = [[{ name: "bash", args: { command: "echo Needle-42" } }], [], [{ name: "session_search", args: { query: "needle-\\d+", regex: true } }], [{ name: "session_search", args: { query: "(a" , regex: true } }]];
    const id = await session();
    await submit(id, "remember the NEEDLE-7 please");
    await waitFor(id, has("turn/end"));
    await submit(id, "what was the needle?");
    const events = await waitFor(id, has("turn/end", 2));
    const userSeq = events.find((e) => e.type === "user/message")!.seq;
    const callSeq = events.find((e) => e.type === "assistant/message")!.seq;
    expect(results(events).call_2_0).toBe([
      "2 matches:",
      `seq ${userSeq} (user): remember the NEEDLE-7 please`,
      `seq ${callSeq} (assistant call bash): {"command":"echo Needle-42"}`,
    ].join("\n"));
    expect(results(events).call_3_0).toMatch(/^Invalid arguments for session_search: query is not a regular expression the linear-time engine \(RE2\) accepts: .+; fix it or set regex to false$/);
  });

  it("session_search - searches what a summary took out of the model's view; a catastrophic regular expression runs in linear time", () => {
    const events: Event[] = [
      Event.fromPartial({ seq: 1, type: "user/message", payload: { $case: "userMessage", value: { text: "the secret word is marmalade" } } }),
      Event.fromPartial({ seq: 2, type: "tool/result", payload: { $case: "toolResult", value: { callId: "c1", name: "read", content: `line\n${"x".repeat(500)} MARMALADE jar ${"y".repeat(500)}` } } }),
      // A summary replaces seqs 1-2 in the model's view.
      Event.fromPartial({ seq: 3, type: "user/message", surface: { kind: Surface_Kind.KIND_REPLACE, replaceFromSeq: 1, replaceToSeq: 2 }, payload: { $case: "userMessage", value: { text: "summary: a word was given" } } }),
      Event.fromPartial({ seq: 4, type: "request/header", payload: { $case: "requestHeader", value: { model: "m" } } }),
    ];
    expect(deriveRequest(events).messages.map((m: ChatMessage) => m.content)).toEqual(["summary: a word was given"]);
    const found = searchLog(events, { query: "Marmalade", regex: false, limit: 1, exceptCall: "" });
    expect(found).toEqual({ isError: false, content: `2 matches; the last 1:\nseq 2 (read result): ...${"x".repeat(119)} MARMALADE jar ${"y".repeat(106)}...` });
    expect(searchLog(events, { query: "quince", regex: false, limit: 5, exceptCall: "" })).toEqual({ isError: false, content: 'No matches for "quince" in this session.' });
    // Exponential on a backtracking engine (it held the loop until a vm timeout); RE2 answers at once, over a long history too.
    const slow = [Event.fromPartial({ seq: 1, payload: { $case: "userMessage", value: { text: `${"a".repeat(100_000)}b` } } })];
    const started = Date.now();
    expect(searchLog(slow, { query: "(a+)+$", regex: true, limit: 5, exceptCall: "" })).toEqual({ isError: false, content: 'No matches for "(a+)+$" in this session.' });
    expect(Date.now() - started).toBeLessThan(1_000);
    expect(searchLog(slow, { query: "a(?=b)", regex: true, limit: 5, exceptCall: "" })).toEqual({
      isError: true,
      content: "Invalid arguments for session_search: query uses a lookahead (`(?=`): patterns here run on a linear-time engine (RE2), which has no backreferences or lookaround; rewrite the pattern without it; fix it or set regex to false",
    });
  });
});

describe("session modes", () => {
  it("modes - the mode is checked with the tools service at creation, logged, and sent with every list and call", async () => {
    await startLoop();
    await expect(session({ mode: "turbo" })).rejects.toMatchObject({
      code: "loop.unknown_mode", message: expect.stringMatching(/^mode "turbo" is unknown; use one of: standard, code\b/),
    });
    replies = [[{ name: "run_code", args: { code: "console.log(1)" } }]];
    const id = await session({ mode: "code" });
    await submit(id);
    const events = await waitFor(id, has("turn/end"));
    expect(payloads(events, "sessionCreated")[0]!.mode).toBe("code");
    expect(payloads(events, "requestHeader")[0]!.tools.map((t) => t.name)).toEqual(["run_code"]);
    // Its own system prompt: how to act through programs.
    expect(payloads(events, "requestHeader")[0]!.systemPrompt).toContain("await tools.<name>({...})");
    expect(ran.map((r) => [r.name, r.sessionMode])).toEqual([["run_code", "code"]]);
    // The calls the program made are logged before the program's own result.
    const inner = events.filter((e) => e.type === "tool/inner");
    expect(inner.map((e) => e.payload)).toEqual([
      { $case: "toolInner", value: { parentCallId: "call_0_0", index: 1, name: "glob", arguments: '{"pattern":"*"}', content: "a\nb", isError: false, durationMs: 1 } },
      { $case: "toolInner", value: { parentCallId: "call_0_0", index: 2, name: "read", arguments: '{"path":"nope"}', content: "no such file", isError: true, durationMs: 1 } },
    ]);
    expect(inner.at(-1)!.seq).toBeLessThan(events.find((e) => e.type === "tool/result")!.seq);
  });

  it("creator - a defined tool is logged (tool/defined), then listed and callable, also by the next loop process after a restart", async () => {
    await startLoop();
    const shout = {
      name: "shout", description: "Upper-cases text", parameters: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
      language: "python3", code: "import json, sys\nprint(json.load(sys.stdin)['text'].upper())",
    };
    replies = [[{ name: "define_tool", args: shout }], [{ name: "shout", args: { text: "hi" } }]];
    const id = await session({ mode: "creator" });
    await submit(id);
    let events = await waitFor(id, has("turn/end"));
    expect(payloads(events, "toolDefined")).toEqual([{
      callId: "call_0_0", name: "shout", description: "Upper-cases text", parametersJson: JSON.stringify(shout.parameters), language: "python3", code: shout.code,
    }]);
    expect(results(events).call_1_0).toContain("HI");
    // Listed after the mode's own tools from the step after its definition on, and sent with the call.
    const headers = payloads(events, "requestHeader");
    expect(headers[0]!.tools.map((t) => t.name)).not.toContain("shout");
    expect(headers.at(-1)!.tools.at(-1)!.name).toBe("shout");
    expect(ran.find((r) => r.name === "shout")!.defined?.tools.map((t) => t.name)).toEqual(["shout"]);

    // A new loop process knows it from the log alone.
    await Promise.all(loops.map((l) => l.stop()));
    loops = [];
    lists = [];
    await startLoop();
    replies[3] = [{ name: "shout", args: { text: "again" } }];
    await submit(id, "once more");
    events = await waitFor(id, has("turn/end", 2));
    expect(lists.length).toBeGreaterThan(0);
    for (const list of lists) expect(list.defined?.tools.map((t) => t.name)).toEqual(["shout"]);
    expect(results(events).call_3_0).toContain("AGAIN");
  });

  it("modes - changed only before the first message; after it the change is refused with the mode it stays in", async () => {
    await startLoop();
    replies = [[{ name: "run_code", args: { code: "1" } }]];
    const id = await session();
    await expect(setSessionMode(id, "turbo")).rejects.toMatchObject({ code: "loop.unknown_mode" });
    expect((await setSessionMode(id, "code")).seq).toBeGreaterThan(0);
    expect((await setSessionMode(id, "code")).seq).toBe(0);
    await submit(id);
    const events = await waitFor(id, has("turn/end"));
    expect(payloads(events, "sessionMode")).toEqual([{ mode: "code", changedBy: "tester" }]);
    expect(ran.map((r) => [r.name, r.sessionMode])).toEqual([["run_code", "code"]]);
    await expect(setSessionMode(id, "standard")).rejects.toMatchObject({
      code: "loop.mode_fixed", message: `session ${id} already has messages, so its mode stays code; create a new session with mode standard`,
    });
  });

  it("modes - what a sandbox mode can deny a tool, and the operation a person approves, come from its ToolSpec", async () => {
    await startLoop();
    replies = [[
      { name: "read", args: { path: "f", sandbox_permissions: "danger-full-access", justification: "j" } },
      { name: "deploy", args: { target: "prod", sandbox_permissions: "danger-full-access", justification: "ship it" } },
    ]];
    const id = await session();
    await submit(id);
    const asked = await waitFor(id, (e) => has("approval/asked")(e) && has("tool/result")(e));
    expect(payloads(asked, "approvalAsked")[0]).toMatchObject({ callId: "call_0_1", toolName: "deploy", operation: "prod", currentMode: "workspace-write", requestedMode: "danger-full-access" });
    // read declares nothing a mode can deny: there is no wider mode for it to ask for.
    expect(results(asked).call_0_0).toBe(APPROVAL_TEXT.notNarrowest("read", "danger-full-access", "workspace-write", []));
    await answer(id, { callId: "call_0_1", decision: "allow_once" });
    const events = await waitFor(id, has("turn/end"));
    expect(results(events).call_0_1).toBe(`${APPROVAL_TEXT.allowedOnce("danger-full-access", "workspace-write")}\nran deploy in danger-full-access`);
  });
});
