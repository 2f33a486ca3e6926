import { TackError } from "@tack/bus";
import { ALLOWED_FROM, modeRank, type Denied } from "@tack/config";
import type { ApprovalAsked, ApprovalDecided, ToolCall, ToolSpec } from "@tack/proto";
import { PendingWaits } from "./waits.js";

/** Approval policies: `never` denies anything that needs approval. */
export const APPROVAL_POLICIES = ["ask", "never"] as const;

/** What a person can answer to a pending approval. */
export const DECISIONS = ["allow_once", "reject"] as const;

/** One of DECISIONS. */
export type Decision = (typeof DECISIONS)[number];

/** The API key that decided on a waiting call (the person), as the gateway authenticated it; empty when none did. */
export interface DecidingKey {
  readonly name: string;
  readonly id: string;
}

/** No key decided (a decision over the bus without one). */
export const NO_KEY: DecidingKey = { name: "", id: "" };

/** The key's fields of a decision event (`decidedByKey`/`decidedByKeyId`, or a question's `answeredBy…`); none for NO_KEY. */
export function keyFields<N extends string, I extends string>(key: DecidingKey, name: N, id: I): Partial<Record<N | I, string>> {
  const out: Partial<Record<N | I, string>> = {};
  if (key.name) out[name] = key.name;
  if (key.id) out[id] = key.id;
  return out;
}


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

/** Wording the model reads for each way a per-call approval (a tool whose ToolSpec approval is `ask`, e.g. an MCP tool) ends. */
export const TOOL_APPROVAL_TEXT = {
  allowedOnce: "Approved once by the user: this call ran.",
  rejected: (tool: string) =>
    `Rejected by the user: the call to ${tool} was turned down; it did not run. Do not call it again in this turn unless the user asks; continue without it or tell the user what is blocked.`,
  cancelled: (tool: string) => `Cancelled: the turn was stopped while this call to ${tool} waited for approval; it did not run.`,
  unavailable: (tool: string) =>
    `Unavailable: no one answered the request to allow this call to ${tool} (no approver, or no answer in time), so it was denied; it did not run. Continue without it or tell the user what needs their approval.`,
  policyNever: (tool: string) =>
    `Rejected by policy: this session's approval policy is never, and ${tool} needs a person's approval for each call, so it was refused without asking; it did not run. Continue without it or tell the user what is blocked.`,
} as const;

/** How the loop handles one tool call of a step. */
export type CallPlan =
  /** Dispatch under `mode`; `note` (allowed once) goes in front of the tool's result. */
  | { readonly kind: "run"; readonly mode: string; readonly note?: string }
  /** Never dispatch: log `decided` (when set), then a result with `content`. */
  | { readonly kind: "refuse"; readonly content: string; readonly decided?: ApprovalDecided }
  /** Log `approval/asked` and wait for a decision. */
  | { readonly kind: "ask"; readonly asked: ApprovalAsked }
  /** Carried out by the loop itself (a tool whose ToolSpec handler is `session`, see session-tools.ts). */
  | { readonly kind: "session" };

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
  /** The tools the model was given, by name: what a sandbox mode can deny each, and its operation argument. */
  readonly tools: ReadonlyMap<string, ToolSpec>;
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
    const request = escalationOf(call, context.tools.get(call.name));
    if (!request || request.mode === context.mode) return { kind: "run", mode: context.mode };
    const { mode, justification } = request;
    if (modeRank(mode) < modeRank(context.mode)) return { kind: "refuse", content: APPROVAL_TEXT.notWider(mode, context.mode) };
    if (context.policy === "never") {
      return { kind: "refuse", content: APPROVAL_TEXT.policyNever(mode, context.mode), decided: { callId: call.id, decision: "reject", decidedBy: "policy:never" } };
    }
    if (escalatedBy !== undefined) return { kind: "refuse", content: APPROVAL_TEXT.alreadyUsed(escalatedBy, context.mode) };
    const narrowest = narrowestFor(context.tools.get(call.name), context.mode);
    if (!narrowest.includes(mode)) return { kind: "refuse", content: APPROVAL_TEXT.notNarrowest(call.name, mode, context.mode, narrowest) };
    if (!justification.trim()) return { kind: "refuse", content: APPROVAL_TEXT.noJustification(mode) };
    escalatedBy = call.id;
    return {
      kind: "ask",
      asked: { callId: call.id, toolName: call.name, operation: request.operation, currentMode: context.mode, requestedMode: mode, justification, turn: context.turn, step: context.step, kind: "sandbox" },
    };
  });
}

/**
 * The plan for a call of a tool that needs a person's yes before each call (ToolSpec approval
 * `ask`): refused by policy `never`, else asked. Such approvals are per call: they are not the
 * turn's one sandbox escalation.
 */
export function toolApprovalPlan(call: ToolCall, context: Pick<EscalationContext, "mode" | "policy" | "turn" | "step">, operation: string): CallPlan {
  if (context.policy === "never") {
    return { kind: "refuse", content: TOOL_APPROVAL_TEXT.policyNever(call.name), decided: { callId: call.id, decision: "reject", decidedBy: "policy:never" } };
  }
  return {
    kind: "ask",
    asked: { callId: call.id, toolName: call.name, operation, currentMode: context.mode, requestedMode: "", justification: "", turn: context.turn, step: context.step, kind: "tool" },
  };
}

/** The plan for a call once its approval is decided: run it under the approved mode, or tell the model why it did not run. */
export function outcomePlan(call: ToolCall, decided: ApprovalDecided, sessionMode: string, kind = "sandbox"): DecidedPlan {
  if (kind === "tool") {
    switch (decided.decision) {
      case "allow_once":
        return { kind: "run", mode: sessionMode, note: TOOL_APPROVAL_TEXT.allowedOnce };
      case "reject":
        return { kind: "refuse", content: decided.decidedBy === "policy:never" ? TOOL_APPROVAL_TEXT.policyNever(call.name) : TOOL_APPROVAL_TEXT.rejected(call.name) };
      case "cancelled":
        return { kind: "refuse", content: TOOL_APPROVAL_TEXT.cancelled(call.name) };
      default:
        return { kind: "refuse", content: TOOL_APPROVAL_TEXT.unavailable(call.name) };
    }
  }
  const mode = escalationOf(call, undefined)?.mode ?? sessionMode;
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

/**
 * The approvals a session waits for: each ends by a person's decision, by its deadline
 * (`unavailable`, decided by `timeout`) or by a cancel; `log` appends `approval/decided`.
 */
export function pendingApprovals(log: (decided: ApprovalDecided) => Promise<number>): PendingWaits<ApprovalDecided> {
  return new PendingWaits<ApprovalDecided>({
    log,
    timedOut: (callId) => ({ callId, decision: "unavailable", decidedBy: "timeout" }),
    cancelled: (callId, by) => ({ callId, decision: "cancelled", decidedBy: by }),
    notPending: (callId) => new TackError("loop.no_pending_approval", `no approval is pending for call ${JSON.stringify(callId)}; it was already decided or never asked (see the session's approval/asked events)`, {
      details: { call_id: callId },
    }),
  });
}

/** The narrowest modes strictly wider than `mode` that allow something `tool` (its ToolSpec) can be denied in `mode`. */
function narrowestFor(tool: ToolSpec | undefined, mode: string): string[] {
  const modes = deniableOf(tool).map((what) => ALLOWED_FROM[what]).filter((allowing) => modeRank(allowing) > modeRank(mode));
  return [...new Set(modes)];
}

/** What a sandbox mode can deny `tool`, as its ToolSpec declares (kinds this loop does not know are left out). */
export function deniableOf(tool: ToolSpec | undefined): Denied[] {
  return (tool?.deniable ?? []).filter((what): what is Denied => Object.hasOwn(ALLOWED_FROM, what));
}

/** The escalation a call asks for: a known mode in `sandbox_permissions`, its justification and the operation a person approves. */
export function escalationOf(call: ToolCall, tool: ToolSpec | undefined): { mode: string; justification: string; operation: string } | undefined {
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
  const shown = tool?.operationArgument ? rest[tool.operationArgument] : undefined;
  const operation = typeof shown === "string" ? shown : `${call.name} ${JSON.stringify(rest)}`;
  return { mode, justification: typeof justification === "string" ? justification : "", operation };
}
