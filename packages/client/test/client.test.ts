// @tack/client against a real gateway: every service process (the launcher `tack up` uses) on the
// machine's NATS JetStream and Docker sandboxes, a scripted model, and a loopback TCP proxy in front
// of the gateway that the reconnect test cuts in the middle of a turn.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TackApiError, TackClient, type EventJson, type StreamState } from "@tack/client";
import { CuttableProxy } from "@tack/testkit";
import { ApiStack } from "../../../test/e2e/support/api-stack.js";

let stack: ApiStack;
let client: TackClient;

beforeAll(async () => {
  stack = await ApiStack.launch("client");
  client = new TackClient({ baseUrl: stack.tack.gatewayUrl, apiKey: stack.tack.apiKey });
}, 120_000);

afterAll(() => stack?.stop());

/** The TackApiError a call fails with (a call that succeeds fails the test). */
async function failure(promise: Promise<unknown>): Promise<TackApiError> {
  const outcome = await promise.then(() => undefined, (e: unknown) => e);
  if (!(outcome instanceof TackApiError)) throw new Error(`expected a TackApiError, got ${String(outcome)}`);
  return outcome;
}

async function newSession(name: string, replies: unknown[], extra: Record<string, unknown> = {}) {
  return client.createSession({ workspace: stack.workspace(name), model: stack.script(name, replies), title: name, ...extra });
}

async function untilTurnEnd(id: string, turns = 1): Promise<EventJson[]> {
  const seen: EventJson[] = [];
  for await (const event of client.events(id, { signal: AbortSignal.timeout(60_000) })) {
    seen.push(event);
    if (seen.filter((e) => e.type === "turn/end").length >= turns) break;
  }
  return seen;
}

describe("@tack/client against a real gateway", () => {
  it("sessions: create, list, get, messages, events (list and stream), usage, context, todos, delete", async () => {
    const created = await newSession("basic", [
      { tool_calls: [{ name: "todo_write", arguments: { todos: [{ content: "say hello", status: "in_progress" }] } }] },
      { content: "Hello from the script." },
    ]);
    expect(created).toMatchObject({ title: "basic", mode: "standard", plan_mode: false, archived: false, sandbox_mode: "workspace-write" });
    expect(created.id).toMatch(/\S/);

    const listed = await client.listSessions({ limit: 200 });
    expect(listed.sessions.map((s) => s.id)).toContain(created.id);
    const all: string[] = [];
    for await (const s of client.allSessions({}, 1)) all.push(s.id);
    expect(all).toContain(created.id);

    // Before any model request the context meter has nothing to measure.
    expect(await client.context(created.id)).toMatchObject({ tokens: null });

    const posted = await client.postMessage(created.id, "say hello");
    expect(posted.turn).toBe(1);
    const streamed = await untilTurnEnd(created.id);
    expect(streamed.map((e) => e.seq)).toEqual(streamed.map((_, i) => i + 1));
    expect(streamed.find((e) => e.seq === posted.seq)).toMatchObject({ type: "user/message", userMessage: { text: "say hello" } });
    expect(streamed.at(-1)).toMatchObject({ type: "turn/end", turnEnd: { reason: "completed" } });
    expect(streamed.filter((e) => e.type === "assistant/message").at(-1)!.assistantMessage!.content).toBe("Hello from the script.");

    const listedEvents = await client.listEvents(created.id);
    expect(listedEvents).toEqual(streamed.concat(listedEvents.slice(streamed.length)));
    const tail = await client.listEvents(created.id, { from: 3 });
    expect(tail[0]!.seq).toBe(3);
    expect(tail).toEqual(listedEvents.slice(2));

    const detail = await client.getSession(created.id);
    expect(detail).toMatchObject({ id: created.id, todos: [{ content: "say hello", status: "in_progress" }], waiting: [], last_seq: listedEvents.at(-1)!.seq });
    expect(detail.usage.tokens.output).toBeGreaterThan(0);
    expect(await client.todos(created.id)).toEqual([{ content: "say hello", status: "in_progress" }]);

    const size = await client.context(created.id);
    if (size.tokens === null) throw new Error("expected a measured context");
    expect(size.tokens.system_prompt).toBeGreaterThan(0);
    expect(size.tokens.tools).toBeGreaterThan(0);
    expect(size.tokens.total).toBe(size.tokens.system_prompt + size.tokens.tools + size.tokens.conversation);
    expect((await client.usage()).tenant).toBe("local");

    expect(await client.cancelTurn(created.id)).toEqual({ cancelled: false, turn: 0 });
    const bundle = await client.exportSession(created.id);
    expect(bundle.session.id).toBe(created.id);
    expect(bundle.events).toEqual(listedEvents);
    expect((await client.archiveSession(created.id)).archived).toBe(true);
    const archived: string[] = [];
    for await (const s of client.allSessions({ archived: true })) archived.push(s.id);
    expect(archived).toContain(created.id);
    expect((await client.listSessions({ limit: 200 })).sessions.map((s) => s.id)).not.toContain(created.id);
    expect((await client.archiveSession(created.id, false)).archived).toBe(false);
    expect((await client.openapi()).paths["/v1/sessions/{id}/cancel"]).toBeDefined();

    const deleted = await client.deleteSession(created.id);
    expect(deleted).toMatchObject({ id: created.id, deleted: true, audit: { action: "session.delete" } });
    expect(await failure(client.getSession(created.id))).toMatchObject({ status: 404, code: "gateway.session_not_found" });
  });

  it("errors are TackApiError with status, code, message and details", async () => {
    const bad = await failure(client.createSession({ workspace: stack.workspace("bad"), model: "no-colon" }));
    expect(bad).toMatchObject({ status: 400, code: "gateway.invalid_request" });
    expect(bad.message).toContain("model");
    expect(bad.retryable).toBe(false);

    const wrongKey = new TackClient({ baseUrl: stack.tack.gatewayUrl, apiKey: "not-a-key" });
    await expect(wrongKey.listSessions()).rejects.toMatchObject({ status: 401, code: "gateway.invalid_api_key" });
    await expect(client.listSessions({ limit: 0 })).rejects.toMatchObject({ status: 400, code: "gateway.invalid_query" });
    await expect(client.events("nope", { follow: false }).next()).rejects.toMatchObject({ status: 404, code: "gateway.session_not_found" });
    await expect(client.listEvents("nope", { from: 0 })).rejects.toMatchObject({ code: "client.bad_argument" });

    const nowhere = new TackClient({ baseUrl: "http://127.0.0.1:1", apiKey: "k" });
    const unreachable = await failure(nowhere.usage());
    expect(unreachable).toMatchObject({ status: 0, code: "client.unreachable" });
    expect(unreachable.retryable).toBe(true);
    expect(() => new TackClient({ baseUrl: "127.0.0.1:7700", apiKey: "k" })).toThrow(/baseUrl must be the gateway's URL/);
    expect(await client.health()).toEqual({ status: "ok" });
  });

  it("modes before the first message; an escalation approved and a question answered through the client", async () => {
    const question = { header: "Runtime", question: "Which runtime?", options: [{ label: "node" }, { label: "deno" }] };
    const s = await newSession("decide", [
      { tool_calls: [{ name: "bash", arguments: { command: "touch x" } }] },
      { tool_calls: [{ name: "bash", arguments: { command: "touch x", sandbox_permissions: "workspace-write", justification: "the user asked for x" } }] },
      { tool_calls: [{ name: "ask_user_question", arguments: { questions: [question] } }] },
      { content: "Done." },
    ], { sandbox_mode: "read-only" });
    expect(await client.setSessionMode(s.id, "minimal")).toMatchObject({ mode: "minimal" });
    expect(await client.setSessionMode(s.id, "standard")).toMatchObject({ mode: "standard" });
    expect((await client.setPlanMode(s.id, true)).plan_mode).toBe(true);
    expect((await client.setPlanMode(s.id, false)).plan_mode).toBe(false);
    await client.postMessage(s.id, "create x and ask me");
    await expect(client.setSessionMode(s.id, "code")).rejects.toMatchObject({ status: 409, code: "loop.mode_fixed" });

    for await (const event of client.events(s.id, { signal: AbortSignal.timeout(60_000) })) {
      if (event.type === "approval/asked") {
        expect(event.approvalAsked).toMatchObject({ callId: "call_1_0", operation: "touch x", justification: "the user asked for x", requestedMode: "workspace-write" });
        expect((await client.getSession(s.id)).waiting).toMatchObject([{ kind: "approval", call_id: "call_1_0", tool: "bash" }]);
        expect((await client.decideApproval(s.id, "call_1_0", "allow_once")).seq).toBeGreaterThan(event.seq);
      }
      if (event.type === "question/asked") {
        await expect(client.answerQuestion(s.id, event.questionAsked!.callId!, [{ selected: ["bun"] }])).rejects.toMatchObject({ status: 400, code: "loop.bad_answer" });
        expect((await client.answerQuestion(s.id, event.questionAsked!.callId!, [{ selected: ["node"] }])).seq).toBeGreaterThan(event.seq);
      }
      if (event.type === "turn/end") {
        expect(event.turnEnd).toMatchObject({ reason: "completed" });
        break;
      }
    }
    await expect(client.decideApproval(s.id, "call_1_0", "allow_once")).rejects.toMatchObject({ status: 404, code: "loop.no_pending_approval" });
    await expect(client.decidePlan(s.id, { approve: true })).rejects.toMatchObject({ status: 404, code: "loop.no_pending_plan" });
    expect(await client.setSandboxMode(s.id, "workspace-write")).toMatchObject({ sandbox_mode: "workspace-write" });
  });

  it("the event stream is cut in the middle of a turn: it resumes from the last seq with backoff, nothing lost or twice", async () => {
    const proxy = await CuttableProxy.start(new URL(stack.tack.gatewayUrl));
    try {
      const viaProxy = new TackClient({ baseUrl: proxy.url, apiKey: stack.tack.apiKey });
      const s = await newSession("cut", [
        { tool_calls: [{ name: "bash", arguments: { command: "sleep 1.5; echo one" } }] },
        { tool_calls: [{ name: "bash", arguments: { command: "echo two" } }] },
        { content: "Both ran." },
      ]);
      await viaProxy.postMessage(s.id, "run two commands");
      const states: StreamState[] = [];
      const received: EventJson[] = [];
      let cuts = 0;
      for await (const event of viaProxy.events(s.id, { signal: AbortSignal.timeout(60_000), reconnect: { initialDelayMs: 100 }, onState: (st) => states.push(st) })) {
        received.push(event);
        // The first command sleeps: cut while it runs, i.e. mid-turn with events still to come.
        if (event.type === "tool/call" && cuts === 0) cuts += proxy.cut() > 0 ? 1 : 0;
        if (event.type === "turn/end") break;
      }
      expect(cuts).toBe(1);
      const log = await client.listEvents(s.id);
      expect(received.map((e) => e.seq)).toEqual(log.map((e) => e.seq));
      expect(received).toEqual(log);
      const reconnecting = states.filter((st) => st.state === "reconnecting");
      expect(reconnecting.length).toBeGreaterThanOrEqual(1);
      const lastSeqAtCut = received.find((e) => e.type === "tool/call")!.seq;
      expect(reconnecting[0]).toMatchObject({ state: "reconnecting", attempt: 1, delayMs: 100 });
      // The resumed request asked for what came after the last event received.
      const streamRequests = proxy.requests.filter((r) => r.startsWith(`GET /v1/sessions/${s.id}/events`));
      expect(streamRequests.length).toBeGreaterThanOrEqual(2);
      expect(streamRequests[0]!.toLowerCase()).not.toContain("last-event-id");
      expect(streamRequests[1]!.toLowerCase()).toContain(`last-event-id: ${lastSeqAtCut}`);
      expect(states.at(-1)).toMatchObject({ state: "closed" });
    } finally {
      await proxy.close();
    }
  });

  it("cancelTurn stops a running turn: it ends with turn/end cancelled", async () => {
    const s = await newSession("cancel", [
      { tool_calls: [{ name: "bash", arguments: { command: "sleep 2; echo slept" } }] },
      { tool_calls: [{ name: "bash", arguments: { command: "echo never" } }] },
      { content: "never reached" },
    ]);
    await client.postMessage(s.id, "sleep");
    let end: EventJson | undefined;
    for await (const event of client.events(s.id, { signal: AbortSignal.timeout(60_000) })) {
      if (event.type === "tool/call") expect(await client.cancelTurn(s.id)).toEqual({ cancelled: true, turn: 1 });
      if (event.type === "turn/end") {
        end = event;
        break;
      }
    }
    expect(end?.turnEnd).toMatchObject({ reason: "cancelled" });
    const log = await client.listEvents(s.id);
    expect(log.filter((e) => e.type === "tool/call")).toHaveLength(1);
  });

  it("compactSession summarizes the conversation now (context/summarized); right after, there is nothing to compact", async () => {
    const s = await newSession("compact", [{ content: "Read the files." }, { content: "They read files; nothing else is left." }]);
    expect(await client.compactSession(s.id)).toMatchObject({ compacted: false, seq: 0, note: expect.stringContaining("nothing to compact") });
    await client.postMessage(s.id, `read the files ${"and remember them ".repeat(40)}`);
    await untilTurnEnd(s.id);
    const compacted = await client.compactSession(s.id, "keep what was read");
    expect(compacted).toMatchObject({ compacted: true, note: "" });
    expect(compacted.tokens_after).toBeLessThan(compacted.tokens_before);
    const log = await client.listEvents(s.id);
    expect(log.at(-1)).toMatchObject({ seq: compacted.seq, type: "context/summarized" });
    expect(log.at(-2)?.userMessage?.text).toContain("They read files; nothing else is left.");
    expect(await client.compactSession(s.id)).toMatchObject({ compacted: false });
    expect(await failure(client.compactSession("nope"))).toMatchObject({ status: 404, code: "gateway.session_not_found" });
  });

  it("a stream that keeps failing gives up after giveUpAfterMs with the last error", async () => {
    const proxy = await CuttableProxy.start(new URL(stack.tack.gatewayUrl));
    const s = await newSession("giveup", [{ content: "hi" }]);
    const deadUrl = proxy.url;
    await proxy.close();
    const viaDeadProxy = new TackClient({ baseUrl: deadUrl, apiKey: stack.tack.apiKey });
    const started = Date.now();
    const states: StreamState[] = [];
    const failure = await viaDeadProxy.events(s.id, { reconnect: { initialDelayMs: 50, giveUpAfterMs: 600 }, onState: (st) => states.push(st) }).next().catch((e: unknown) => e);
    expect(failure).toMatchObject({ status: 0, code: "client.unreachable" });
    expect(Date.now() - started).toBeLessThan(5_000);
    const delays = states.flatMap((st) => (st.state === "reconnecting" ? [st.delayMs] : []));
    expect(delays.slice(0, 3)).toEqual([50, 100, 200]);
  });

  it("managed workspaces and admin keys", async () => {
    const ws = await client.createWorkspace({ title: "empty one" });
    expect(ws).toMatchObject({ title: "empty one", tenant: "local" });
    expect((await client.listWorkspaces()).map((w) => w.id)).toContain(ws.id);
    const archive = await client.workspaceArchive(ws.id);
    expect(archive.byteLength % 512).toBe(0);
    expect(await client.deleteWorkspace(ws.id)).toMatchObject({ id: ws.id, deleted: true, sessions_deleted: [] });
    await expect(client.workspaceArchive(ws.id)).rejects.toMatchObject({ status: 404, code: "gateway.workspace_not_found" });

    const key = await client.createKey({ role: "member", name: "client-test" });
    expect(key.key).toMatch(/\S{16,}/);
    expect((await client.listKeys()).map((k) => k.id)).toContain(key.id);
    const member = new TackClient({ baseUrl: stack.tack.gatewayUrl, apiKey: () => key.key });
    await expect(member.tenants()).rejects.toMatchObject({ status: 403, code: "gateway.forbidden", details: { role_needed: "admin" } });
    expect((await client.tenants())[0]).toMatchObject({ id: "local" });
    expect(await client.revokeKey(key.id)).toMatchObject({ id: key.id, revoked_at: expect.any(String) });
    await expect(member.usage()).rejects.toMatchObject({ status: 401, code: "gateway.invalid_api_key" });
    expect((await client.audit({ limit: 5 })).limit).toBe(5);
  });
});
