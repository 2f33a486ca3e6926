import {
  ChatMessage, Role, Surface_Kind, type Event, type HookContext, type RequestHeader, type RulesFile, type SkillInvoked, type SkillsCatalogEntry, type ToolSpec,
} from "@tack/proto";

/** The model request as derived from a log: header plus model-visible messages. */
export interface ModelRequest {
  readonly model: string;
  readonly systemPrompt: string;
  readonly tools: readonly ToolSpec[];
  readonly temperature: number;
  readonly maxTokens: number;
  readonly messages: readonly ChatMessage[];
}

/** One message of the model's view and the seq of the event it came from. */
export interface VisibleEntry {
  readonly seq: number;
  readonly message: ChatMessage;
  /** Tool results only: the content as logged, before any pruning. */
  readonly original: string;
  /** True once a `context/pruned` cut this tool result down (it is never cut twice). */
  readonly pruned: boolean;
}

/** What a `context/pruned` with these bounds would change in the current view. */
export interface PrunePlan {
  readonly resultsPruned: number;
  readonly charsSaved: number;
}

/**
 * Folds events into the model's view. The request sent to the model is a pure function of
 * the log: `deriveRequest(events)` from scratch must equal an incrementally kept projection.
 */
export class Projection {
  #header: RequestHeader | undefined;
  #visible: VisibleEntry[] = [];

  /** Applies one event (events must come in seq order). */
  apply(event: Event): void {
    const p = event.payload;
    if (!p) return;
    switch (p.$case) {
      case "requestHeader":
        this.#header = p.value;
        return;
      case "userMessage":
        return this.#surface(event, ChatMessage.fromPartial({ role: Role.ROLE_USER, content: p.value.text }));
      case "assistantMessage":
        return this.#surface(event, ChatMessage.fromPartial({
          role: Role.ROLE_ASSISTANT, content: p.value.content, reasoningContent: p.value.reasoningContent, toolCalls: p.value.toolCalls,
        }));
      case "toolResult":
        return this.#surface(event, ChatMessage.fromPartial({
          role: Role.ROLE_TOOL, content: p.value.content, toolCallId: p.value.callId, images: p.value.images,
        }));
      case "rulesLoaded":
        return this.#surface(event, ChatMessage.fromPartial({ role: Role.ROLE_USER, content: rulesText(p.value.files) }));
      case "skillsCatalog":
        return this.#surface(event, ChatMessage.fromPartial({ role: Role.ROLE_USER, content: skillsCatalogText(p.value.skills) }));
      case "skillInvoked":
        return this.#surface(event, ChatMessage.fromPartial({ role: Role.ROLE_USER, content: skillInvokedText(p.value) }));
      case "hookContext":
        return this.#surface(event, ChatMessage.fromPartial({ role: Role.ROLE_USER, content: hookContextText(p.value) }));
      case "contextPruned": {
        const { upToSeq, headChars, tailChars } = p.value;
        this.#visible = this.#visible.map((v) => (prunable(v, upToSeq, headChars, tailChars)
          ? { ...v, message: { ...v.message, content: pruneText(v.original, headChars, tailChars) }, pruned: true }
          : v));
        return;
      }
      default:
        return;
    }
  }

  #surface(event: Event, message: ChatMessage): void {
    const entry: VisibleEntry = { seq: event.seq, message, original: message.content, pruned: false };
    const s = event.surface;
    if (s?.kind === Surface_Kind.KIND_REPLACE) {
      const at = this.#visible.findIndex((v) => v.seq >= s.replaceFromSeq);
      const kept = this.#visible.filter((v) => v.seq < s.replaceFromSeq || v.seq > s.replaceToSeq);
      kept.splice(at < 0 ? kept.length : at, 0, entry);
      this.#visible = kept;
      return;
    }
    this.#visible.push(entry);
  }

  /** The last logged request header, if any. */
  get header(): RequestHeader | undefined {
    return this.#header;
  }

  /** The request as it stands; throws when no header was logged yet. */
  request(): ModelRequest {
    const h = this.#header;
    if (!h) throw new Error("no request/header in the log yet");
    return {
      model: h.model, systemPrompt: h.systemPrompt, tools: h.tools, temperature: h.temperature, maxTokens: h.maxTokens,
      messages: this.#visible.map((v) => v.message),
    };
  }

  /** The model's view with the seq behind each message, in the order the model sees them. */
  entries(): readonly VisibleEntry[] {
    return this.#visible;
  }

  /** What logging `context/pruned {upToSeq, headChars, tailChars}` now would shorten, computed exactly as `apply` would. */
  planPrune(upToSeq: number, headChars: number, tailChars: number): PrunePlan {
    let resultsPruned = 0;
    let charsSaved = 0;
    for (const v of this.#visible) {
      if (!prunable(v, upToSeq, headChars, tailChars)) continue;
      resultsPruned++;
      charsSaved += v.original.length - pruneText(v.original, headChars, tailChars).length;
    }
    return { resultsPruned, charsSaved };
  }

  /** Test hook and debugging aid: the messages as currently projected (mutable on purpose for tamper tests). */
  get messages(): ChatMessage[] {
    return this.#visible.map((v) => v.message);
  }
}

/** A tool result not pruned yet, at or before `upToSeq`, that head + tail would actually shorten. */
function prunable(v: VisibleEntry, upToSeq: number, headChars: number, tailChars: number): boolean {
  return v.message.role === Role.ROLE_TOOL && !v.pruned && v.seq <= upToSeq && pruneText(v.original, headChars, tailChars) !== v.original;
}

/**
 * The pruned form of a tool result: its first `headChars` and last `tailChars` characters
 * around a line saying how many were left out (never splitting a surrogate pair). Text that
 * this would not make shorter comes back unchanged.
 */
export function pruneText(text: string, headChars: number, tailChars: number): string {
  if (text.length <= headChars + tailChars) return text;
  const headEnd = isHighSurrogate(text.charCodeAt(headChars - 1)) ? headChars - 1 : headChars;
  const tailStart = isLowSurrogate(text.charCodeAt(text.length - tailChars)) ? text.length - tailChars + 1 : text.length - tailChars;
  const omitted = tailStart - headEnd;
  const cut = `${text.slice(0, headEnd)}\n\n[... ${omitted} characters of this tool result left out to save context; run the tool again if you need them ...]\n\n${text.slice(tailStart)}`;
  return cut.length < text.length ? cut : text;
}

function isHighSurrogate(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}

function isLowSurrogate(code: number): boolean {
  return code >= 0xdc00 && code <= 0xdfff;
}

/**
 * What the model reads for a `rules/loaded`: one line saying what the blocks are, then each file
 * in a `<rules source="...">` block. A pure function of the files, so an unchanged set re-logged
 * (after a summary swallowed it) reads the same.
 */
export function rulesText(files: readonly RulesFile[]): string {
  if (files.length === 0) return "The project's rules files no longer apply: disregard the instructions of the earlier rules message.";
  const blocks = files.map((f) => `<rules source="${f.label.replace(/&/g, "&amp;").replace(/"/g, "&quot;").replace(/</g, "&lt;")}">\n${f.content.replace(/\n$/, "")}\n</rules>`);
  return ["These are the project's instructions from its rules files (AGENTS.md, CLAUDE.md); follow them. They replace any rules given earlier in this conversation.", ...blocks].join("\n\n");
}

/** Escapes text for an attribute of the tags the model reads. */
function attribute(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/"/g, "&quot;").replace(/</g, "&lt;");
}

/**
 * What the model reads for a `skills/catalog`: the skills it may load with the `skill` tool, one
 * line each (user-only skills are not offered); replaces any earlier catalog. A pure function of
 * the entries, so the same catalog always reads the same.
 */
export function skillsCatalogText(skills: readonly SkillsCatalogEntry[]): string {
  const offered = skills.filter((s) => s.modelInvocable);
  if (offered.length === 0) return "No skills are available now: disregard any skills listed earlier in this conversation.";
  const lines = offered.map((s) => `- ${s.name}: ${s.description.replace(/\s+/g, " ").trim()}`);
  return [
    "Skills available in this session (this list replaces any earlier one). A skill is a set of instructions for one kind of task: when a task matches a skill's description, call the `skill` tool with its name before doing the task, then follow what it says.",
    lines.join("\n"),
  ].join("\n\n");
}

/** What the model reads when the user ran a skill with `/name`: its body, in a block naming where it comes from. */
export function skillInvokedText(s: SkillInvoked): string {
  const files = s.files.length ? `\n\nFiles in the skill's folder (${s.location}): ${s.files.join(", ")}` : "";
  const args = s.arguments ? `\n\nThe user's arguments: ${s.arguments}` : "";
  return `The user ran the skill /${s.name}. Follow its instructions for this request.${args}\n\n<skill name="${attribute(s.name)}" source="${attribute(s.source)}" location="${attribute(s.location)}">\n${s.body.replace(/\n$/, "")}\n</skill>${files}`;
}

/** What the model reads for text a hook added (SessionStart or UserPromptSubmit output, a Stop hook's reason to go on). */
export function hookContextText(h: HookContext): string {
  return `<hook event="${attribute(h.hookEvent)}" source="${attribute(h.source)}">\n${h.text.replace(/\n$/, "")}\n</hook>`;
}

/** Derives the model request from a complete list of events, from scratch. */
export function deriveRequest(events: Iterable<Event>): ModelRequest {
  const p = new Projection();
  for (const e of events) p.apply(e);
  return p.request();
}

/** Canonical serialization of a request, for byte-for-byte comparison. */
export function serializeRequest(r: ModelRequest): string {
  return JSON.stringify({
    model: r.model, systemPrompt: r.systemPrompt, temperature: r.temperature, maxTokens: r.maxTokens,
    tools: r.tools.map((t) => [t.name, t.description, t.parametersJson]),
    messages: r.messages.map((m) => ChatMessage.toJSON(m)),
  });
}
