// Folds a session's events into what the page shows: the conversation, what waits for a person,
// the trajectory timeline and the money. Pure functions of the event list, so the view is the
// same whether the events came as history or live. The session's state (modes, plan mode, what
// waits) is the log's one fold, the same the loop and the gateway apply (SessionState of @tack/log).
import { eventTimeMs, type EventJson } from "@tack/client";
import { SessionState, type SessionStateCase, type StateEvent, type Waiting } from "@tack/log/state";
import {
  ApprovalAsked, ApprovalDecided, ApprovalPolicySet, PlanDecided, PlanModeSet, PlanSubmitted, QuestionAnswered, QuestionAsked, SandboxModeSet, SessionCreated,
  SessionModeSet, TodoUpdated, ToolDefined, TurnEnd, TurnStart, UserMessage,
} from "@tack/proto/events";

/** A tool call with its result once logged. */
export interface ToolCallView {
  callId: string;
  name: string;
  arguments: string;
  result?: { content: string; isError: boolean; durationMs: number; synthesized: boolean };
  inner: Array<{ index: number; name: string; arguments: string; content: string; isError: boolean }>;
}

/** One entry of the conversation. */
export type Item =
  | { kind: "user"; seq: number; text: string }
  | { kind: "assistant"; seq: number; turn: number; step: number; content: string; reasoning: string; calls: ToolCallView[]; streaming: boolean }
  | { kind: "context"; seq: number; what: string; sources: string[]; text: string }
  | { kind: "notice"; seq: number; tone: "info" | "warn" | "error"; text: string };

/** A call waiting for a person. */
export type WaitingView =
  | { kind: "approval"; callId: string; tool: string; operation: string; justification: string; approvalKind: "sandbox" | "tool"; currentMode: string; requestedMode: string; seq: number }
  | { kind: "question"; callId: string; questions: Array<{ header: string; question: string; multiSelect: boolean; options: Array<{ label: string; description: string }> }>; seq: number }
  | { kind: "plan"; callId: string; plan: string; seq: number };

/** Timing of one tool call (ms since the epoch). */
export interface ToolSpan { callId: string; name: string; startMs: number; endMs: number | undefined }

/** Timing of one step: model wait for the first token, decode, then its tool calls. */
export interface StepSpan { turn: number; step: number; startMs: number; firstTokenMs: number | undefined; messageMs: number | undefined; endMs: number | undefined; tools: ToolSpan[] }

/** Timing of one turn. */
export interface TurnSpan { turn: number; startMs: number; endMs: number | undefined; reason: string | undefined; steps: StepSpan[] }

/** Everything the session page derives from the log. */
export interface SessionView {
  items: Item[];
  waiting: WaitingView[];
  turns: TurnSpan[];
  running: boolean;
  costUsd: number;
  tokens: { input: number; cached: number; output: number };
  sandboxMode: string;
  mode: string;
  planMode: boolean;
  lastSeq: number;
}

const str = (v: string | undefined) => v ?? "";
const num = (v: number | undefined) => v ?? 0;

/** Folds the events (in seq order) into the page's view. */
export function foldSession(events: readonly EventJson[]): SessionView {
  const view: SessionView = { items: [], waiting: [], turns: [], running: false, costUsd: 0, tokens: { input: 0, cached: 0, output: 0 }, sandboxMode: "", mode: "", planMode: false, lastSeq: 0 };
  const state = new SessionState();
  const calls = new Map<string, ToolCallView>();
  // The assistant item of a step that is still streaming, by `turn/step`.
  const streaming = new Map<string, Extract<Item, { kind: "assistant" }>>();
  let turn: TurnSpan | undefined;
  let step: StepSpan | undefined;
  const toolSpans = new Map<string, ToolSpan>();

  for (const e of events) {
    view.lastSeq = e.seq;
    const at = eventTimeMs(e);
    const stateEvent = decodeState(e);
    if (stateEvent) state.apply(stateEvent);
    if (e.sandboxMode) {
      if (e.sandboxMode.changedBy && e.sandboxMode.changedBy !== "session") view.items.push({ kind: "notice", seq: e.seq, tone: "info", text: `sandbox mode is now ${str(e.sandboxMode.mode)} (by ${e.sandboxMode.changedBy})` });
    } else if (e.planMode) {
      view.items.push({ kind: "notice", seq: e.seq, tone: "info", text: e.planMode.on ? "plan mode on" : "plan mode off" });
    } else if (e.userMessage) view.items.push({ kind: "user", seq: e.seq, text: str(e.userMessage.text) });
    else if (e.turnStart) {
      view.running = true;
      turn = { turn: num(e.turnStart.turn), startMs: at, endMs: undefined, reason: undefined, steps: [] };
      view.turns.push(turn);
    } else if (e.turnEnd) {
      view.running = false;
      if (turn) Object.assign(turn, { endMs: at, reason: str(e.turnEnd.reason) });
      if (e.turnEnd.reason && e.turnEnd.reason !== "completed") view.items.push({ kind: "notice", seq: e.seq, tone: "warn", text: `turn ${num(e.turnEnd.turn)} ended: ${e.turnEnd.reason}` });
      for (const item of streaming.values()) item.streaming = false;
      streaming.clear();
    } else if (e.stepStart) {
      step = { turn: num(e.stepStart.turn), step: num(e.stepStart.step), startMs: at, firstTokenMs: undefined, messageMs: undefined, endMs: undefined, tools: [] };
      turn?.steps.push(step);
    } else if (e.stepEnd) {
      if (step) step.endMs = at;
    } else if (e.assistantChunks) {
      const c = e.assistantChunks;
      const key = `${num(c.turn)}/${num(c.step)}`;
      if (step && step.firstTokenMs === undefined) step.firstTokenMs = at;
      let item = streaming.get(key);
      if (!item) {
        item = { kind: "assistant", seq: e.seq, turn: num(c.turn), step: num(c.step), content: "", reasoning: "", calls: [], streaming: true };
        streaming.set(key, item);
        view.items.push(item);
      }
      for (const d of c.deltas ?? []) {
        if (d.kind === "KIND_TEXT") item.content += str(d.text);
        else if (d.kind === "KIND_REASONING") item.reasoning += str(d.text);
      }
    } else if (e.assistantMessage) {
      const m = e.assistantMessage;
      const key = `${num(m.turn)}/${num(m.step)}`;
      if (step) step.messageMs = at;
      const item = streaming.get(key) ?? { kind: "assistant" as const, seq: e.seq, turn: num(m.turn), step: num(m.step), content: "", reasoning: "", calls: [], streaming: false };
      if (!streaming.has(key)) view.items.push(item);
      streaming.delete(key);
      Object.assign(item, { content: str(m.content), reasoning: str(m.reasoningContent), streaming: false });
      item.calls = (m.toolCalls ?? []).map((c) => {
        const call: ToolCallView = { callId: str(c.id), name: str(c.name), arguments: str(c.arguments), inner: [] };
        calls.set(call.callId, call);
        return call;
      });
    } else if (e.toolCall) {
      const span: ToolSpan = { callId: str(e.toolCall.callId), name: str(e.toolCall.name), startMs: at, endMs: undefined };
      toolSpans.set(span.callId, span);
      step?.tools.push(span);
    } else if (e.toolInner) {
      const i = e.toolInner;
      calls.get(str(i.parentCallId))?.inner.push({ index: num(i.index), name: str(i.name), arguments: str(i.arguments), content: str(i.content), isError: i.isError ?? false });
    } else if (e.toolResult) {
      const r = e.toolResult;
      const call = calls.get(str(r.callId));
      if (call) call.result = { content: str(r.content), isError: r.isError ?? false, durationMs: num(r.durationMs), synthesized: r.synthesized ?? false };
      const span = toolSpans.get(str(r.callId));
      if (span) span.endMs = at;
    } else if (e.usage) {
      view.costUsd += num(e.usage.costUsd);
      const u = e.usage.usage ?? {};
      view.tokens.input += num(u.inputMissTokens) + num(u.inputHitTokens);
      view.tokens.cached += num(u.inputHitTokens);
      view.tokens.output += num(u.outputTokens);
    } else if (e.contextSummarized) {
      view.costUsd += num(e.contextSummarized.costUsd);
      view.items.push({ kind: "notice", seq: e.seq, tone: "info", text: `context summarized (events ${num(e.contextSummarized.fromSeq)}–${num(e.contextSummarized.toSeq)})` });
    } else if (e.error) {
      view.items.push({ kind: "notice", seq: e.seq, tone: "error", text: `${str(e.error.code)}: ${str(e.error.message)}` });
    } else if (e.recovery) {
      view.items.push({ kind: "notice", seq: e.seq, tone: "warn", text: `session recovered by ${str(e.recovery.owner)}` });
    } else if (e.llmRetry) {
      view.items.push({ kind: "notice", seq: e.seq, tone: "warn", text: `model call retried (attempt ${num(e.llmRetry.attempt)}): ${str(e.llmRetry.message)}` });
    } else if (e.toolRetry) {
      view.items.push({ kind: "notice", seq: e.seq, tone: "warn", text: `tool call ${str(e.toolRetry.callId)} retried (attempt ${num(e.toolRetry.attempt)}): ${str(e.toolRetry.message)}` });
    } else if (e.approvalDecided) {
      view.items.push({ kind: "notice", seq: e.seq, tone: "info", text: `approval of ${str(e.approvalDecided.callId)}: ${str(e.approvalDecided.decision)} (by ${str(e.approvalDecided.decidedBy)})` });
    } else if (e.questionAnswered) {
      view.items.push({ kind: "notice", seq: e.seq, tone: "info", text: `question ${str(e.questionAnswered.callId)}: ${str(e.questionAnswered.outcome)}` });
    } else if (e.planDecided) {
      view.items.push({ kind: "notice", seq: e.seq, tone: "info", text: `plan ${str(e.planDecided.decision)}${e.planDecided.feedback ? `: ${e.planDecided.feedback}` : ""}` });
    } else if (e.rulesLoaded) {
      const files = e.rulesLoaded.files ?? [];
      view.items.push({ kind: "context", seq: e.seq, what: files.length ? "rules loaded" : "rules retracted", sources: files.map((f) => str(f.label)), text: files.map((f) => `<rules source="${str(f.label)}">\n${str(f.content)}\n</rules>`).join("\n\n") });
    } else if (e.skillsCatalog) {
      const skills = e.skillsCatalog.skills ?? [];
      view.items.push({ kind: "context", seq: e.seq, what: `skills catalog (${skills.length})`, sources: [...new Set(skills.map((s) => str(s.source)))], text: skills.map((s) => `${str(s.name)} [${str(s.source)}]: ${str(s.description)}`).join("\n") });
    } else if (e.skillInvoked) {
      const s = e.skillInvoked;
      view.items.push({ kind: "context", seq: e.seq, what: `skill /${str(s.name)}${s.arguments ? ` ${s.arguments}` : ""}`, sources: [str(s.source)], text: str(s.body) });
    } else if (e.hookContext) {
      view.items.push({ kind: "context", seq: e.seq, what: `hook ${str(e.hookContext.hookEvent)}`, sources: [str(e.hookContext.source)], text: str(e.hookContext.text) });
    } else if (e.rulesWarning) {
      view.items.push({ kind: "notice", seq: e.seq, tone: "warn", text: `rules ${str(e.rulesWarning.label)}: ${str(e.rulesWarning.message)}` });
    } else if (e.skillsWarning) {
      view.items.push({ kind: "notice", seq: e.seq, tone: "warn", text: `skills ${str(e.skillsWarning.source)}: ${str(e.skillsWarning.message)}` });
    } else if (e.hookWarning) {
      view.items.push({ kind: "notice", seq: e.seq, tone: "warn", text: `hooks ${str(e.hookWarning.source)}: ${str(e.hookWarning.message)}` });
    } else if (e.mcpWarning) {
      view.items.push({ kind: "notice", seq: e.seq, tone: "warn", text: `MCP ${str(e.mcpWarning.server)}: ${str(e.mcpWarning.message)}` });
    }
  }
  // Before session/created (no history yet) the page shows the session's index row instead.
  if (state.created) Object.assign(view, { mode: state.mode, sandboxMode: state.sandboxMode });
  view.planMode = state.planMode;
  view.waiting = state.waiting.map(waitingView);
  return view;
}

/** The codec of each payload that changes the session's state: only these are decoded (with their protobuf defaults) for the fold. */
const STATE_PAYLOADS: { readonly [C in SessionStateCase]: { fromJSON(json: unknown): Extract<NonNullable<StateEvent["payload"]>, { $case: C }>["value"] } } = {
  sessionCreated: SessionCreated, sessionMode: SessionModeSet, sandboxMode: SandboxModeSet, approvalPolicy: ApprovalPolicySet, planMode: PlanModeSet,
  todoUpdated: TodoUpdated, toolDefined: ToolDefined, userMessage: UserMessage, turnStart: TurnStart, turnEnd: TurnEnd, approvalAsked: ApprovalAsked,
  approvalDecided: ApprovalDecided, questionAsked: QuestionAsked, questionAnswered: QuestionAnswered, planSubmitted: PlanSubmitted, planDecided: PlanDecided,
};
const STATE_CASES = Object.keys(STATE_PAYLOADS) as SessionStateCase[];

/** `e` as the fold reads it when its payload changes the session's state, else undefined. */
function decodeState(e: EventJson): StateEvent | undefined {
  const c = STATE_CASES.find((k) => e[k] !== undefined);
  if (!c) return undefined;
  const ms = eventTimeMs(e);
  const time = Number.isNaN(ms) ? undefined : { seconds: Math.floor(ms / 1000), nanos: Math.round((ms % 1000) * 1e6) };
  return { seq: e.seq, time, payload: { $case: c, value: STATE_PAYLOADS[c].fromJSON(e[c]) } as StateEvent["payload"] };
}

function waitingView(w: Waiting): WaitingView {
  switch (w.kind) {
    case "approval": {
      const a = w.asked;
      return {
        kind: "approval", callId: a.callId, tool: a.toolName, operation: a.operation, justification: a.justification,
        approvalKind: a.kind === "tool" ? "tool" : "sandbox", currentMode: a.currentMode, requestedMode: a.requestedMode, seq: w.seq,
      };
    }
    case "question":
      return {
        kind: "question", callId: w.asked.callId, seq: w.seq,
        questions: w.asked.questions.map((q) => ({ header: q.header, question: q.question, multiSelect: q.multiSelect, options: q.options.map((o) => ({ label: o.label, description: o.description })) })),
      };
    case "plan":
      return { kind: "plan", callId: w.asked.callId, plan: w.asked.plan, seq: w.seq };
  }
}

/** The parts of a step's time: waiting for the first token, decoding, running tools (ms; undefined while unknown). */
export function stepParts(s: StepSpan): { waitMs: number | undefined; decodeMs: number | undefined; toolMs: number | undefined } {
  const first = s.firstTokenMs ?? s.messageMs;
  const waitMs = first === undefined ? undefined : first - s.startMs;
  const decodeMs = s.messageMs === undefined || first === undefined ? undefined : s.messageMs - first;
  const ends = s.tools.map((t) => t.endMs);
  const toolMs = s.tools.length === 0 ? 0 : ends.some((x) => x === undefined) ? undefined : Math.max(...(ends as number[])) - Math.min(...s.tools.map((t) => t.startMs));
  return { waitMs, decodeMs, toolMs };
}

/** Human-readable milliseconds. */
export function ms(value: number | undefined): string {
  if (value === undefined || Number.isNaN(value)) return "…";
  return value >= 1000 ? `${(value / 1000).toFixed(2)} s` : `${Math.round(value)} ms`;
}
