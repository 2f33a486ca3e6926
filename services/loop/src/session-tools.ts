// Tools the loop carries out itself (ToolSpec handler `session`): they change the session, not the sandbox.
import { TackError } from "@tack/bus";
import { LinearRegExp } from "@tack/linear-regex";
import { draft, timestampMs, type Draft, type SessionState } from "@tack/log";
import type { Event, PlanDecided, Question, QuestionAnswer, QuestionAnswered, QuestionAsked, TodoItem, ToolCall, ToolSpec } from "@tack/proto";
import { z } from "zod";
import { deniableOf, escalationOf } from "./approvals.js";
import { PendingWaits } from "./waits.js";

const SOURCE = "loop";

/** What the plan decision of a person can be. */
export const PLAN_DECISIONS = ["approve", "reject"] as const;

/** Wording the model reads from the session tools and from plan mode. */
export const SESSION_TOOL_TEXT = {
  todos: (items: readonly TodoItem[]) => {
    const count = (status: string) => items.filter((i) => i.status === status).length;
    return `Task list updated: ${items.length} task${items.length === 1 ? "" : "s"} (${count("in_progress")} in progress, ${count("pending")} pending, ${count("completed")} completed).`;
  },
  questionCancelled: "Cancelled: the turn was stopped while the question waited; there is no answer.",
  questionUnavailable: "Unavailable: no one answered the question (no one can answer, or not in time). Decide yourself and say what you assumed, or ask again later.",
  planModeRefused: (tool: string) =>
    `Refused: the session is in plan mode, where ${tool} may not run because it can change the workspace; the call did not run. Explore with tools that only read, then submit your plan with exit_plan_mode for the user's approval.`,
  planModeEscalation: "Refused: the session is in plan mode, where no call may ask for a wider sandbox mode; the call did not run. Submit your plan with exit_plan_mode first.",
  notInPlanMode: "Not in plan mode: there is nothing to approve; go ahead with the changes.",
  planApproved: (feedback: string) =>
    `Approved by the user: plan mode is off, so you can now make changes. Carry out the plan.${feedback ? `\nThe user's notes: ${feedback}` : ""}`,
  planRejected: (feedback: string) =>
    `Rejected by the user: you are still in plan mode and nothing may be changed.${feedback ? `\nThe user's feedback: ${feedback}` : " They gave no reason."}\nRevise the plan (ask with ask_user_question if something is unclear) and submit it again with exit_plan_mode.`,
  planCancelled: "Cancelled: the turn was stopped while the plan waited for review; you are still in plan mode.",
  planUnavailable: "Unavailable: no one reviewed the plan (no one can, or not in time); you are still in plan mode. Tell the user the plan waits for their approval.",
} as const;

/** The questions a session waits on; `log` appends `question/answered`. */
export function pendingQuestions(log: (answered: QuestionAnswered) => Promise<number>): PendingWaits<QuestionAnswered> {
  return new PendingWaits<QuestionAnswered>({
    log,
    timedOut: (callId) => ({ callId, outcome: "unavailable", answers: [], answeredBy: "timeout" }),
    cancelled: (callId, by) => ({ callId, outcome: "cancelled", answers: [], answeredBy: by }),
    notPending: (callId) => new TackError("loop.no_pending_question", `no question is pending for call ${JSON.stringify(callId)}; it was already answered or never asked (see the session's question/asked events)`, {
      details: { call_id: callId },
    }),
  });
}

/** The plans a session waits on; `log` appends `plan/decided` (and `plan/mode` off with an approval). */
export function pendingPlans(log: (decided: PlanDecided) => Promise<number>): PendingWaits<PlanDecided> {
  return new PendingWaits<PlanDecided>({
    log,
    timedOut: (callId) => ({ callId, decision: "unavailable", feedback: "", decidedBy: "timeout" }),
    cancelled: (callId, by) => ({ callId, decision: "cancelled", feedback: "", decidedBy: by }),
    notPending: (callId) => new TackError("loop.no_pending_plan", callId
      ? `no plan is pending for call ${JSON.stringify(callId)}; it was already decided or never submitted (see the session's plan/submitted events)`
      : "no plan is waiting for review in this session; the model submits one with exit_plan_mode while in plan mode", { details: { call_id: callId } }),
  });
}

/** Why plan mode refuses `call`, or undefined when it may run: an escalation, or a tool that can write while the sandbox would let it. */
export function planModeRefusal(call: ToolCall, tool: ToolSpec | undefined, sandboxMode: string): string | undefined {
  if (escalationOf(call, tool)) return SESSION_TOOL_TEXT.planModeEscalation;
  // In a read-only sandbox nothing can be written anyway, so such a tool (bash) still serves to look around.
  if (deniableOf(tool).includes("writes") && sandboxMode !== "read-only") return SESSION_TOOL_TEXT.planModeRefused(call.name);
  return undefined;
}

/** What a session tool call needs from its session. */
export interface SessionToolDeps {
  /** The whole log so far (a call already carried out before a crash is not carried out again). */
  readonly events: readonly Event[];
  /** The session's state as the log says it now. */
  readonly state: SessionState;
  readonly append: (...drafts: Draft[]) => Promise<Event[]>;
  readonly questions: PendingWaits<QuestionAnswered>;
  readonly plans: PendingWaits<PlanDecided>;
  /** How long a question or plan waits for a person (the approval timeout). */
  readonly waitMs: number;
}

/**
 * Carries out `call` of a session tool (`tool` its ToolSpec, whose `session_operation` says what
 * to do): arguments validated against the tool's own schema, then the session changed. Each is idempotent by call id, so crash
 * recovery simply runs an unanswered one again: a task list or question already logged is
 * not logged twice, and a question or plan already asked waits again from when it was asked.
 */
export async function runSessionTool(deps: SessionToolDeps, call: ToolCall, tool: ToolSpec, turn: number, step: number): Promise<{ content: string; isError: boolean }> {
  const parsed = parseArguments(call, tool);
  if (typeof parsed === "string") return { content: parsed, isError: true };
  switch (tool.sessionOperation) {
    case "todos":
      return todoWrite(deps, call, parsed as { todos: TodoItem[] }, turn, step);
    case "question":
      return askQuestions(deps, call, parsed as { questions: Array<Omit<Question, "multiSelect"> & { multi_select: boolean }> }, turn, step);
    case "plan":
      return submitPlan(deps, call, (parsed as { plan: string }).plan, turn, step);
    case "search": {
      const { query, regex, limit } = parsed as { query: string; regex: boolean; limit: number };
      return searchLog(deps.events, { query, regex, limit, exceptCall: call.id });
    }
    default:
      return {
        content: `Not run: ${call.name} is declared as a session tool with operation ${JSON.stringify(tool.sessionOperation)}, which this loop does not carry out (it knows todos, question, plan and search); the loop and the tools service must run the same version.`,
        isError: true,
      };
  }
}

/** The arguments as the tool's schema reads them (defaults filled in), or the error text the model reads, worded as the tools service words it. */
function parseArguments(call: ToolCall, tool: ToolSpec): Record<string, unknown> | string {
  let json: unknown;
  try {
    json = JSON.parse(call.arguments || "{}");
  } catch (error) {
    return `Invalid arguments for ${call.name}: not valid JSON (${(error as Error).message})`;
  }
  const parsed = z.fromJSONSchema(JSON.parse(tool.parametersJson || "{}") as never).safeParse(json);
  if (parsed.success) return parsed.data as Record<string, unknown>;
  const problems = parsed.error.issues.map((issue) => `${issue.path.join(".") || "arguments"}: ${issue.message}`);
  return `Invalid arguments for ${call.name}: ${problems.join("; ")}`;
}

async function todoWrite(deps: SessionToolDeps, call: ToolCall, args: { todos: TodoItem[] }, turn: number, step: number) {
  const items = args.todos.map((t) => ({ id: t.id ?? "", content: t.content, status: t.status }));
  const ids = items.map((i) => i.id).filter((id) => id !== "");
  const twice = ids.find((id, i) => ids.indexOf(id) !== i);
  if (twice !== undefined) return { content: `Invalid arguments for ${call.name}: id ${JSON.stringify(twice)} is used by more than one task; give each task its own id or none`, isError: true };
  if (!deps.events.some((e) => e.payload?.$case === "todoUpdated" && e.payload.value.callId === call.id)) {
    await deps.append(draft("todoUpdated", { callId: call.id, items, turn, step }, SOURCE));
  }
  return { content: SESSION_TOOL_TEXT.todos(items), isError: false };
}

async function askQuestions(
  deps: SessionToolDeps, call: ToolCall, args: { questions: Array<Omit<Question, "multiSelect"> & { multi_select: boolean }> }, turn: number, step: number,
) {
  const questions: Question[] = args.questions.map((q) => ({
    header: q.header, question: q.question, multiSelect: q.multi_select, options: q.options.map((o) => ({ label: o.label, description: o.description ?? "" })),
  }));
  const answered = await waitOnce(deps, deps.questions, call.id, "questionAsked", "questionAnswered",
    () => deps.append(draft("questionAsked", { callId: call.id, questions, turn, step }, SOURCE)));
  if (answered.outcome === "answered") return { content: formatAnswers(questions, answered.answers), isError: false };
  return { content: answered.outcome === "cancelled" ? SESSION_TOOL_TEXT.questionCancelled : SESSION_TOOL_TEXT.questionUnavailable, isError: true };
}

async function submitPlan(deps: SessionToolDeps, call: ToolCall, plan: string, turn: number, step: number) {
  const submitted = deps.events.some((e) => e.payload?.$case === "planSubmitted" && e.payload.value.callId === call.id);
  if (!submitted && !deps.state.planMode) return { content: SESSION_TOOL_TEXT.notInPlanMode, isError: true };
  const decided = await waitOnce(deps, deps.plans, call.id, "planSubmitted", "planDecided",
    () => deps.append(draft("planSubmitted", { callId: call.id, plan, turn, step }, SOURCE)));
  switch (decided.decision) {
    case "approve":
      return { content: SESSION_TOOL_TEXT.planApproved(decided.feedback), isError: false };
    case "reject":
      return { content: SESSION_TOOL_TEXT.planRejected(decided.feedback), isError: true };
    case "cancelled":
      return { content: SESSION_TOOL_TEXT.planCancelled, isError: true };
    default:
      return { content: SESSION_TOOL_TEXT.planUnavailable, isError: true };
  }
}

/**
 * Asks once (the `asked` event) and waits for the outcome (the `ended` event): an outcome already
 * logged is returned, an ask already logged is waited on again with its deadline counted from
 * when it was logged (after a crash), and otherwise `ask` logs it now.
 */
async function waitOnce<T extends { callId: string }>(
  deps: SessionToolDeps, waits: PendingWaits<T>, callId: string, asked: "questionAsked" | "planSubmitted", ended: "questionAnswered" | "planDecided",
  ask: () => Promise<unknown>,
): Promise<T> {
  let askedAt: number | undefined;
  for (const e of deps.events) {
    const p = e.payload;
    if (p?.$case === ended && p.value.callId === callId) return p.value as unknown as T;
    if (p?.$case === asked && p.value.callId === callId) askedAt = timestampMs(e.time);
  }
  if (askedAt !== undefined) return waits.wait(callId, Promise.resolve(), askedAt + deps.waitMs);
  const logged = ask();
  // Parked before the event is logged, so an answer sent the moment it appears finds the call waiting.
  const outcome = waits.wait(callId, logged, Date.now() + deps.waitMs);
  await logged;
  return outcome;
}

/** Checks `answers` against the questions `asked` of call `callId`; throws `loop.bad_answer` naming what is wrong. */
export function checkAnswers(asked: QuestionAsked | undefined, callId: string, answers: readonly QuestionAnswer[]): void {
  if (!asked) return; // nothing pending: the wait refuses it by name
  const { questions } = asked;
  const bad = (message: string) => new TackError("loop.bad_answer", `${message}; answer each question of call ${callId} in order with the labels of its options (see its question/asked event) or your own words in other`);
  if (answers.length !== questions.length) throw bad(`${answers.length} answer${answers.length === 1 ? "" : "s"} given for ${questions.length} question${questions.length === 1 ? "" : "s"}`);
  questions.forEach((q, i) => {
    const a = answers[i]!;
    const labels = q.options.map((o) => o.label);
    const unknown = a.selected.find((s) => !labels.includes(s));
    if (unknown !== undefined) throw bad(`answer ${i + 1}: ${JSON.stringify(unknown)} is not an option of "${q.header}" (options: ${labels.map((l) => JSON.stringify(l)).join(", ")})`);
    if (new Set(a.selected).size !== a.selected.length) throw bad(`answer ${i + 1}: an option is chosen twice`);
    if (!q.multiSelect && a.selected.length > 1) throw bad(`answer ${i + 1}: "${q.header}" takes one option, got ${a.selected.length}`);
    if (a.selected.length === 0 && !a.other.trim()) throw bad(`answer ${i + 1}: choose an option of "${q.header}" or give other`);
  });
}

/** The answers as the model reads them, one block per question. */
function formatAnswers(questions: readonly Question[], answers: readonly QuestionAnswer[]): string {
  const lines = ["The user answered:"];
  questions.forEach((q, i) => {
    const a = answers[i];
    const parts = [...(a?.selected.length ? [a.selected.join(", ")] : []), ...(a?.other.trim() ? [`in their own words: ${a.other.trim()}`] : [])];
    lines.push(`${i + 1}. ${q.header}: ${q.question}`, `   -> ${parts.join("; ") || "(no answer)"}`);
  });
  return lines.join("\n");
}

/** Characters of each snippet on either side of the first match. */
const SNIPPET_CONTEXT = 120;

/**
 * Searches the whole log (compacted-away parts too, since the log keeps everything) for
 * `query`, case-insensitive: user and assistant messages, the calls the model made and tool
 * results, except the call doing the search. Patterns run on RE2 (linear time in the text).
 */
export function searchLog(events: readonly Event[], options: { query: string; regex: boolean; limit: number; exceptCall: string }): { content: string; isError: boolean } {
  const docs: Array<{ seq: number; label: string; text: string }> = [];
  for (const e of events) {
    const p = e.payload;
    if (p?.$case === "userMessage") docs.push({ seq: e.seq, label: "user", text: p.value.text });
    else if (p?.$case === "assistantMessage") {
      if (p.value.content) docs.push({ seq: e.seq, label: "assistant", text: p.value.content });
      for (const c of p.value.toolCalls) {
        if (c.id !== options.exceptCall) docs.push({ seq: e.seq, label: `assistant call ${c.name}`, text: c.arguments });
      }
    } else if (p?.$case === "toolResult" && p.value.callId !== options.exceptCall) {
      docs.push({ seq: e.seq, label: `${p.value.name} result${p.value.spillObject ? " (preview of a spilled result)" : ""}`, text: p.value.content });
    }
  }
  let pattern: LinearRegExp;
  try {
    // The model's pattern runs on a linear-time engine (RE2): no pattern can hold the loop (decision 0020).
    pattern = new LinearRegExp(options.regex ? options.query : options.query.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"), { ignoreCase: true });
  } catch (error) {
    return { content: `Invalid arguments for session_search: query ${(error as Error).message}; fix it or set regex to false`, isError: true };
  }
  // Indexes of matching docs with the position of their first match.
  const found: Array<[number, number]> = [];
  docs.forEach((doc, i) => {
    const match = pattern.exec(doc.text);
    if (match) found.push([i, match.index]);
  });
  if (found.length === 0) return { content: `No matches for ${JSON.stringify(options.query)} in this session.`, isError: false };
  const shown = found.slice(-options.limit);
  const lines = [found.length > shown.length ? `${found.length} matches; the last ${shown.length}:` : `${found.length} match${found.length === 1 ? "" : "es"}:`];
  for (const [i, at] of shown) {
    const { seq, label, text } = docs[i]!;
    const from = Math.max(0, at - SNIPPET_CONTEXT);
    const to = Math.min(text.length, at + SNIPPET_CONTEXT);
    const snippet = `${from > 0 ? "..." : ""}${text.slice(from, to).replace(/\s+/g, " ")}${to < text.length ? "..." : ""}`;
    lines.push(`seq ${seq} (${label}): ${snippet}`);
  }
  return { content: lines.join("\n"), isError: false };
}
