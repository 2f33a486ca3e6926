import type { SessionState, Waiting } from "@tack/log";

/** One task of a session's task list, as the API shows it. */
export interface TodoJson {
  id?: string;
  content: string;
  status: string;
}

/** A tool call waiting for a person, and where to answer it. */
export type WaitingJson =
  | { kind: "approval"; call_id: string; tool: string; operation: string; requested_mode: string; justification: string; approval_kind: string; seq: number }
  | { kind: "question"; call_id: string; questions: Array<{ header: string; question: string; multi_select: boolean; options: Array<{ label: string; description: string }> }>; seq: number }
  | { kind: "plan"; call_id: string; plan: string; seq: number };

/** What the log says about a session's state beyond its index row: mode, plan mode, task list and what waits for a person. */
export interface SessionStateJson {
  /** Undefined before `session/created` (the index row's mode applies). */
  mode: string | undefined;
  plan_mode: boolean;
  todos: TodoJson[];
  waiting: WaitingJson[];
}

/** The API's form of the session's state as the log's fold (`SessionState` of @tack/log) has it now. */
export function sessionStateJson(state: SessionState): SessionStateJson {
  return {
    mode: state.created ? state.mode : undefined,
    plan_mode: state.planMode,
    todos: state.todos.map((i) => ({ ...(i.id ? { id: i.id } : {}), content: i.content, status: i.status })),
    waiting: state.waiting.map(waitingJson),
  };
}

function waitingJson(w: Waiting): WaitingJson {
  switch (w.kind) {
    case "approval": {
      const a = w.asked;
      return { kind: "approval", call_id: a.callId, tool: a.toolName, operation: a.operation, requested_mode: a.requestedMode, justification: a.justification, approval_kind: a.kind || "sandbox", seq: w.seq };
    }
    case "question":
      return {
        kind: "question", call_id: w.asked.callId, seq: w.seq,
        questions: w.asked.questions.map((q) => ({ header: q.header, question: q.question, multi_select: q.multiSelect, options: q.options.map((o) => ({ label: o.label, description: o.description })) })),
      };
    case "plan":
      return { kind: "plan", call_id: w.asked.callId, plan: w.asked.plan, seq: w.seq };
  }
}
