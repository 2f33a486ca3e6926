// The one fold of session state (the loop, the gateway and the web UI all read it): every rule it applies.
import { describe, expect, it } from "vitest";
import type { Event } from "@tack/proto";
import { draft, materialize, SESSION_STATE_CASES, SessionState, sessionState, type Draft } from "@tack/log";
import { SessionState as BrowserSessionState } from "@tack/log/state";

/** Events with seqs from 1 and times one second apart from 1_700_000_000 s. */
function log(...drafts: Draft[]): Event[] {
  return drafts.map((d, i) => materialize(d, i + 1, { seconds: 1_700_000_000 + i, nanos: 0 }));
}

const created = (mode = "standard") => draft("sessionCreated", { sessionId: "s1", tenant: "t1", mode, model: "m", workspace: "/w" }, "loop");
const turnStart = (turn: number) => draft("turnStart", { turn, userMessageSeq: 1 }, "loop");
const turnEnd = (turn: number) => draft("turnEnd", { turn, reason: "completed" }, "loop");
const approvalAsked = (callId: string, kind = "") => draft("approvalAsked", { callId, toolName: "bash", requestedMode: "danger-full-access", justification: "j", kind }, "loop");
const approvalDecided = (callId: string, decision = "allow_once") => draft("approvalDecided", { callId, decision, decidedBy: "me" }, "loop");
const questionAsked = (callId: string) => draft("questionAsked", { callId, questions: [{ header: "H", question: "Q?", multiSelect: false, options: [{ label: "a", description: "" }] }] }, "loop");
const planSubmitted = (callId: string) => draft("planSubmitted", { callId, plan: "do it" }, "loop");
const planDecided = (callId: string, decision: string) => draft("planDecided", { callId, decision, decidedBy: "me" }, "loop");

describe("SessionState", () => {
  it("state - before any event: mode standard, sandbox workspace-write, policy ask, no plan mode, nothing waiting", () => {
    const s = new SessionState();
    expect([s.created, s.mode, s.sandboxMode, s.approvalPolicy, s.planMode, s.todos, s.definedTools, s.waiting, s.turns, s.userMessages, s.escalatedBy])
      .toEqual([false, "standard", "workspace-write", "ask", false, [], undefined, [], 0, 0, undefined]);
  });

  it("state - session mode: session/created's (standard when empty), then the latest session/mode", () => {
    expect(sessionState(log(created(""))).mode).toBe("standard");
    expect(sessionState(log(created("code"))).mode).toBe("code");
    const s = sessionState(log(created("code"), draft("sessionMode", { mode: "minimal", changedBy: "me" }, "loop")));
    expect([s.created, s.mode]).toEqual([true, "minimal"]);
    expect(sessionState(log(created(), draft("sessionMode", { mode: "minimal" }, "loop"), draft("sessionMode", { mode: "creator" }, "loop"))).mode).toBe("creator");
  });

  it("state - sandbox mode and approval policy: the latest of each", () => {
    const s = sessionState(log(
      created(), draft("sandboxMode", { mode: "read-only", changedBy: "session" }, "loop"), draft("approvalPolicy", { policy: "never" }, "loop"),
      draft("sandboxMode", { mode: "danger-full-access", changedBy: "me" }, "loop"),
    ));
    expect([s.sandboxMode, s.approvalPolicy]).toEqual(["danger-full-access", "never"]);
  });

  it("state - plan mode: the latest plan/mode; an approved plan ends it, a rejected one does not", () => {
    expect(sessionState(log(created(), draft("planMode", { on: true }, "loop"))).planMode).toBe(true);
    expect(sessionState(log(created(), draft("planMode", { on: true }, "loop"), draft("planMode", { on: false }, "loop"))).planMode).toBe(false);
    expect(sessionState(log(created(), draft("planMode", { on: true }, "loop"), planSubmitted("p1"), planDecided("p1", "reject"))).planMode).toBe(true);
    expect(sessionState(log(created(), draft("planMode", { on: true }, "loop"), planSubmitted("p1"), planDecided("p1", "approve"))).planMode).toBe(false);
    // Turned on again after an approval: on.
    expect(sessionState(log(created(), draft("planMode", { on: true }, "loop"), planDecided("p1", "approve"), draft("planMode", { on: true }, "loop"))).planMode).toBe(true);
  });

  it("state - task list: the items of the latest todo/updated (an empty one clears it)", () => {
    const items = [{ id: "1", content: "a", status: "pending" }, { id: "", content: "b", status: "completed" }];
    const s = sessionState(log(created(), draft("todoUpdated", { callId: "c1", items: [{ id: "x", content: "old", status: "pending" }] }, "loop"), draft("todoUpdated", { callId: "c2", items }, "loop")));
    expect(s.todos).toEqual(items);
    expect(sessionState(log(created(), draft("todoUpdated", { callId: "c1", items }, "loop"), draft("todoUpdated", { callId: "c2", items: [] }, "loop"))).todos).toEqual([]);
  });

  it("state - defined tools: every tool/defined in log order, without its call id", () => {
    const s = sessionState(log(
      created("creator"),
      draft("toolDefined", { callId: "c1", name: "one", description: "d1", parametersJson: "{}", language: "bash", code: "echo 1" }, "loop"),
      draft("toolDefined", { callId: "c2", name: "two", description: "d2", parametersJson: "{}", language: "python3", code: "print(2)" }, "loop"),
    ));
    expect(s.definedTools).toEqual({ tools: [
      { name: "one", description: "d1", parametersJson: "{}", language: "bash", code: "echo 1" },
      { name: "two", description: "d2", parametersJson: "{}", language: "python3", code: "print(2)" },
    ] });
  });

  it("state - counts user messages and started turns", () => {
    const user = draft("userMessage", { text: "hi" }, "gateway");
    const s = sessionState(log(created(), user, turnStart(1), turnEnd(1), user, turnStart(2)));
    expect([s.userMessages, s.turns]).toEqual([2, 2]);
  });

  it("waiting - approvals, questions and plans in the order asked, with the asking event's seq and time", () => {
    const s = sessionState(log(created(), turnStart(1), questionAsked("q1"), approvalAsked("a1"), planSubmitted("p1"), approvalAsked("a2", "tool")));
    expect(s.waiting.map((w) => [w.kind, w.asked.callId, w.seq, w.askedAtMs])).toEqual([
      ["question", "q1", 3, 1_700_000_002_000], ["approval", "a1", 4, 1_700_000_003_000], ["plan", "p1", 5, 1_700_000_004_000], ["approval", "a2", 6, 1_700_000_005_000],
    ]);
    const approval = s.waiting[1]!;
    expect(approval.kind === "approval" && [approval.asked.toolName, approval.asked.requestedMode, approval.asked.justification]).toEqual(["bash", "danger-full-access", "j"]);
    expect(s.question("q1")?.questions[0]?.header).toBe("H");
    expect(s.question("a1")).toBeUndefined();
  });

  it("waiting - each ends by its own decision: approval/decided, question/answered, plan/decided (approve or reject)", () => {
    const asked = [created(), turnStart(1), approvalAsked("a1"), approvalAsked("a2"), questionAsked("q1"), planSubmitted("p1"), planSubmitted("p2")];
    const s = sessionState(log(...asked, approvalDecided("a1", "reject"), draft("questionAnswered", { callId: "q1", outcome: "answered" }, "loop"), planDecided("p1", "reject")));
    expect(s.waiting.map((w) => w.asked.callId)).toEqual(["a2", "p2"]);
    expect(s.question("q1")).toBeUndefined();
    expect(sessionState(log(...asked, approvalDecided("a2", "cancelled"), planDecided("p2", "approve"))).waiting.map((w) => w.asked.callId)).toEqual(["a1", "q1", "p1"]);
  });

  it("waiting - a turn/end ends everything still waiting (no one can answer a call of an ended turn)", () => {
    const s = sessionState(log(created(), turnStart(1), approvalAsked("a1"), questionAsked("q1"), planSubmitted("p1"), turnEnd(1)));
    expect(s.waiting).toEqual([]);
    expect(s.question("q1")).toBeUndefined();
  });

  it("turn approvals - each call's ask (time, kind: sandbox when empty) and decision, since the latest turn/start", () => {
    const s = sessionState(log(
      created(), turnStart(1), approvalAsked("old"), approvalDecided("old"), turnEnd(1),
      turnStart(2), approvalAsked("a1"), approvalAsked("t1", "tool"), approvalDecided("t1", "reject"), approvalDecided("n1", "reject"),
    ));
    const approvals = s.turnApprovals();
    expect([...approvals.keys()]).toEqual(["a1", "t1", "n1"]);
    expect(approvals.get("a1")).toEqual({ askedAtMs: 1_700_000_006_000, kind: "sandbox" });
    expect(approvals.get("t1")).toMatchObject({ askedAtMs: 1_700_000_007_000, kind: "tool", decided: { callId: "t1", decision: "reject" } });
    // Decided without an ask (a policy:never rejection): asked at 0, kind unknown.
    expect(approvals.get("n1")).toMatchObject({ askedAtMs: 0, decided: { decision: "reject" } });
    expect(approvals.get("n1")?.kind).toBeUndefined();
  });

  it("turn approvals - a turn's one escalation is its first sandbox approval/asked; tool approvals do not count; a new turn has none", () => {
    expect(sessionState(log(created(), turnStart(1), approvalAsked("t1", "tool"), approvalAsked("a1", "sandbox"), approvalAsked("a2"))).escalatedBy).toBe("a1");
    expect(sessionState(log(created(), turnStart(1), approvalAsked("a0"), approvalDecided("a0"))).escalatedBy).toBe("a0");
    expect(sessionState(log(created(), turnStart(1), approvalAsked("a0"), turnEnd(1), turnStart(2))).escalatedBy).toBeUndefined();
    expect(sessionState(log(created(), turnStart(1), approvalAsked("t1", "tool"))).escalatedBy).toBeUndefined();
  });

  it("snapshots - values returned before are not changed by later events", () => {
    const s = new SessionState();
    const events = log(created("creator"), turnStart(1), draft("todoUpdated", { callId: "c1", items: [{ id: "1", content: "a", status: "pending" }] }, "loop"),
      draft("toolDefined", { callId: "d1", name: "one" }, "loop"), approvalAsked("a1"));
    for (const e of events) s.apply(e);
    const [todos, defined, waiting, approvals] = [s.todos, s.definedTools, s.waiting, s.turnApprovals()];
    for (const e of log(created(), created(), created(), created(), created(),
      draft("todoUpdated", { callId: "c2", items: [] }, "loop"), draft("toolDefined", { callId: "d2", name: "two" }, "loop"), approvalDecided("a1"), turnStart(2))) s.apply(e);
    expect([todos.length, defined?.tools.length, waiting.length, approvals.size]).toEqual([1, 1, 1, 1]);
  });

  it("SESSION_STATE_CASES - folding only those events gives the same state as folding all (what the web UI decodes)", () => {
    const events = log(
      created("code"), draft("sandboxMode", { mode: "read-only" }, "loop"), draft("approvalPolicy", { policy: "ask" }, "loop"), draft("planMode", { on: true }, "loop"),
      draft("userMessage", { text: "hi" }, "gateway"), turnStart(1), draft("stepStart", { turn: 1, step: 1 }, "loop"), draft("assistantMessage", { turn: 1, step: 1, content: "x" }, "loop"),
      approvalAsked("a1"), approvalDecided("a1"), questionAsked("q1"), draft("todoUpdated", { callId: "c1", items: [{ id: "", content: "a", status: "pending" }] }, "loop"),
      draft("toolResult", { callId: "c1", content: "ok" }, "loop"), planSubmitted("p1"), planDecided("p1", "approve"), draft("toolDefined", { callId: "d1", name: "one" }, "loop"),
    );
    const view = (s: SessionState) => [s.created, s.mode, s.sandboxMode, s.approvalPolicy, s.planMode, s.todos, s.definedTools, s.waiting, s.turns, s.userMessages, s.escalatedBy, [...s.turnApprovals()]];
    const some = new BrowserSessionState();
    for (const e of events) if (SESSION_STATE_CASES.has(e.payload!.$case)) some.apply(e);
    expect(view(some)).toEqual(view(sessionState(events)));
    expect(events.filter((e) => !SESSION_STATE_CASES.has(e.payload!.$case)).map((e) => e.type)).toEqual(["step/start", "assistant/message", "tool/result"]);
  });
});
