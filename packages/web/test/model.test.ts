// The page's fold over events in their JSON form (as the gateway sends them, defaults left out):
// the session's state comes from the log's one fold (SessionState), decoded with protobuf defaults.
import { describe, expect, it } from "vitest";
import type { EventJson } from "@tack/client";
import { foldSession } from "../app/model.js";

let seq = 0;
const at = (type: string, payload: Record<string, unknown>): EventJson => ({ seq: ++seq, type, time: `2026-12-07T10:00:${String(seq).padStart(2, "0")}.000000Z`, ...payload });

describe("foldSession", () => {
  it("model - modes, plan mode and what waits come from the log's fold; a payload with every field left out reads as its defaults", () => {
    seq = 0;
    const events = [
      at("session/created", { sessionCreated: { sessionId: "s1", model: "m" } }),
      at("sandbox/mode", { sandboxMode: { mode: "read-only", changedBy: "session" } }),
      at("plan/mode", { planMode: { on: true } }),
      at("turn/start", { turnStart: { turn: 1 } }),
      at("approval/asked", { approvalAsked: { callId: "a1", toolName: "bash", operation: "ls", currentMode: "read-only", requestedMode: "workspace-write", justification: "j" } }),
      at("question/asked", { questionAsked: { callId: "q1", questions: [{ header: "H", question: "Q?", options: [{ label: "x" }] }] } }),
      at("plan/submitted", { planSubmitted: { callId: "p1", plan: "P" } }),
      at("approval/decided", { approvalDecided: { callId: "a1", decision: "allow_once", decidedBy: "me" } }),
    ];
    const view = foldSession(events);
    expect([view.mode, view.sandboxMode, view.planMode]).toEqual(["standard", "read-only", true]);
    expect(view.waiting).toEqual([
      { kind: "question", callId: "q1", seq: 6, questions: [{ header: "H", question: "Q?", multiSelect: false, options: [{ label: "x", description: "" }] }] },
      { kind: "plan", callId: "p1", plan: "P", seq: 7 },
    ]);
    // `on: false` is left out of the JSON: plan mode off.
    expect(foldSession([...events, at("plan/mode", { planMode: {} })]).planMode).toBe(false);
    expect(foldSession(events.slice(0, 5)).waiting).toMatchObject([{ kind: "approval", callId: "a1", approvalKind: "sandbox", currentMode: "read-only", requestedMode: "workspace-write" }]);
  });

  it("model - nothing waits once its turn ended; before session/created the modes are empty (the page shows the index row's)", () => {
    seq = 0;
    const events = [
      at("session/created", { sessionCreated: { sessionId: "s1", mode: "code" } }),
      at("turn/start", { turnStart: { turn: 1 } }),
      at("question/asked", { questionAsked: { callId: "q1", questions: [] } }),
      at("turn/end", { turnEnd: { turn: 1, reason: "error" } }),
    ];
    const view = foldSession(events);
    expect([view.mode, view.sandboxMode, view.waiting]).toEqual(["code", "workspace-write", []]);
    expect(view.items.at(-1)).toMatchObject({ kind: "notice", text: "turn 1 ended: error" });
    expect(foldSession([])).toMatchObject({ mode: "", sandboxMode: "", planMode: false, waiting: [] });
  });
});
