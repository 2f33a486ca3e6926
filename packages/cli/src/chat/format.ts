// What `tack chat` prints besides the transcript, and how it reads what a person types: slash
// commands, approval and question cards and their answers, `/cost` and `/context`. Pure functions;
// every string from the session is made terminal-safe here.
import type { Answer, CompactedSession, ContextSize, SandboxMode, SessionDetail, TenantUsage } from "@tack/client";
import { terminalSafe } from "../sanitize.js";

/** The sandbox modes `/mode` takes, narrowest first. */
export const SANDBOX_MODES: readonly SandboxMode[] = ["read-only", "workspace-write", "danger-full-access"];

/** The slash commands `tack chat` runs itself; any other `/name …` line goes to the session (a skill). */
export const SLASH_COMMANDS = ["help", "cost", "context", "mode", "compact", "export", "fork", "details", "exit", "quit"] as const;
export type SlashName = (typeof SLASH_COMMANDS)[number];

/** `/help`. */
export const CHAT_HELP = `Type a message and press Enter to send it to the session. While a turn runs, its reply streams in:
assistant text as it arrives, each tool call as ▶ [N] and its result cut to a few lines.

  /details N      the whole call N: arguments, inner calls and the complete result
  /cost           the session's cost and tokens (in total and per turn) and the tenant's spend
  /context        the next model request's size by part (system prompt, tools, conversation)
  /mode [MODE]    show the sandbox mode, or change it: read-only, workspace-write, danger-full-access
  /compact [TEXT] summarize the conversation now: the summary replaces it for the model (TEXT: what it should keep)
  /export [FILE]  write the session (log and spilled outputs) as one JSON bundle (default ./<session>.json)
  /fork [N]       continue in a new session holding this one's log up to the end of turn N (default: the last ended turn)
  /help           this help
  /exit           leave (also Ctrl-D, or Ctrl-C twice at the prompt); the session stays in Tack
  /NAME [ARGS]    any other slash command is sent as a message: it runs the skill NAME

Approvals are asked inline: y allows the call once, n denies it. Questions list numbered options:
answer with a number (several, comma-separated, when it says so) or type your own answer.
Ctrl-C while a turn runs cancels the turn; a second Ctrl-C stops following it (it goes on in Tack).
`;

/** A parsed slash line: a command `tack chat` runs, or undefined for a line that is sent as a message. */
export function parseSlash(line: string): { name: SlashName; args: string } | undefined {
  const match = /^\/([a-z]+)(?:\s+([\s\S]*))?$/.exec(line.trim());
  if (!match || !(SLASH_COMMANDS as readonly string[]).includes(match[1]!)) return undefined;
  return { name: match[1] as SlashName, args: (match[2] ?? "").trim() };
}

/** The approval card: the tool, the exact operation, the mode it asks for and the model's justification. */
export function approvalCard(asked: { toolName: string; operation: string; currentMode: string; requestedMode: string; justification: string; kind: string }): string {
  const what = asked.kind === "tool"
    ? `${asked.toolName} asks for a yes before it runs`
    : `${asked.toolName} asks to run in ${asked.requestedMode || "a wider sandbox"} (the session runs in ${asked.currentMode || "its sandbox mode"})`;
  const lines = [`⚠ approval: ${what}`, `  operation: ${asked.operation || "(not given)"}`, `  why: ${asked.justification || "(no reason given)"}`];
  return terminalSafe(`${lines.join("\n")}\n`);
}

/** How a typed answer to an approval reads: allow once, deny, or not understood (ask again). */
export function approvalAnswer(line: string): "allow_once" | "reject" | undefined {
  const text = line.trim().toLowerCase();
  if (text === "y" || text === "yes") return "allow_once";
  if (text === "n" || text === "no") return "reject";
  return undefined;
}

/** One question of an `ask_user_question` call. */
export interface QuestionJson {
  header: string;
  question: string;
  multiSelect: boolean;
  options: Array<{ label: string; description: string }>;
}

/** A question with its numbered options. */
export function questionCard(question: QuestionJson, index: number, count: number): string {
  const head = `? ${count > 1 ? `(${index + 1}/${count}) ` : ""}${question.header ? `${question.header}: ` : ""}${question.question}`;
  const lines = [head];
  question.options.forEach((option, i) => lines.push(`  ${i + 1}. ${option.label}${option.description ? ` — ${option.description}` : ""}`));
  lines.push(question.options.length === 0
    ? "  (type your answer)"
    : `  (${question.multiSelect ? "one or more numbers, comma-separated" : "a number"}, or type your own answer)`);
  return terminalSafe(`${lines.join("\n")}\n`);
}

/**
 * A typed answer to `question`: option numbers (`2`, or `1,3` where several may be chosen) become
 * the options' labels; any other text is the person's own answer. An empty line, a number out of
 * range, or several numbers for a single-choice question is an error message (ask again).
 */
export function questionAnswer(question: QuestionJson, line: string): Answer | string {
  const text = line.trim();
  if (text === "") return "type a number or your own answer";
  if (/^\d+(\s*,\s*\d+)*$/.test(text) && question.options.length > 0) {
    const numbers = [...new Set(text.split(",").map((n) => Number(n.trim())))];
    const bad = numbers.find((n) => n < 1 || n > question.options.length);
    if (bad !== undefined) return `there is no option ${bad}: choose 1 to ${question.options.length}`;
    if (numbers.length > 1 && !question.multiSelect) return "choose one option (this question takes one)";
    return { selected: numbers.map((n) => question.options[n - 1]!.label) };
  }
  return { other: text };
}

/** `/compact`: what the summary replaced and how much smaller the next request is, or why nothing was compacted. */
export function compactText(result: CompactedSession): string {
  if (!result.compacted) return terminalSafe(`${result.note || "nothing to compact"}\n`);
  return terminalSafe(`compacted: the conversation (seq ${result.from_seq}-${result.to_seq}) is now a summary for the model; `
    + `next request about ${count(result.tokens_before)} → ${count(result.tokens_after)} tokens · summary ${usd(result.cost_usd)} (the whole log stays: tack events)\n`);
}

/** `/cost`: the session's cost and tokens, per turn, and the tenant's spend. */
export function costText(detail: Pick<SessionDetail, "usage" | "model">, tenant: TenantUsage | undefined): string {
  const u = detail.usage;
  const input = u.tokens.input_miss + u.tokens.input_hit;
  const hit = input > 0 ? ` (cache hit ${count(u.tokens.input_hit)}, ${Math.round((100 * u.tokens.input_hit) / input)}%)` : "";
  const lines = [
    `cost ${usd(u.cost_usd)} · ${detail.model}`,
    `tokens: input ${count(input)}${hit} · output ${count(u.tokens.output)}${u.tokens.reasoning ? ` (reasoning ${count(u.tokens.reasoning)})` : ""}`,
  ];
  if (u.turns.length > 0) lines.push(`per turn: ${u.turns.map((t) => `${t.turn}: ${usd(t.cost_usd)}`).join(" · ")}`);
  if (tenant) lines.push(`tenant ${tenant.tenant} has spent ${usd(tenant.cost_usd)} in all`);
  return terminalSafe(`${lines.join("\n")}\n`);
}

/** `/context`: the next request's size by part, as numbers and a bar of 40 cells. */
export function contextText(context: ContextSize): string {
  if (context.tokens === null) return terminalSafe(`context: ${context.note}\n`);
  const t = context.tokens;
  const parts: Array<[string, number, string]> = [["system prompt", t.system_prompt, "S"], ["tools", t.tools, "T"], ["conversation", t.conversation, "C"]];
  const width = 40;
  let bar = "";
  if (t.total > 0) for (const [, n, letter] of parts) bar += letter.repeat(Math.round((width * n) / t.total));
  const lines = [
    `context: ${count(t.total)} tokens (${context.tokenizer})${context.estimated_total !== t.total ? `, about ${count(context.estimated_total)} as the model counts` : ""}`,
    `  [${bar.slice(0, width).padEnd(width, " ")}]`,
    ...parts.map(([name, n, letter]) => `  ${letter} ${name.padEnd(13)} ${count(n).padStart(9)}  ${t.total > 0 ? `${Math.round((100 * n) / t.total)}%` : ""}`),
  ];
  return terminalSafe(`${lines.join("\n")}\n`);
}

function usd(n: number): string {
  return `$${n.toFixed(n >= 1 ? 2 : 6)}`;
}

function count(n: number): string {
  return n.toLocaleString("en-US");
}
