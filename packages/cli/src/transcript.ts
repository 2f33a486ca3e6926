// How events look in a terminal: a readable transcript for `tack run`, one-line summaries for `tack events`.
import { styleText } from "node:util";
import { Delta_Kind, type Event } from "@tack/proto/events";
import { terminalSafe, terminalSafeDeep, terminalSafeJson } from "./sanitize.js";

/** Lines of a tool result shown before the rest is cut. */
export const RESULT_LINES = 20;
const LINE_WIDTH = 240;

type Color = "dim" | "red" | "yellow" | "cyan" | "bold" | "green";

/** How a transcript is drawn. */
export interface TranscriptOptions {
  /** Style with ANSI colors (decided by the caller: a TTY, no NO_COLOR). */
  readonly color: boolean;
  /** Lines of a tool result shown before the rest is cut (default RESULT_LINES). */
  readonly resultLines?: number;
  /** Numbers of tool calls: each call and result is labelled `[n]` and a cut result points at `/details n` (tack chat). */
  readonly calls?: { number(callId: string): number | undefined };
}

/**
 * Turns a session's events into transcript text. Stateful: assistant text is printed as its
 * chunks stream in, so the complete `assistant/message` only closes the line instead of
 * repeating it. Feed events in seq order; write whatever `render` returns.
 */
export class TranscriptRenderer {
  readonly #color: boolean;
  readonly #resultLines: number;
  readonly #calls: TranscriptOptions["calls"];
  // Steps (`turn:step`) whose text or reasoning was already printed from chunks.
  readonly #streamed = new Set<string>();
  // What the last characters written were, so that the next block starts on a fresh line.
  #open: "none" | "text" | "reasoning" = "none";
  // The call printed last: a result that does not answer it (parallel calls) gets a header naming its call.
  #lastCallId = "";

  constructor(options: TranscriptOptions) {
    this.#color = options.color;
    this.#resultLines = options.resultLines ?? RESULT_LINES;
    this.#calls = options.calls;
  }

  /**
   * The text to write for one event (may be empty, may end mid-line while chunks stream).
   * Every string of the event is made terminal-safe before it is formatted, so that only the
   * renderer's own styling reaches the terminal as escape sequences.
   */
  render(event: Event): string {
    const payload = terminalSafeDeep(event.payload);
    if (!payload) return "";
    switch (payload.$case) {
      case "assistantChunks": {
        let out = "";
        for (const delta of payload.value.deltas) {
          const kind = delta.kind === Delta_Kind.KIND_REASONING ? "reasoning" : delta.kind === Delta_Kind.KIND_TEXT ? "text" : undefined;
          if (!kind || delta.text === "") continue;
          if (this.#open !== "none" && this.#open !== kind) out += "\n";
          this.#open = kind;
          this.#streamed.add(`${payload.value.turn}:${payload.value.step}`);
          out += kind === "reasoning" ? this.#style("dim", delta.text) : delta.text;
        }
        return out;
      }
      case "assistantMessage": {
        const message = payload.value;
        if (this.#streamed.has(`${message.turn}:${message.step}`)) return this.#endLine();
        const parts: string[] = [];
        if (message.reasoningContent.trim()) parts.push(this.#style("dim", message.reasoningContent.trim()));
        if (message.content.trim()) parts.push(message.content.trim());
        return parts.length ? this.#block(parts.join("\n")) : "";
      }
      case "userMessage":
        return this.#block(this.#style("bold", `› ${payload.value.text}`));
      case "toolCall":
        this.#lastCallId = payload.value.callId;
        return this.#block(`${this.#style("cyan", "▶")} ${this.#label(payload.value.callId)}${this.#style("bold", payload.value.name)} ${oneLine(compactJson(payload.value.arguments), LINE_WIDTH)}`);
      case "toolResult": {
        const result = payload.value;
        const lines = result.content.replace(/\s+$/, "").split("\n");
        const max = this.#resultLines;
        const shown = result.content.trim() === "" ? [this.#style("dim", "(no output)")] : lines.slice(0, max).map((line) => truncate(line, LINE_WIDTH));
        const body = shown.map((line) => `    ${result.isError ? this.#style("red", line) : line}`);
        const n = this.#calls?.number(result.callId);
        const more = n === undefined ? "" : ` · /details ${n}`;
        if (lines.length > max) body.push(this.#style("dim", `    … ${lines.length - max} more lines${more}`));
        else if (more && result.fullBytes > result.content.length) body.push(this.#style("dim", `    … cut at ${result.content.length} of ${result.fullBytes} bytes${more}`));
        if (result.synthesized) body.push(this.#style("dim", "    (written by crash recovery, not by the tool)"));
        if (result.callId !== this.#lastCallId) body.unshift(`${this.#style("cyan", "◀")} ${this.#label(result.callId)}${this.#style("bold", result.name)} ${this.#style("dim", result.callId)}`);
        this.#lastCallId = "";
        return this.#block(body.join("\n"));
      }
      case "error": {
        const error = payload.value;
        return this.#block(this.#style("red", `✗ ${error.code}: ${error.message}${error.retryable ? " (retryable)" : ""}`));
      }
      case "recovery":
        return this.#block(this.#style("yellow", `↻ ${terminalSafe(summarize(event))}`));
      case "turnEnd": {
        const end = payload.value;
        const color: Color = end.reason === "completed" ? "dim" : end.reason === "error" ? "red" : "yellow";
        return this.#block(this.#style(color, `— turn ${end.turn} ${end.reason} after ${plural(end.steps, "step")}`));
      }
      default:
        return "";
    }
  }

  /** Closes a line left open by streamed chunks. */
  finish(): string {
    return this.#endLine();
  }

  /** `[n] ` of a numbered call (tack chat), else nothing. */
  #label(callId: string): string {
    const n = this.#calls?.number(callId);
    return n === undefined ? "" : this.#style("dim", `[${n}] `);
  }

  #block(text: string): string {
    return `${this.#endLine()}${text}\n`;
  }

  #endLine(): string {
    const open = this.#open !== "none";
    this.#open = "none";
    return open ? "\n" : "";
  }

  #style(color: Color, text: string): string {
    // Whether to color is decided once by the caller (TTY, NO_COLOR), not again per stream here.
    return this.#color ? styleText(color, text, { validateStream: false }) : text;
  }
}

/** One line for `tack events`: seq, type and a summary of the payload, with terminal controls made visible. */
export function eventLine(event: Event): string {
  return terminalSafe(`${String(event.seq).padStart(4)}  ${event.type.padEnd(18)} ${summarize(event)}`.trimEnd());
}

/** A one-line summary of an event's payload (empty for payloads it does not know); raw text, see `terminalSafe` before printing it. */
export function summarize(event: Event): string {
  const payload = event.payload;
  if (!payload) return "";
  switch (payload.$case) {
    case "sessionCreated": {
      const s = payload.value;
      return `${s.sessionId} model=${s.model} workspace=${s.workspace} mode=${s.mode}${s.title ? ` title=${JSON.stringify(s.title)}` : ""}`;
    }
    case "permissionPreset":
      return payload.value.preset;
    case "sandboxMode":
      return payload.value.mode;
    case "approvalPolicy":
      return payload.value.policy;
    case "turnStart":
      return `turn ${payload.value.turn}`;
    case "turnEnd":
      return `turn ${payload.value.turn} ${payload.value.reason} after ${plural(payload.value.steps, "step")}`;
    case "stepStart":
      return `turn ${payload.value.turn} step ${payload.value.step}`;
    case "stepEnd":
      return `turn ${payload.value.turn} step ${payload.value.step}, ${plural(payload.value.toolCalls, "tool call")}`;
    case "requestHeader": {
      const h = payload.value;
      return `${h.reason}: ${h.model}, ${plural(h.tools.length, "tool")}, system prompt ${h.systemPrompt.length} chars`;
    }
    case "assistantChunks":
      return plural(payload.value.deltas.length, "delta");
    case "assistantMessage": {
      const m = payload.value;
      const calls = m.toolCalls.length ? ` [${m.toolCalls.map((call) => call.name).join(", ")}]` : "";
      return `${oneLine(m.content, 100) || (m.toolCalls.length ? "" : "(empty)")}${calls}`.trim();
    }
    case "userMessage":
      return oneLine(payload.value.text, 100);
    case "toolCall":
      return `${payload.value.name} ${oneLine(compactJson(payload.value.arguments), 100)}`;
    case "toolResult": {
      const r = payload.value;
      return `${r.name} ${r.isError ? "error" : "ok"}${r.synthesized ? " (synthesized)" : ""}: ${oneLine(r.content, 100)}`;
    }
    case "usage": {
      const u = payload.value.usage;
      const cost = payload.value.costUsd ? ` $${payload.value.costUsd.toFixed(6)}` : "";
      return u ? `${payload.value.model} in ${u.inputMissTokens + u.inputHitTokens} (cache hit ${u.inputHitTokens}) out ${u.outputTokens}${cost}` : payload.value.model;
    }
    case "error":
      return `${payload.value.code}: ${oneLine(payload.value.message, 160)}`;
    case "recovery": {
      const r = payload.value;
      return `${r.owner} took over from ${r.previousOwner || "(unknown)"}; ${plural(r.interruptedCallIds.length, "interrupted call")}, ${plural(r.unstartedCallIds.length, "unstarted call")}`;
    }
    case "approvalAsked": {
      const a = payload.value;
      return `${a.toolName} asks ${a.currentMode} → ${a.requestedMode}: ${oneLine(a.operation, 80)} (${oneLine(a.justification, 60)})`;
    }
    case "approvalDecided":
      return `${payload.value.callId} ${payload.value.decision} by ${payload.value.decidedBy}`;
    case "contextPruned": {
      const c = payload.value;
      return `tool results up to seq ${c.upToSeq} cut to head ${c.headChars} + tail ${c.tailChars}: ${plural(c.resultsPruned, "result")}, ${c.charsSaved} chars saved`;
    }
    case "contextSummarized": {
      const c = payload.value;
      return `seq ${c.fromSeq}-${c.toSeq} replaced by the summary at ${c.summarySeq} (${c.model}${c.costUsd ? `, $${c.costUsd.toFixed(6)}` : ""})`;
    }
    case "llmRetry": {
      const r = payload.value;
      return `attempt ${r.attempt} failed (${r.code}); retrying in ${r.delayMs} ms`;
    }
    case "toolRetry": {
      const r = payload.value;
      return `${r.callId || "tool list"} via ${r.hop}: attempt ${r.attempt} failed (${r.code}); retrying in ${r.delayMs} ms`;
    }
    case "todoUpdated":
      return `${plural(payload.value.items.length, "task")}: ${payload.value.items.map((i) => `[${i.status}] ${oneLine(i.content, 40)}`).join("; ")}`;
    case "questionAsked":
      return `${payload.value.callId}: ${payload.value.questions.map((q) => oneLine(q.question, 60)).join(" / ")}`;
    case "questionAnswered":
      return `${payload.value.callId} ${payload.value.outcome} by ${payload.value.answeredBy}`;
    case "planMode":
      return `${payload.value.on ? "on" : "off"} by ${payload.value.changedBy}`;
    case "planSubmitted":
      return `${payload.value.callId}: ${oneLine(payload.value.plan, 100)}`;
    case "planDecided":
      return `${payload.value.callId} ${payload.value.decision} by ${payload.value.decidedBy}${payload.value.feedback ? `: ${oneLine(payload.value.feedback, 80)}` : ""}`;
    case "toolInner": {
      const c = payload.value;
      return `${c.parentCallId}.${c.index} ${c.name} ${c.isError ? "error" : "ok"}: ${oneLine(c.content, 80)}`;
    }
    case "sessionMode":
      return `${payload.value.mode} by ${payload.value.changedBy}`;
    case "toolDefined":
      return `${payload.value.name} (${payload.value.language}) by ${payload.value.callId}: ${oneLine(payload.value.description, 80)}`;
    case "rulesLoaded":
      return payload.value.files.length ? payload.value.files.map((f) => `${f.label}${f.truncated ? " (cut)" : ""}`).join(", ") : "none (retracted)";
    case "rulesWarning":
      return `${payload.value.label}: ${oneLine(payload.value.message, 100)}`;
    case "skillsCatalog":
      return payload.value.skills.length ? payload.value.skills.map((s) => s.name).join(", ") : "no skills";
    case "skillsWarning":
      return `${payload.value.source}: ${oneLine(payload.value.message, 100)}`;
    case "skillInvoked":
      return `/${payload.value.name}${payload.value.arguments ? ` ${oneLine(payload.value.arguments, 60)}` : ""} (${payload.value.source})`;
    case "mcpWarning":
      return `${payload.value.server}: ${oneLine(payload.value.message, 100)}`;
    case "mcpResult":
      return `${payload.value.callId} ${payload.value.server}/${payload.value.tool}: ${oneLine(payload.value.rawJson, 80)}`;
    case "hookInvoked":
      return `${payload.value.invocationId} ${payload.value.hookEvent}${payload.value.matcher ? `[${payload.value.matcher}]` : ""} ${oneLine(payload.value.command, 60)} (${payload.value.source})`;
    case "hookResult": {
      const h = payload.value;
      return `${h.invocationId} exit=${h.exitCode}${h.timedOut ? " timed out" : ""}${h.decision ? ` ${h.decision}` : ""}${h.reason ? `: ${oneLine(h.reason, 80)}` : ""}`;
    }
    case "hookWarning":
      return `${payload.value.source}: ${oneLine(payload.value.message, 100)}`;
    case "hookContext":
      return `${payload.value.hookEvent} (${payload.value.source}): ${oneLine(payload.value.text, 80)}`;
  }
}

/** Re-serializes JSON text compactly; text that is not JSON is returned as it is. */
function compactJson(text: string): string {
  try {
    // Parsing decodes escapes such as \u009b, so the result must be escaped again for the terminal.
    return terminalSafeJson(JSON.parse(text));
  } catch {
    return text;
  }
}

function oneLine(text: string, max: number): string {
  return truncate(text.replace(/\s+/g, " ").trim(), max);
}

function truncate(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

function plural(n: number, noun: string): string {
  return `${n} ${noun}${n === 1 ? "" : "s"}`;
}
