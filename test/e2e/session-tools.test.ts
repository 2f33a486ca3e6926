// End to end: the session tools (task list, questions, plan mode) and session modes through
// every service process (the launcher `tack up` uses), the machine's NATS JetStream and real
// Docker sandboxes, driven over the HTTP API with a scripted model.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SESSION_TOOL_TEXT } from "@tack/loop-service";
import { ApiStack, type EventJson } from "./support/api-stack.js";

let stack: ApiStack;
const workspace = (name: string) => stack.workspace(name);
const script = (name: string, replies: unknown[]) => stack.script(name, replies);
const api = (path: string, init?: RequestInit & { json?: unknown }) => stack.api(path, init);
const events = (id: string) => stack.events(id);
const logWhen = (id: string, what: string, done: (e: EventJson[]) => boolean, timeoutMs?: number) => stack.logWhen(id, what, done, timeoutMs);

/** Sends a request and returns its status and JSON body. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- response bodies of many shapes, each checked by the assertions that read them
async function call(method: string, path: string, json?: unknown): Promise<{ status: number; body: any }> {
  const res = await api(path, { method, json });
  return { status: res.status, body: await res.json() };
}

const count = (type: string, n = 1) => (e: EventJson[]) => e.filter((x) => x.type === type).length >= n;
const resultOf = (e: EventJson[], callId: string) => e.find((x) => x.type === "tool/result" && x.toolResult!.callId === callId)?.toolResult;

async function create(name: string, model: string, extra: Record<string, unknown> = {}): Promise<{ id: string; ws: string }> {
  const ws = workspace(name);
  const created = await call("POST", "/v1/sessions", { workspace: ws, model, ...extra });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  return { id: created.body.id as string, ws };
}

const question = { header: "Runtime", question: "Which runtime?", options: [{ label: "node" }, { label: "deno" }] };

beforeAll(async () => {
  stack = await ApiStack.launch("session-tools");
}, 120_000);

afterAll(() => stack?.stop());

describe("session tools end to end", () => {
  it("e2e - the task list and a pending question show on the session; the answer posted over the API reaches the model", async () => {
    const model = script("ask", [
      { tool_calls: [{ name: "todo_write", arguments: { todos: [{ content: "pick a runtime", status: "in_progress" }, { content: "scaffold", status: "pending" }] } }] },
      { tool_calls: [{ name: "ask_user_question", arguments: { questions: [question] } }] },
      { content: "Using the answer." },
    ]);
    const { id } = await create("ask", model);
    expect((await call("POST", `/v1/sessions/${id}/messages`, { text: "start a project" })).status).toBe(202);
    await logWhen(id, "a question to be asked", count("question/asked"));

    const state = await call("GET", `/v1/sessions/${id}`);
    expect(state.body).toMatchObject({
      mode: "standard", plan_mode: false,
      todos: [{ content: "pick a runtime", status: "in_progress" }, { content: "scaffold", status: "pending" }],
      waiting: [{ kind: "question", call_id: "call_1_0", questions: [{ header: "Runtime", question: "Which runtime?", multi_select: false, options: [{ label: "node", description: "" }, { label: "deno", description: "" }] }] }],
    });
    expect((await call("GET", `/v1/sessions/${id}/todos`)).body).toEqual({ todos: state.body.todos });

    const bad = await call("POST", `/v1/sessions/${id}/questions/call_1_0`, { answers: [{ selected: ["bun"] }] });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatchObject({ code: "loop.bad_answer", message: expect.stringContaining('"bun" is not an option of "Runtime"') });
    expect((await call("POST", `/v1/sessions/${id}/questions/call_1_0`, { answer: "node" })).status).toBe(400);
    expect((await call("POST", `/v1/sessions/${id}/questions/call_9_9`, { answers: [{ selected: ["node"] }] })).status).toBe(404);

    const answered = await call("POST", `/v1/sessions/${id}/questions/call_1_0`, { answers: [{ selected: ["deno"], other: "with TypeScript" }] });
    expect(answered.status, JSON.stringify(answered.body)).toBe(200);
    const done = await logWhen(id, "the turn to end", count("turn/end"));
    expect(resultOf(done, "call_1_0")).toMatchObject({ content: "The user answered:\n1. Runtime: Which runtime?\n   -> deno; in their own words: with TypeScript" });
    expect(done.at(-1)!.turnEnd).toMatchObject({ reason: "completed" });
    expect((await call("GET", `/v1/sessions/${id}`)).body.waiting).toEqual([]);
    // Answered once: a second answer finds nothing waiting.
    expect((await call("POST", `/v1/sessions/${id}/questions/call_1_0`, { answers: [{ selected: ["node"] }] })).status).toBe(404);
  });

  it("e2e - the loop is SIGKILLed while a question waits: the answer still completes the turn", async () => {
    const model = script("restart", [{ tool_calls: [{ name: "ask_user_question", arguments: { questions: [question] } }] }, { content: "ok" }]);
    const { id } = await create("restart", model);
    expect((await call("POST", `/v1/sessions/${id}/messages`, { text: "go" })).status).toBe(202);
    await logWhen(id, "a question to be asked", count("question/asked"));
    await stack.tack.kill("loop", "SIGKILL");
    await stack.tack.start("loop");
    const answered = await call("POST", `/v1/sessions/${id}/questions/call_0_0`, { answers: [{ selected: ["node"] }] });
    expect(answered.status, JSON.stringify(answered.body)).toBe(200);
    const done = await logWhen(id, "the turn to end", count("turn/end"));
    expect(done.some((e) => e.type === "session/recovered")).toBe(true);
    expect(done.filter((e) => e.type === "question/asked")).toHaveLength(1);
    expect(resultOf(done, "call_0_0")).toMatchObject({ content: "The user answered:\n1. Runtime: Which runtime?\n   -> node" });
    expect(done.map((e) => e.seq)).toEqual(done.map((_, i) => i + 1));
  });

  it("e2e - plan mode: write is refused, a rejected plan gets the feedback, an approved one ends plan mode and the file is written", async () => {
    const write = { name: "write", arguments: { path: "plan.txt", content: "carried out\n" } };
    const model = script("plan", [
      { tool_calls: [write] },
      { tool_calls: [{ name: "exit_plan_mode", arguments: { plan: "1. write plan.txt" } }] },
      { tool_calls: [{ name: "exit_plan_mode", arguments: { plan: "1. write plan.txt\n2. check it" } }] },
      { tool_calls: [write] },
      { content: "Done." },
    ]);
    const { id, ws } = await create("plan", model, { plan_mode: true });
    expect((await call("GET", `/v1/sessions/${id}`)).body.plan_mode).toBe(true);
    expect((await call("POST", `/v1/sessions/${id}/messages`, { text: "write the plan file" })).status).toBe(202);
    const first = await logWhen(id, "a plan to be submitted", count("plan/submitted"));
    expect(resultOf(first, "call_0_0")).toMatchObject({ isError: true, content: SESSION_TOOL_TEXT.planModeRefused("write") });
    expect((await call("GET", `/v1/sessions/${id}`)).body.waiting).toEqual([{ kind: "plan", call_id: "call_1_0", plan: "1. write plan.txt", seq: expect.any(Number) }]);

    expect((await call("POST", `/v1/sessions/${id}/plan`, { approve: "yes" })).status).toBe(400);
    expect((await call("POST", `/v1/sessions/${id}/plan`, { approve: false, feedback: "check the file afterwards" })).status).toBe(200);
    await logWhen(id, "the second plan", count("plan/submitted", 2));
    expect(resultOf(await events(id), "call_1_0")).toMatchObject({ isError: true, content: SESSION_TOOL_TEXT.planRejected("check the file afterwards") });
    expect(existsSync(join(ws, "plan.txt"))).toBe(false);

    expect((await call("POST", `/v1/sessions/${id}/plan`, { approve: true })).status).toBe(200);
    const done = await logWhen(id, "the turn to end", count("turn/end"), 120_000);
    expect(resultOf(done, "call_2_0")).toMatchObject({ content: SESSION_TOOL_TEXT.planApproved("") });
    expect(resultOf(done, "call_3_0")!.isError).toBeUndefined();
    expect(readFileSync(join(ws, "plan.txt"), "utf8")).toBe("carried out\n");
    expect((await call("GET", `/v1/sessions/${id}`)).body.plan_mode).toBe(false);
    expect((await call("POST", `/v1/sessions/${id}/plan`, { approve: true })).status).toBe(404);
  });
});

describe("session modes end to end", () => {
  it("e2e - an unknown mode is 400 naming the valid ones; a mode is logged at creation and changes only before the first message", async () => {
    const model = script("modes", [{ content: "hi" }]);
    const unknown = await call("POST", "/v1/sessions", { workspace: workspace("turbo"), model, mode: "turbo" });
    expect(unknown.status).toBe(400);
    expect(unknown.body.error).toMatchObject({ code: "loop.unknown_mode", message: expect.stringMatching(/^mode "turbo" is unknown; use one of: standard, code/) });

    const { id } = await create("modes", model, { mode: "code" });
    const log = await events(id);
    expect(log[0]!.sessionCreated).toMatchObject({ mode: "code" });
    expect((await call("GET", `/v1/sessions/${id}`)).body.mode).toBe("code");
    expect(await call("POST", `/v1/sessions/${id}/mode`, { mode: "turbo" })).toMatchObject({ status: 400, body: { error: { code: "loop.unknown_mode" } } });
    expect(await call("POST", `/v1/sessions/${id}/mode`, { mode: "standard" })).toMatchObject({ status: 200, body: { mode: "standard" } });
    expect((await call("GET", `/v1/sessions/${id}`)).body.mode).toBe("standard");

    expect((await call("POST", `/v1/sessions/${id}/messages`, { text: "hello" })).status).toBe(202);
    await logWhen(id, "the turn to end", count("turn/end"));
    const refused = await call("POST", `/v1/sessions/${id}/mode`, { mode: "code" });
    expect(refused.status).toBe(409);
    expect(refused.body.error).toMatchObject({ code: "loop.mode_fixed", message: `session ${id} already has messages, so its mode stays standard; create a new session with mode code` });
    expect((await call("GET", `/v1/sessions/${id}`)).body.mode).toBe("standard");
  });
});
