import { TackError } from "@tack/bus";
import { draft, spillPath, type Draft, type ModelRequest, type Projection, type SessionAddress, type SpillBucket } from "@tack/log";
import { ChatMessage, Role, Surface_Kind, type CompleteDone, type ContextPruned, type Event, type ImageRef, type ToolImage, type ToolResult, type Usage } from "@tack/proto";
import type { Logger } from "@tack/telemetry";

/** Settings of spilling, pruning and summarizing (cheapest first), validated once by the service. */
export interface CompactionSettings {
  /** Tool results over this many UTF-8 bytes are stored whole in the object store; the log keeps a preview. */
  readonly spillBytes: number;
  /** Characters at the head of a spilled result that the model sees. */
  readonly spillPreviewChars: number;
  /** Context window, in tokens, of a model not listed in `contextWindows`. */
  readonly contextWindowTokens: number;
  /** Context window in tokens by model reference (`<provider>:<model>`, as the session was created with). */
  readonly contextWindows: Readonly<Record<string, number>>;
  /** Old tool results are pruned once the request reaches this fraction of the window. */
  readonly pruneAt: number;
  /** Characters a pruned tool result keeps from its start and from its end. */
  readonly pruneHeadChars: number;
  readonly pruneTailChars: number;
  /** The most recent part of the conversation, as a fraction of the window, is never pruned. */
  readonly pruneKeep: number;
  /** A prune must save at least this fraction of the window; a smaller one is not worth the prefix cache it breaks. */
  readonly pruneMinimum: number;
  /** A summary replaces the conversation when the request, after pruning, still reaches this fraction of the window. */
  readonly summarizeAt: number;
}

/** What a summary must hold (the tail of both instructions below). */
const SUMMARY_CONTENT = "the user's requests (quote the latest one exactly), what has been done and learned so far (files, commands, results, decisions), "
  + "what is in progress and what remains to do. Keep every detail needed to continue without the earlier messages. "
  + "Reply with the summary only; do not call tools.";

/** The last user message of the one-off summarization request (never logged as a model-visible event). */
export const SUMMARY_INSTRUCTION = `The conversation is about to exceed the context window, so your summary will replace it. Write that summary now: ${SUMMARY_CONTENT}`;

/** The same for a compaction a person asked for (`/compact`), with their instructions when they gave some. */
export function compactInstruction(instructions = ""): string {
  const focus = instructions.trim() ? `\n\nThe user's instructions for the summary: ${instructions.trim()}` : "";
  return `The user asked to compact the conversation, so your summary will replace it. Write that summary now: ${SUMMARY_CONTENT}${focus}`;
}

/** What a summary logged: the range it replaced, its own seqs and its cost. */
export interface Summarized {
  readonly fromSeq: number;
  readonly toSeq: number;
  /** The replacing `user/message`. */
  readonly summarySeq: number;
  /** The `context/summarized` event. */
  readonly seq: number;
  readonly costUsd: number;
}

/** Opens the logged summary, so the model reads it as a summary and not as a new request. */
export const SUMMARY_HEADING = "Summary of the conversation so far (it replaces the earlier messages, removed to save context):\n\n";

/** What a session's compaction needs from its runtime. */
export interface CompactionHost {
  readonly projection: Projection;
  append(...drafts: Draft[]): Promise<Event[]>;
  /** The request about to be sent, checked against a fresh derivation from the log. */
  verifiedRequest(): ModelRequest;
  /** One model call whose reply is not logged as an assistant message (retries are still logged). */
  callModel(request: ModelRequest): Promise<CompleteDone>;
}

/** The fields of a `tool/result` that carry its content: all of it, or a preview and where the rest is; and where its images are, if it has any. */
export type LoggedContent = Pick<ToolResult, "content" | "spillObject" | "fullBytes"> & { images?: ImageRef[] };

const SOURCE = "loop";
/** An image counts as this many characters: ~1,600 tokens (what Anthropic charges for a full-size one) at 4 characters a token. */
const IMAGE_CHARS = 6_400;
/** Tokens per character assumed until the provider reports usage (and the least ever assumed). */
const MIN_TOKENS_PER_CHAR = 0.25;

/**
 * Compaction of one session's model view. Every decision is logged as an event (`tool/result`
 * with a spill reference, `context/pruned`, a replacing `user/message` plus `context/summarized`),
 * so the request stays a pure function of the log and the original events are never removed.
 */
export class Compactor {
  readonly #settings: CompactionSettings;
  readonly #address: SessionAddress;
  readonly #spills: () => Promise<SpillBucket>;
  readonly #log: Logger;
  #tokensPerChar = MIN_TOKENS_PER_CHAR;

  constructor(settings: CompactionSettings, address: SessionAddress, spills: () => Promise<SpillBucket>, log: Logger) {
    this.#settings = settings;
    this.#address = address;
    this.#spills = spills;
    this.#log = log;
  }

  /**
   * The content to log for a tool result: unchanged up to `spillBytes`; above that, the whole
   * result goes to the spill bucket and the model gets its head and a note on how to read the
   * rest. If the bucket cannot take it, the note says so instead (the step still gets its result).
   * The result's images go to the bucket too, and the log gets references to them.
   */
  async spill(callId: string, content: string, images: readonly ToolImage[] = []): Promise<LoggedContent> {
    if (images.length === 0) return this.#spillText(callId, content);
    const refs = await this.#storeImages(callId, images);
    const logged = await this.#spillText(callId, content);
    if (refs) return { ...logged, images: refs };
    return { ...logged, content: `${logged.content}\n[The image could not be stored, so it is not shown; read the file again.]` };
  }

  /**
   * Stores a result's images in the spill bucket as `<call id>.image<n>` (never in the log: an
   * event is at most 1 MB) and returns their references; undefined when the bucket cannot take them.
   */
  async #storeImages(callId: string, images: readonly ToolImage[]): Promise<ImageRef[] | undefined> {
    try {
      const bucket = await this.#spills();
      return await Promise.all(images.map(async (image, i) => ({
        mimeType: image.mimeType, object: await bucket.put(this.#address, `${callId}.image${i + 1}`, image.data),
        bytes: image.data.length, width: image.width, height: image.height,
      })));
    } catch (error) {
      this.#log.warn("storing images failed", { session: this.#address.sessionId, call: callId, error: (error as Error).message });
      return undefined;
    }
  }

  async #spillText(callId: string, content: string): Promise<LoggedContent> {
    const fullBytes = Buffer.byteLength(content, "utf8");
    if (fullBytes <= this.#settings.spillBytes) return { content, spillObject: "", fullBytes: 0 };
    const preview = previewOf(content, this.#settings.spillPreviewChars);
    const left = fullBytes - Buffer.byteLength(preview, "utf8");
    try {
      const spillObject = await (await this.#spills()).put(this.#address, callId, Buffer.from(content, "utf8"));
      const next = countLines(preview) + (preview.endsWith("\n") ? 1 : 0);
      const lines = countLines(content);
      const note = `[Result too large for the context: ${fullBytes} bytes in total, the ${left} bytes after this preview are not shown. `
        + `It has ${lines} line${lines === 1 ? "" : "s"}; read the rest with the read tool, path "${spillPath(callId)}", offset ${next}.]`;
      return { content: `${preview.replace(/\n$/, "")}\n\n${note}`, spillObject, fullBytes };
    } catch (error) {
      this.#log.warn("spill failed", { session: this.#address.sessionId, call: callId, error: (error as Error).message });
      const note = `[Result too large for the context: ${fullBytes} bytes in total, and the ${left} bytes after this preview could not be stored. `
        + "Run the command again with its output redirected to a file, then read that file in parts.]";
      return { content: `${preview.replace(/\n$/, "")}\n\n${note}`, spillObject: "", fullBytes };
    }
  }

  /** Learns the tokens per character of this session's requests from the usage the provider reported. */
  observe(request: ModelRequest, usage: Usage | undefined): void {
    const tokens = (usage?.inputMissTokens ?? 0) + (usage?.inputHitTokens ?? 0);
    const chars = requestChars(request);
    if (tokens > 0 && chars > 0) this.#tokensPerChar = Math.max(MIN_TOKENS_PER_CHAR, tokens / chars);
  }

  /** Estimated tokens of a request: its characters at the last observed tokens per character (at least 1 token per 4 characters). */
  estimate(request: ModelRequest): number {
    return Math.ceil(requestChars(request) * this.#tokensPerChar);
  }

  /** The context window of `model` in tokens. */
  windowOf(model: string): number {
    return this.#settings.contextWindows[model] ?? this.#settings.contextWindowTokens;
  }

  /** Before a step's model call: prunes, then summarizes, when the request has grown past their thresholds. */
  async beforeRequest(host: CompactionHost): Promise<void> {
    const pruned = this.#planPrune(host.projection);
    if (pruned) await host.append(draft("contextPruned", pruned, SOURCE));
    const request = host.projection.request();
    if (this.estimate(request) < this.#settings.summarizeAt * this.windowOf(request.model)) return;
    await this.#summarizeAll(host, SUMMARY_INSTRUCTION, "");
  }

  /**
   * Summarizes the whole conversation now, as `beforeRequest` does when the context fills up
   * (the same events), for a person who asked (`/compact`, with their `instructions`; `requestedBy`
   * names them in `context/summarized`). Undefined when there is nothing to summarize: no model
   * reply since the session started or since the last summary.
   */
  compact(host: CompactionHost, instructions: string, requestedBy: string): Promise<Summarized | undefined> {
    return this.#summarizeAll(host, compactInstruction(instructions), requestedBy);
  }

  async #summarizeAll(host: CompactionHost, instruction: string, requestedBy: string): Promise<Summarized | undefined> {
    const entries = host.projection.entries();
    // Nothing has happened since the last summary (or the start): another summary would only restate it.
    if (entries.length < 2 || !entries.some((e) => e.message.role === Role.ROLE_ASSISTANT)) return undefined;
    return this.#summarize(host, entries[0]!.seq, entries.at(-1)!.seq, instruction, requestedBy);
  }

  /** A `context/pruned` worth logging now, or undefined: old results beyond the protected recent part, saving enough to pay for the cache it breaks. */
  #planPrune(projection: Projection): ContextPruned | undefined {
    const request = projection.request();
    const window = this.windowOf(request.model);
    if (this.estimate(request) < this.#settings.pruneAt * window) return undefined;
    const keepChars = (this.#settings.pruneKeep * window) / this.#tokensPerChar;
    // Protect messages from the end until the protected part reaches keepChars (the message that reaches it included).
    const entries = projection.entries();
    let kept = 0;
    let upToSeq = 0;
    for (let i = entries.length - 1; i > 0; i--) {
      kept += messageChars(entries[i]!.message);
      if (kept >= keepChars) {
        upToSeq = entries[i - 1]!.seq;
        break;
      }
    }
    if (upToSeq === 0) return undefined;
    const { pruneHeadChars: headChars, pruneTailChars: tailChars } = this.#settings;
    const plan = projection.planPrune(upToSeq, headChars, tailChars);
    if (plan.resultsPruned === 0 || plan.charsSaved * this.#tokensPerChar < this.#settings.pruneMinimum * window) return undefined;
    return { upToSeq, headChars, tailChars, resultsPruned: plan.resultsPruned, charsSaved: plan.charsSaved };
  }

  /** One extra model call writes a summary; it is logged as a user message replacing [fromSeq, toSeq], then `context/summarized`. */
  async #summarize(host: CompactionHost, fromSeq: number, toSeq: number, instruction: string, requestedBy: string): Promise<Summarized> {
    const base = host.verifiedRequest();
    const done = await host.callModel({ ...base, messages: [...base.messages, ChatMessage.fromPartial({ role: Role.ROLE_USER, content: instruction })] });
    const summary = done.content.trim();
    if (!summary) {
      throw new TackError("loop.summary_empty", `the model wrote an empty summary of seq ${fromSeq}-${toSeq} (finish reason ${done.finishReason || "none"}), so nothing was replaced; send the message (or /compact) again to retry, or start a new session if it repeats`);
    }
    const [event] = await host.append(draft("userMessage", { text: `${SUMMARY_HEADING}${summary}` }, SOURCE, {
      kind: Surface_Kind.KIND_REPLACE, replaceFromSeq: fromSeq, replaceToSeq: toSeq, sourceSeqs: [], origin: "compaction:summary",
    }));
    const [summarized] = await host.append(draft("contextSummarized", {
      fromSeq, toSeq, summarySeq: event!.seq, model: done.model || base.model, usage: done.usage, costUsd: done.costUsd, requestedBy,
    }, SOURCE));
    return { fromSeq, toSeq, summarySeq: event!.seq, seq: summarized!.seq, costUsd: done.costUsd };
  }
}

/** The head of a spilled result: `chars` characters, ending at a line break when one falls in the second half, never inside a surrogate pair. */
function previewOf(content: string, chars: number): string {
  const newline = content.lastIndexOf("\n", chars - 1);
  if (newline >= chars / 2) return content.slice(0, newline + 1);
  const code = content.charCodeAt(chars - 1);
  return content.slice(0, code >= 0xd800 && code <= 0xdbff ? chars - 1 : chars);
}

/** Lines as `read` counts them: a final line break ends the last line rather than starting one. */
function countLines(text: string): number {
  if (text === "") return 0;
  let lines = 1;
  for (let i = text.indexOf("\n"); i >= 0 && i < text.length - 1; i = text.indexOf("\n", i + 1)) lines++;
  return lines;
}

/** Characters the model reads in a request: system prompt, tool schemas and messages. */
function requestChars(request: ModelRequest): number {
  let chars = request.systemPrompt.length;
  for (const t of request.tools) chars += t.name.length + t.description.length + t.parametersJson.length;
  for (const m of request.messages) chars += messageChars(m);
  return chars;
}

function messageChars(m: ChatMessage): number {
  let chars = m.content.length + m.reasoningContent.length;
  for (const c of m.toolCalls) chars += c.name.length + c.arguments.length;
  return chars + m.images.length * IMAGE_CHARS;
}
