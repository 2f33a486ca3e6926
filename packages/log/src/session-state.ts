// The session's state as its log says it: one fold, applied event by event, that the loop (which
// acts on it), the gateway (which shows it over the API) and the web UI (which shows it in the
// page) all use. Browser-safe: it loads nothing at run time but ./time.js (entry `@tack/log/state`).
import type { ApprovalAsked, ApprovalDecided, DefinedTool, DefinedTools, Event, PlanSubmitted, QuestionAsked, TodoItem } from "@tack/proto";
import { timestampMs } from "./time.js";

/** A tool call waiting for a person, with the event that asked (`seq`, and when: `askedAtMs`). */
export type Waiting =
  | { readonly kind: "approval"; readonly seq: number; readonly askedAtMs: number; readonly asked: ApprovalAsked }
  | { readonly kind: "question"; readonly seq: number; readonly askedAtMs: number; readonly asked: QuestionAsked }
  | { readonly kind: "plan"; readonly seq: number; readonly askedAtMs: number; readonly asked: PlanSubmitted };

/** What the log says about one call's approval in the current turn. */
export interface TurnApproval {
  /** When `approval/asked` was logged (epoch ms; 0 without one, as after a `policy:never` rejection). */
  readonly askedAtMs: number;
  /** What was asked: `sandbox` or `tool` (undefined when only a decision was logged). */
  readonly kind?: string;
  readonly decided?: ApprovalDecided;
}

const CASES = [
  "sessionCreated", "sessionMode", "sandboxMode", "approvalPolicy", "planMode", "todoUpdated", "toolDefined", "userMessage", "turnStart", "turnEnd",
  "approvalAsked", "approvalDecided", "questionAsked", "questionAnswered", "planSubmitted", "planDecided",
] as const;

/** A payload case that changes the state. */
export type SessionStateCase = (typeof CASES)[number];

/** The payload cases that change the state; events of other cases may be skipped (the web UI decodes only these). */
export const SESSION_STATE_CASES: ReadonlySet<string> = new Set<SessionStateCase>(CASES);

/** What the fold reads of an event (a decoded log event, or one built from a single decoded payload). */
export type StateEvent = Pick<Event, "seq" | "time" | "payload">;

/**
 * Folds a session's events, in seq order, into its state. The rules:
 * - session mode: `session/created`'s mode (`standard` when empty), then the latest `session/mode`;
 * - sandbox mode and approval policy: the latest `sandbox/mode` and `approval/policy`
 *   (`workspace-write` and `ask` before any);
 * - plan mode: the latest `plan/mode`, turned off by an approved `plan/decided`;
 * - task list: the items of the latest `todo/updated`; defined tools: every `tool/defined`, in order;
 * - waiting: each `approval/asked`, `question/asked` and `plan/submitted` (in the order asked)
 *   until its `approval/decided`, `question/answered` or `plan/decided`; a `turn/end` ends them
 *   all (no one can answer a call of a turn that ended);
 * - this turn (since the latest `turn/start`): each call's approval, and the turn's one sandbox
 *   escalation (the first sandbox `approval/asked`; per-call tool approvals do not count).
 * Getters return values that later events do not change.
 */
export class SessionState {
  #created = false;
  #mode = "standard";
  #sandboxMode = "workspace-write";
  #approvalPolicy = "ask";
  #planMode = false;
  #todos: readonly TodoItem[] = [];
  #defined: readonly DefinedTool[] = [];
  #userMessages = 0;
  #turns = 0;
  readonly #waiting = new Map<string, Waiting>();
  #turnApprovals = new Map<string, TurnApproval>();
  #escalatedBy: string | undefined;

  /** Applies one event (events must come in seq order). */
  apply(event: StateEvent): void {
    const p = event.payload;
    switch (p?.$case) {
      case "sessionCreated":
        this.#created = true;
        this.#mode = p.value.mode || "standard";
        return;
      case "sessionMode":
        this.#mode = p.value.mode;
        return;
      case "sandboxMode":
        this.#sandboxMode = p.value.mode;
        return;
      case "approvalPolicy":
        this.#approvalPolicy = p.value.policy;
        return;
      case "planMode":
        this.#planMode = p.value.on;
        return;
      case "todoUpdated":
        this.#todos = p.value.items;
        return;
      case "toolDefined": {
        const { name, description, parametersJson, language, code } = p.value;
        this.#defined = [...this.#defined, { name, description, parametersJson, language, code }];
        return;
      }
      case "userMessage":
        this.#userMessages++;
        return;
      case "turnStart":
        this.#turns++;
        this.#turnApprovals = new Map();
        this.#escalatedBy = undefined;
        return;
      case "turnEnd":
        this.#waiting.clear();
        return;
      case "approvalAsked": {
        const askedAtMs = timestampMs(event.time);
        const kind = p.value.kind || "sandbox";
        this.#waiting.set(p.value.callId, { kind: "approval", seq: event.seq, askedAtMs, asked: p.value });
        this.#turnApprovals.set(p.value.callId, { ...this.#turnApprovals.get(p.value.callId), askedAtMs, kind });
        if (kind === "sandbox") this.#escalatedBy ??= p.value.callId;
        return;
      }
      case "approvalDecided":
        this.#waiting.delete(p.value.callId);
        this.#turnApprovals.set(p.value.callId, { askedAtMs: 0, ...this.#turnApprovals.get(p.value.callId), decided: p.value });
        return;
      case "questionAsked":
        this.#waiting.set(p.value.callId, { kind: "question", seq: event.seq, askedAtMs: timestampMs(event.time), asked: p.value });
        return;
      case "planSubmitted":
        this.#waiting.set(p.value.callId, { kind: "plan", seq: event.seq, askedAtMs: timestampMs(event.time), asked: p.value });
        return;
      case "questionAnswered":
        this.#waiting.delete(p.value.callId);
        return;
      case "planDecided":
        if (p.value.decision === "approve") this.#planMode = false;
        this.#waiting.delete(p.value.callId);
        return;
      default:
        return;
    }
  }

  /** True once `session/created` was applied. */
  get created(): boolean {
    return this.#created;
  }

  /** The session's mode (the tools it has). */
  get mode(): string {
    return this.#mode;
  }

  /** The session's sandbox mode. */
  get sandboxMode(): string {
    return this.#sandboxMode;
  }

  /** The session's approval policy (`ask` or `never`). */
  get approvalPolicy(): string {
    return this.#approvalPolicy;
  }

  /** True while the session is in plan mode. */
  get planMode(): boolean {
    return this.#planMode;
  }

  /** The task list of the latest `todo_write`. */
  get todos(): readonly TodoItem[] {
    return this.#todos;
  }

  /** The tools the session defined (creator mode), in log order; undefined when it defined none. */
  get definedTools(): DefinedTools | undefined {
    return this.#defined.length > 0 ? { tools: [...this.#defined] } : undefined;
  }

  /** How many user messages the session has. */
  get userMessages(): number {
    return this.#userMessages;
  }

  /** How many turns started. */
  get turns(): number {
    return this.#turns;
  }

  /** The calls waiting for a person, in the order they were asked. */
  get waiting(): readonly Waiting[] {
    return [...this.#waiting.values()];
  }

  /** The question call `callId` waits on, if it waits. */
  question(callId: string): QuestionAsked | undefined {
    const w = this.#waiting.get(callId);
    return w?.kind === "question" ? w.asked : undefined;
  }

  /** Each call of the current turn with approval events, and what they say. */
  turnApprovals(): ReadonlyMap<string, TurnApproval> {
    return new Map(this.#turnApprovals);
  }

  /** Call id of the current turn's one sandbox escalation, if it asked one. */
  get escalatedBy(): string | undefined {
    return this.#escalatedBy;
  }
}

/** Folds a whole log into its state. */
export function sessionState(events: Iterable<StateEvent>): SessionState {
  const state = new SessionState();
  for (const e of events) state.apply(e);
  return state;
}
