import type { Event } from "@tack/proto";
import type { Operation } from "./call.js";
import { requireSession, type GatewayContext } from "./sessions.js";

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
export interface SessionState {
  mode: string | undefined;
  plan_mode: boolean;
  todos: TodoJson[];
  waiting: WaitingJson[];
}

/**
 * The session's current state, folded one event at a time (the same rules the loop applies), so
 * a live view of a session (src/feeds.ts) keeps it up to date without reading the log again.
 */
export class SessionStateFold {
  #mode: string | undefined;
  #planMode = false;
  #todos: TodoJson[] = [];
  readonly #waiting = new Map<string, WaitingJson>();

  apply(e: Event): void {
    const p = e.payload;
    switch (p?.$case) {
      case "sessionCreated":
        this.#mode = p.value.mode || "standard";
        break;
      case "sessionMode":
        this.#mode = p.value.mode;
        break;
      case "planMode":
        this.#planMode = p.value.on;
        break;
      case "todoUpdated":
        this.#todos = p.value.items.map((i) => ({ ...(i.id ? { id: i.id } : {}), content: i.content, status: i.status }));
        break;
      case "approvalAsked": {
        const a = p.value;
        this.#waiting.set(a.callId, { kind: "approval", call_id: a.callId, tool: a.toolName, operation: a.operation, requested_mode: a.requestedMode, justification: a.justification, approval_kind: a.kind || "sandbox", seq: e.seq });
        break;
      }
      case "questionAsked":
        this.#waiting.set(p.value.callId, {
          kind: "question", call_id: p.value.callId, seq: e.seq,
          questions: p.value.questions.map((q) => ({ header: q.header, question: q.question, multi_select: q.multiSelect, options: q.options.map((o) => ({ ...o })) })),
        });
        break;
      case "planSubmitted":
        this.#waiting.set(p.value.callId, { kind: "plan", call_id: p.value.callId, plan: p.value.plan, seq: e.seq });
        break;
      case "planDecided":
        if (p.value.decision === "approve") this.#planMode = false;
        this.#waiting.delete(p.value.callId);
        break;
      case "approvalDecided":
      case "questionAnswered":
        this.#waiting.delete(p.value.callId);
        break;
      default:
        break;
    }
  }

  /** The state so far; later events do not change what it returned. */
  snapshot(): SessionState {
    return { mode: this.#mode, plan_mode: this.#planMode, todos: this.#todos, waiting: [...this.#waiting.values()] };
  }
}

/** Folds a whole log into the session's current state. */
export function sessionState(events: readonly Event[]): SessionState {
  const fold = new SessionStateFold();
  for (const e of events) fold.apply(e);
  return fold.snapshot();
}

/** `GetTodos`: the session's current task list (the last `todo_write`). */
export function getTodos(context: GatewayContext): Operation {
  return async (call, request) => {
    const row = await requireSession(context, call, request.id);
    return { body: { todos: (await context.feeds.view(row)).state.todos } };
  };
}
