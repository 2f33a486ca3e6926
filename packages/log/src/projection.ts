import { ChatMessage, Role, Surface_Kind, type Event, type RequestHeader, type ToolSpec } from "@tack/proto";

/** The model request as derived from a log: header plus model-visible messages. */
export interface ModelRequest {
  readonly model: string;
  readonly systemPrompt: string;
  readonly tools: readonly ToolSpec[];
  readonly temperature: number;
  readonly maxTokens: number;
  readonly messages: readonly ChatMessage[];
}

interface Visible {
  readonly seq: number;
  readonly message: ChatMessage;
}

/**
 * Folds events into the model's view. The request sent to the model is a pure function of
 * the log: `deriveRequest(events)` from scratch must equal an incrementally kept projection.
 */
export class Projection {
  #header: RequestHeader | undefined;
  #visible: Visible[] = [];

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
        return this.#surface(event, ChatMessage.fromPartial({ role: Role.ROLE_TOOL, content: p.value.content, toolCallId: p.value.callId }));
      default:
        return;
    }
  }

  #surface(event: Event, message: ChatMessage): void {
    const s = event.surface;
    if (s?.kind === Surface_Kind.KIND_REPLACE) {
      const at = this.#visible.findIndex((v) => v.seq >= s.replaceFromSeq);
      const kept = this.#visible.filter((v) => v.seq < s.replaceFromSeq || v.seq > s.replaceToSeq);
      kept.splice(at < 0 ? kept.length : at, 0, { seq: event.seq, message });
      this.#visible = kept;
      return;
    }
    this.#visible.push({ seq: event.seq, message });
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

  /** Test hook and debugging aid: the messages as currently projected (mutable on purpose for tamper tests). */
  get messages(): ChatMessage[] {
    return this.#visible.map((v) => v.message);
  }
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
