import type { gatewayV1 } from "@tack/proto";
import type { SessionState, Waiting } from "@tack/log";

/** What the log says about a session's state beyond its index row: mode, plan mode, task list and what waits for a person (fields of `tack.gateway.v1.SessionDetail`). */
export interface SessionStateMessage {
  /** Undefined before `session/created` (the index row's mode applies). */
  readonly mode: string | undefined;
  readonly planMode: boolean;
  readonly todos: gatewayV1.Todo[];
  readonly waiting: gatewayV1.Waiting[];
}

/** The API's form of the session's state as the log's fold (`SessionState` of @tack/log) has it now. */
export function sessionStateMessage(state: SessionState): SessionStateMessage {
  return {
    mode: state.created ? state.mode : undefined,
    planMode: state.planMode,
    todos: state.todos.map((i) => ({ id: i.id || undefined, content: i.content, status: i.status })),
    waiting: state.waiting.map(waitingMessage),
  };
}

/** A waiting call as the API's message: only the fields of its kind are set. */
function waitingMessage(w: Waiting): gatewayV1.Waiting {
  const none = { tool: "", operation: "", requestedMode: "", justification: "", approvalKind: "", questions: [], plan: "" };
  switch (w.kind) {
    case "approval": {
      const a = w.asked;
      return { ...none, kind: "approval", callId: a.callId, tool: a.toolName, operation: a.operation, requestedMode: a.requestedMode, justification: a.justification, approvalKind: a.kind || "sandbox", seq: w.seq };
    }
    case "question":
      return {
        ...none, kind: "question", callId: w.asked.callId, seq: w.seq,
        questions: w.asked.questions.map((q) => ({ header: q.header, question: q.question, multiSelect: q.multiSelect, options: q.options.map((o) => ({ label: o.label, description: o.description })) })),
      };
    case "plan":
      return { ...none, kind: "plan", callId: w.asked.callId, plan: w.asked.plan, seq: w.seq };
  }
}
