import type { Event } from "@tack/proto";
import { sendJson, type Handler } from "./http.js";
import { readAll } from "@tack/log";
import { requireSession, type GatewayContext } from "./sessions.js";

/** One task of a session's task list, as the API shows it. */
export interface TodoJson {
  id?: string;
  content: string;
  status: string;
}

/** A tool call waiting for a person, and where to answer it. */
export type WaitingJson =
  | { kind: "approval"; call_id: string; tool: string; operation: string; requested_mode: string; justification: string; seq: number }
  | { kind: "question"; call_id: string; questions: Array<{ header: string; question: string; multi_select: boolean; options: Array<{ label: string; description: string }> }>; seq: number }
  | { kind: "plan"; call_id: string; plan: string; seq: number };

/** What the log says about a session's state beyond its index row: mode, plan mode, task list and what waits for a person. */
export interface SessionState {
  mode: string | undefined;
  plan_mode: boolean;
  todos: TodoJson[];
  waiting: WaitingJson[];
}

/** Folds the log into the session's current state (the same rules the loop applies). */
export function sessionState(events: readonly Event[]): SessionState {
  const state: SessionState = { mode: undefined, plan_mode: false, todos: [], waiting: [] };
  const waiting = new Map<string, WaitingJson>();
  for (const e of events) {
    const p = e.payload;
    switch (p?.$case) {
      case "sessionCreated":
        state.mode = p.value.mode || "standard";
        break;
      case "sessionMode":
        state.mode = p.value.mode;
        break;
      case "planMode":
        state.plan_mode = p.value.on;
        break;
      case "todoUpdated":
        state.todos = p.value.items.map((i) => ({ ...(i.id ? { id: i.id } : {}), content: i.content, status: i.status }));
        break;
      case "approvalAsked": {
        const a = p.value;
        waiting.set(a.callId, { kind: "approval", call_id: a.callId, tool: a.toolName, operation: a.operation, requested_mode: a.requestedMode, justification: a.justification, seq: e.seq });
        break;
      }
      case "questionAsked":
        waiting.set(p.value.callId, {
          kind: "question", call_id: p.value.callId, seq: e.seq,
          questions: p.value.questions.map((q) => ({ header: q.header, question: q.question, multi_select: q.multiSelect, options: q.options.map((o) => ({ ...o })) })),
        });
        break;
      case "planSubmitted":
        waiting.set(p.value.callId, { kind: "plan", call_id: p.value.callId, plan: p.value.plan, seq: e.seq });
        break;
      case "planDecided":
        if (p.value.decision === "approve") state.plan_mode = false;
        waiting.delete(p.value.callId);
        break;
      case "approvalDecided":
      case "questionAnswered":
        waiting.delete(p.value.callId);
        break;
      default:
        break;
    }
  }
  state.waiting = [...waiting.values()];
  return state;
}

/** `GET /v1/sessions/:id/todos`: the session's current task list (the last `todo_write`). */
export function getTodos(context: GatewayContext): Handler {
  return async (exchange) => {
    const row = await requireSession(context, exchange);
    const events = await readAll(context.bus.nc, context.bus.names, { tenant: row.tenant, sessionId: row.id });
    sendJson(exchange.res, 200, { todos: sessionState(events).todos });
  };
}
