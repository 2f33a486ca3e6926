import { TackError } from "@tack/bus";
import { ALLOWED_FROM, DENIABLE_BY_TOOL, modeRank } from "@tack/config";
import { timestampMs } from "@tack/log";
import type { ApprovalAsked, ApprovalDecided, Event, ToolCall } from "@tack/proto";

/** Approval policies: `never` denies anything that needs approval. */
export const APPROVAL_POLICIES = ["ask", "never"] as const;

/** What a person can answer to a pending approval. */
export const DECISIONS = ["allow_once", "reject"] as const;

/** One of DECISIONS. */
export type Decision = (typeof DECISIONS)[number];


/** Wording the model reads for each way an escalation ends; every one but allowed-once says the command did not run. */
export const APPROVAL_TEXT = {
  allowedOnce: (mode: string, session: string) =>
    `Approved once by the user: this call ran in sandbox mode ${mode}; later calls run in ${session} again.`,
  rejected: (mode: string, session: string) =>
    `Rejected by the user: the request to run this call in sandbox mode ${mode} was turned down; the command did not run. Do not ask again in this turn; continue within sandbox mode ${session} or tell the user what is blocked.`,
  cancelled: (mode: string) =>
    `Cancelled: the turn was stopped while this call waited for approval of sandbox mode ${mode}; the command did not run.`,
  unavailable: (mode: string, session: string) =>
    `Unavailable: no one answered the request to run this call in sandbox mode ${mode} (no approver, or no answer in time), so it was denied; the command did not run. Continue within sandbox mode ${session} or tell the user what needs their approval.`,
  policyNever: (mode: string, session: string) =>
    `Rejected by policy: this session's approval policy is never, so a call asking for sandbox mode ${mode} is refused without asking anyone; the command did not run. Continue within sandbox mode ${session} or tell the user what is blocked.`,
  alreadyUsed: (callId: string, session: string) =>
    `Refused: this turn already asked for a wider sandbox mode (call ${callId}), and a turn may escalate only once; the command did not run. Continue within sandbox mode ${session} or tell the user what is blocked.`,
  notWider: (mode: string, session: string) =>
    `Refused: sandbox_permissions ${mode} is narrower than this session's sandbox mode ${session}, and escalation only goes up; the command did not run. Retry without sandbox_permissions.`,
  notNarrowest: (tool: string, mode: string, session: string, narrowest: readonly string[]) =>
    narrowest.length === 0
      ? `Refused: ${tool} needs no sandbox mode wider than ${session}; the command did not run. Retry without sandbox_permissions.`
      : `Refused: sandbox_permissions ${mode} is wider than ${tool} can need; the narrowest mode above ${session} for it is ${narrowest.join(" or ")}. The command did not run; retry with the mode the denial named.`,
  noJustification: (mode: string) =>
    `Refused: a call with sandbox_permissions needs a "justification" saying why it must run in sandbox mode ${mode}; the command did not run. Retry with one.`,
} as const;

/** How the loop handles one tool call of a step. */
export type CallPlan =
  /** Dispatch under `mode`; `note` (allowed once) goes in front of the tool's result. */
  | { readonly kind: "run"; readonly mode: string; readonly note?: string }
  /** Never dispatch: log `decided` (when set), then a result with `content`. */
  | { readonly kind: "refuse"; readonly content: string; readonly decided?: ApprovalDecided }
  /** Log `approval/asked` and wait for a decision. */
  | { readonly kind: "ask"; readonly asked: ApprovalAsked };

/** A plan that needs no more asking: run the call, or answer why it did not run. */
export type DecidedPlan = Exclude<CallPlan, { kind: "ask" }>;

/** The session state an escalation is judged against. */
export interface EscalationContext {
  /** The session's sandbox mode (the latest `sandbox/mode`). */
  readonly mode: string;
  /** The session's approval policy (the latest `approval/policy`). */
  readonly policy: string;
  /** Call id of this turn's earlier escalation, if the turn already used its one. */
  readonly escalatedBy: string | undefined;
  readonly turn: number;
  readonly step: number;
}

/**
 * Plans the calls of one step. A call whose `sandbox_permissions` is strictly wider than the
 * session's mode is an escalation: refused by policy `never`, refused unless it is the turn's
 * first, names the narrowest wider mode the tool can need and has a justification; otherwise
 * asked. Calls are planned in order, so of two escalations in one step only the first asks.
 */
export function planCalls(calls: readonly ToolCall[], context: EscalationContext): CallPlan[] {
  let escalatedBy = context.escalatedBy;
  return calls.map((call): CallPlan => {
    const request = escalationOf(call);
    if (!request || request.mode === context.mode) return { kind: "run", mode: context.mode };
    const { mode, justification } = request;
    if (modeRank(mode) < modeRank(context.mode)) return { kind: "refuse", content: APPROVAL_TEXT.notWider(mode, context.mode) };
    if (context.policy === "never") {
      return { kind: "refuse", content: APPROVAL_TEXT.policyNever(mode, context.mode), decided: { callId: call.id, decision: "reject", decidedBy: "policy:never" } };
    }
    if (escalatedBy !== undefined) return { kind: "refuse", content: APPROVAL_TEXT.alreadyUsed(escalatedBy, context.mode) };
    const narrowest = narrowestFor(call.name, context.mode);
    if (!narrowest.includes(mode)) return { kind: "refuse", content: APPROVAL_TEXT.notNarrowest(call.name, mode, context.mode, narrowest) };
    if (!justification.trim()) return { kind: "refuse", content: APPROVAL_TEXT.noJustification(mode) };
    escalatedBy = call.id;
    return {
      kind: "ask",
      asked: { callId: call.id, toolName: call.name, operation: request.operation, currentMode: context.mode, requestedMode: mode, justification, turn: context.turn, step: context.step },
    };
  });
}

/** The plan for a call once its approval is decided: run it under the approved mode, or tell the model why it did not run. */
export function outcomePlan(call: ToolCall, decided: ApprovalDecided, sessionMode: string): DecidedPlan {
  const mode = escalationOf(call)?.mode ?? sessionMode;
  switch (decided.decision) {
    case "allow_once":
      return { kind: "run", mode, note: APPROVAL_TEXT.allowedOnce(mode, sessionMode) };
    case "reject":
      return { kind: "refuse", content: decided.decidedBy === "policy:never" ? APPROVAL_TEXT.policyNever(mode, sessionMode) : APPROVAL_TEXT.rejected(mode, sessionMode) };
    case "cancelled":
      return { kind: "refuse", content: APPROVAL_TEXT.cancelled(mode) };
    default:
      return { kind: "refuse", content: APPROVAL_TEXT.unavailable(mode, sessionMode) };
  }
}

/** The latest value of the session's sandbox mode in `events`. */
export function sandboxModeOf(events: readonly Event[]): string {
  for (let i = events.length - 1; i >= 0; i--) {
    const p = events[i]!.payload;
    if (p?.$case === "sandboxMode") return p.value.mode;
  }
  return "workspace-write";
}

/** The latest value of the session's approval policy in `events`. */
export function approvalPolicyOf(events: readonly Event[]): string {
  for (let i = events.length - 1; i >= 0; i--) {
    const p = events[i]!.payload;
    if (p?.$case === "approvalPolicy") return p.value.policy;
  }
  return "ask";
}

/** What the log says about one call's approval. */
export interface ApprovalState {
  /** When `approval/asked` was logged (epoch ms; 0 without one, as after a `policy:never` rejection). */
  readonly askedAtMs: number;
  readonly decided?: ApprovalDecided;
}

/** The approval state of each call with approval events in `events` (one turn's worth). */
export function approvalsIn(events: readonly Event[]): Map<string, ApprovalState> {
  const out = new Map<string, ApprovalState>();
  for (const e of events) {
    const p = e.payload;
    if (p?.$case === "approvalAsked") out.set(p.value.callId, { ...out.get(p.value.callId), askedAtMs: timestampMs(e.time) });
    else if (p?.$case === "approvalDecided") out.set(p.value.callId, { askedAtMs: 0, ...out.get(p.value.callId), decided: p.value });
  }
  return out;
}

/** Call id of the first `approval/asked` in `events` (one turn's worth), i.e. the turn's one escalation. */
export function escalationIn(events: readonly Event[]): string | undefined {
  const asked = events.find((e) => e.payload?.$case === "approvalAsked");
  return asked?.payload?.$case === "approvalAsked" ? asked.payload.value.callId : undefined;
}

interface Pending {
  readonly asked: Promise<unknown>;
  readonly timer: NodeJS.Timeout;
  readonly resolve: (decided: ApprovalDecided) => void;
  readonly reject: (error: unknown) => void;
}

/**
 * The approvals a session is waiting for. Each wait ends exactly once: by a person's decision,
 * by its deadline (`unavailable`, decided by `timeout`) or by a cancel; that decision is logged
 * through `log` before the waiting call learns it.
 */
export class PendingApprovals {
  readonly #pending = new Map<string, Pending>();
  readonly #log: (decided: ApprovalDecided) => Promise<number>;

  /** `log` appends an `approval/decided` event and returns its seq. */
  constructor(log: (decided: ApprovalDecided) => Promise<number>) {
    this.#log = log;
  }

  /**
   * Parks call `callId` until its approval is decided. `asked` settles once its
   * `approval/asked` is in the log (no decision is logged before it); at `deadlineMs` (epoch
   * ms) the approval ends as unavailable. Rejects with `loop.approval_abandoned` if `abandon` runs first.
   */
  wait(callId: string, asked: Promise<unknown>, deadlineMs: number): Promise<ApprovalDecided> {
    return new Promise((resolve, reject) => {
      // Node fires a longer timeout at once; the option is bounded well below this.
      const delay = Math.min(Math.max(0, deadlineMs - Date.now()), 2 ** 31 - 1);
      const timer = setTimeout(() => void this.#settle(callId, "unavailable", "timeout").catch(() => undefined), delay);
      this.#pending.set(callId, { asked, timer, resolve, reject });
    });
  }

  /** Logs a person's decision and wakes the call; throws `loop.no_pending_approval` when `callId` is not waiting. */
  decide(callId: string, decision: Decision, decidedBy: string): Promise<number> {
    return this.#settle(callId, decision, decidedBy);
  }

  /** Ends every wait as cancelled (the turn is stopping), logging each. */
  async cancelAll(decidedBy: string): Promise<void> {
    await Promise.all([...this.#pending.keys()].map((callId) => this.#settle(callId, "cancelled", decidedBy)));
  }

  /** Drops every wait without logging anything: this process no longer owns the session, and its next owner parks them again. */
  abandon(): void {
    for (const [callId, pending] of this.#pending) {
      clearTimeout(pending.timer);
      pending.reject(new TackError("loop.approval_abandoned", `the approval of call ${callId} is left to the session's next owner`));
    }
    this.#pending.clear();
  }

  async #settle(callId: string, decision: string, decidedBy: string): Promise<number> {
    const pending = this.#pending.get(callId);
    if (!pending) {
      throw new TackError("loop.no_pending_approval", `no approval is pending for call ${JSON.stringify(callId)}; it was already decided or never asked (see the session's approval/asked events)`, {
        details: { call_id: callId },
      });
    }
    // Removed before the first await, so exactly one decision is logged per approval.
    this.#pending.delete(callId);
    clearTimeout(pending.timer);
    const decided: ApprovalDecided = { callId, decision, decidedBy };
    try {
      await pending.asked;
      const seq = await this.#log(decided);
      pending.resolve(decided);
      return seq;
    } catch (error) {
      pending.reject(error);
      throw error;
    }
  }
}

/** The narrowest modes strictly wider than `mode` that allow something `tool` can be denied in `mode`. */
function narrowestFor(tool: string, mode: string): string[] {
  const modes = (DENIABLE_BY_TOOL[tool] ?? []).map((what) => ALLOWED_FROM[what]).filter((allowing) => modeRank(allowing) > modeRank(mode));
  return [...new Set(modes)];
}

/** The escalation a call asks for: a known mode in `sandbox_permissions`, its justification and the operation a person approves. */
function escalationOf(call: ToolCall): { mode: string; justification: string; operation: string } | undefined {
  let args: unknown;
  try {
    args = JSON.parse(call.arguments);
  } catch {
    return undefined;
  }
  if (typeof args !== "object" || args === null) return undefined;
  const { sandbox_permissions: mode, justification, ...rest } = args as Record<string, unknown>;
  // Anything else (absent, not a mode) is the tools service's to refuse when it validates the arguments.
  if (typeof mode !== "string" || modeRank(mode) < 0) return undefined;
  const operation = call.name === "bash" && typeof rest.command === "string" ? rest.command : `${call.name} ${JSON.stringify(rest)}`;
  return { mode, justification: typeof justification === "string" ? justification : "", operation };
}
