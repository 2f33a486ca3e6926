import { TackError } from "@tack/bus";
import { Delta_Kind, Role, type CompleteRequest, type Delta, type ToolCall } from "@tack/proto";
import { z } from "zod";
import { IMAGE_MISSING, type LoadedImages } from "./images.js";
import { errorDetail, malformed, missingKey, rateLimited, streamSse, type SseConsumer } from "./http.js";
import { toolParameters, type Completion, type Provider, type ProviderEntry } from "./provider.js";

/** Where Anthropic is reached when neither the options nor ANTHROPIC_BASE_URL say otherwise. */
export const ANTHROPIC_BASE_URL = "https://api.anthropic.com";

/** The Messages API version this provider speaks. */
const API_VERSION = "2023-06-01";

/** Output limit sent when the request sets none: the Messages API requires one. */
const DEFAULT_MAX_TOKENS = 8192;

/** Settings of the Anthropic provider, already resolved by the service. */
export interface AnthropicOptions {
  /** API key; without one every completion fails with `llm.missing_key`. */
  apiKey?: string;
  /** Base URL without `/v1/messages`, e.g. `https://api.anthropic.com`. */
  baseUrl: string;
  /** Fail with `llm.timeout` when the server sends nothing for this long (default 120 s). */
  idleTimeoutMs?: number;
}

// Anthropic model ids are lowercase names like `claude-sonnet-4-5`; whether one exists is the API's call.
const MODEL_NAME = /^[a-z0-9][a-z0-9._@-]*$/;

/** The `anthropic:MODEL` provider: the Anthropic Messages API, streamed. */
export function anthropicProvider(options: AnthropicOptions): ProviderEntry {
  const requireKey = (): string => {
    if (!options.apiKey) throw missingKey("Anthropic", "ANTHROPIC_API_KEY", "anthropic");
    return options.apiKey;
  };
  return {
    form: "anthropic:MODEL",
    create: (model) => (MODEL_NAME.test(model) ? {
      // Every Claude model since Claude 3 views images.
      takesImages: true,
      complete: async (request, onDelta, signal, images = new Map()) => {
        const apiKey = requireKey();
        const reply = new MessageStream(model, onDelta);
        await streamSse({
          provider: "Anthropic",
          url: `${options.baseUrl.replace(/\/+$/, "")}/v1/messages`,
          headers: { "x-api-key": apiKey, "anthropic-version": API_VERSION },
          body: JSON.stringify(anthropicRequestBody(model, request, images)),
          idleTimeoutMs: options.idleTimeoutMs ?? 120_000,
          baseUrlSetting: "ANTHROPIC_BASE_URL",
          httpError: (response) => httpError(response, model, apiKey),
        }, reply, signal);
        return reply.finish();
      },
      check: async () => { requireKey(); },
    } satisfies Provider : undefined),
  };
}

type Block = Record<string, unknown>;

/**
 * The Messages API body for `request`. The system prompt is top-level; tool results are
 * user-role `tool_result` blocks and tool calls assistant `tool_use` blocks; consecutive
 * messages of one role merge into one message. Two cache breakpoints (the end of the
 * system prompt, or of the tools without one, and the end of the history) make every
 * request read the prefix the previous one wrote. Reasoning is not sent back: a thinking
 * block is only accepted with the signature Tack does not keep. A tool result's images are
 * base64 image blocks inside its `tool_result`.
 */
function anthropicRequestBody(model: string, request: CompleteRequest, images: LoadedImages): Record<string, unknown> {
  const messages: { role: "user" | "assistant"; content: Block[] }[] = [];
  const add = (role: "user" | "assistant", block: Block) => {
    const last = messages.at(-1);
    if (last?.role === role) last.content.push(block);
    else messages.push({ role, content: [block] });
  };
  request.messages.forEach((message, i) => {
    switch (message.role) {
      // The Messages API has no system role inside the conversation.
      case Role.ROLE_SYSTEM:
      case Role.ROLE_USER:
        if (message.content !== "") add("user", { type: "text", text: message.content });
        return;
      case Role.ROLE_ASSISTANT:
        if (message.content !== "") add("assistant", { type: "text", text: message.content });
        for (const call of message.toolCalls) add("assistant", { type: "tool_use", id: call.id, name: call.name, input: toolInput(call) });
        return;
      case Role.ROLE_TOOL:
        add("user", { type: "tool_result", tool_use_id: message.toolCallId, content: message.images.length === 0 ? message.content : [
          // The API refuses an empty text block.
          ...(message.content === "" ? [] : [{ type: "text", text: message.content }]),
          ...message.images.map((ref) => {
            const data = images.get(ref.object);
            return data
              ? { type: "image", source: { type: "base64", media_type: ref.mimeType, data: Buffer.from(data).toString("base64") } }
              : { type: "text", text: IMAGE_MISSING };
          }),
        ] });
        return;
      default:
        throw new TackError("llm.invalid_request", `message ${i} has role ${message.role}; every message needs a system, user, assistant or tool role`, {
          details: { message: String(i) },
        });
    }
  });
  const cache = { type: "ephemeral" };
  const lastMessage = messages.at(-1);
  if (lastMessage) lastMessage.content[lastMessage.content.length - 1] = { ...lastMessage.content.at(-1), cache_control: cache };
  const tools: Block[] = request.tools.map((tool) => ({ name: tool.name, description: tool.description, input_schema: toolParameters(tool) }));
  const system = request.systemPrompt === "" ? undefined : [{ type: "text", text: request.systemPrompt, cache_control: cache }];
  if (!system && tools.length > 0) tools[tools.length - 1] = { ...tools.at(-1), cache_control: cache };
  return {
    model,
    max_tokens: request.maxTokens > 0 ? request.maxTokens : DEFAULT_MAX_TOKENS,
    ...(system ? { system } : {}),
    messages,
    ...(tools.length > 0 ? { tools } : {}),
    temperature: request.temperature,
    stream: true,
  };
}

/** A recorded call's arguments as the `input` object `tool_use` needs; arguments that are not a JSON object (the model wrote them broken) become `{}`. */
function toolInput(call: ToolCall): unknown {
  try {
    const input: unknown = JSON.parse(call.arguments);
    return input && typeof input === "object" && !Array.isArray(input) ? input : {};
  } catch {
    return {};
  }
}

async function httpError(response: Response, model: string, apiKey: string): Promise<TackError> {
  const status = response.status;
  const detail = await errorDetail(response, apiKey);
  const details: Record<string, string> = { status: String(status) };
  const what = `HTTP ${status}: ${detail}`;
  if (status === 401 || status === 403) {
    return new TackError("llm.auth", `Anthropic rejected the API key (${what}); check ANTHROPIC_API_KEY or the api_key under \`anthropic:\` in ~/.tack/credentials.yaml`, { details });
  }
  if (status === 429) return rateLimited("Anthropic", response, what);
  // 529 is Anthropic's "overloaded".
  if (status >= 500) return new TackError("llm.server_error", `Anthropic failed (${what}); retry later`, { retryable: true, details });
  if (status === 404 && /^model:/i.test(detail)) {
    return new TackError("llm.unknown_model", `Anthropic has no model ${JSON.stringify(model)} (${what}); use anthropic:MODEL with a model it serves, e.g. anthropic:claude-sonnet-4-5`, {
      details: { ...details, model },
    });
  }
  if (status === 404) {
    return new TackError("llm.bad_request", `Anthropic has no Messages endpoint at the configured base URL (${what}); check ANTHROPIC_BASE_URL (without /v1)`, { details });
  }
  return new TackError("llm.bad_request", `Anthropic refused the request (${what}); fix what it names and retry`, { details });
}

const UsageSchema = z.object({
  input_tokens: z.number().int().nullish(),
  cache_creation_input_tokens: z.number().int().nullish(),
  cache_read_input_tokens: z.number().int().nullish(),
  output_tokens: z.number().int().nullish(),
});

// The edge of the wire format: the events we read; others (`ping`, future types) pass.
const EventSchema = z.discriminatedUnion("type", [
  z.object({ type: z.literal("message_start"), message: z.object({ model: z.string().nullish(), usage: UsageSchema.nullish() }) }),
  z.object({
    type: z.literal("content_block_start"),
    index: z.number().int().nonnegative(),
    content_block: z.object({ type: z.string(), id: z.string().nullish(), name: z.string().nullish() }),
  }),
  z.object({
    type: z.literal("content_block_delta"),
    index: z.number().int().nonnegative(),
    delta: z.object({ type: z.string(), text: z.string().nullish(), thinking: z.string().nullish(), partial_json: z.string().nullish() }),
  }),
  z.object({ type: z.literal("content_block_stop"), index: z.number().int().nonnegative() }),
  z.object({ type: z.literal("message_delta"), delta: z.object({ stop_reason: z.string().nullish() }), usage: UsageSchema.nullish() }),
  z.object({ type: z.literal("message_stop") }),
  z.object({ type: z.literal("error"), error: z.object({ type: z.string(), message: z.string() }) }),
  z.object({ type: z.literal("ping") }),
]);

const KNOWN_EVENTS: ReadonlySet<string> = new Set(EventSchema.options.map((option) => option.shape.type.value));

// Anthropic's stop reasons in the OpenAI words the loop and the log use.
const FINISH: Record<string, string> = { end_turn: "stop", stop_sequence: "stop", tool_use: "tool_calls", max_tokens: "length" };

/** Accumulates one streamed Messages reply from its SSE events, emitting deltas as they come. */
class MessageStream implements SseConsumer {
  ended = false;
  #stopReason = "";
  #content = "";
  #reasoning = "";
  #model: string;
  #usage = { input: 0, cacheWrite: 0, cacheRead: 0, output: 0 };
  // Content-block index → the tool call it holds, numbered from 0 among tool calls.
  readonly #tools = new Map<number, { toolIndex: number; id: string; name: string; arguments: string }>();
  readonly #onDelta: (delta: Delta) => void;

  constructor(model: string, onDelta: (delta: Delta) => void) {
    this.#model = model;
    this.#onDelta = onDelta;
  }

  get whole(): boolean {
    return this.#stopReason !== "";
  }

  accept(data: string): void {
    let json: unknown;
    try {
      json = JSON.parse(data);
    } catch {
      throw this.#malformed("not JSON", data);
    }
    const type = (json as { type?: unknown } | null)?.type;
    if (typeof type !== "string") throw this.#malformed("no event type", data);
    // Event types newer than this reader are skipped, as the API's versioning policy asks.
    if (!KNOWN_EVENTS.has(type)) return;
    const parsed = EventSchema.safeParse(json);
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      throw this.#malformed(`${issue.path.join(".")}: ${issue.message}`, data);
    }
    const event = parsed.data;
    switch (event.type) {
      case "message_start":
        if (event.message.model) this.#model = event.message.model;
        this.#addUsage(event.message.usage);
        return;
      case "content_block_start": {
        const block = event.content_block;
        if (block.type !== "tool_use") return;
        if (!block.id || !block.name) throw this.#malformed(`tool_use block ${event.index} has no ${block.id ? "name" : "id"}`, data);
        const call = { toolIndex: this.#tools.size, id: block.id, name: block.name, arguments: "" };
        this.#tools.set(event.index, call);
        this.#emit(Delta_Kind.KIND_TOOL_CALL, "", call.toolIndex, call.id, call.name);
        return;
      }
      case "content_block_delta": {
        const delta = event.delta;
        if (delta.type === "text_delta" && delta.text) {
          this.#content += delta.text;
          this.#emit(Delta_Kind.KIND_TEXT, delta.text);
        } else if (delta.type === "thinking_delta" && delta.thinking) {
          this.#reasoning += delta.thinking;
          this.#emit(Delta_Kind.KIND_REASONING, delta.thinking);
        } else if (delta.type === "input_json_delta" && delta.partial_json) {
          const call = this.#tools.get(event.index);
          if (!call) throw this.#malformed(`input_json_delta for block ${event.index}, which is not a tool_use block`, data);
          call.arguments += delta.partial_json;
          this.#emit(Delta_Kind.KIND_TOOL_CALL, delta.partial_json, call.toolIndex);
        }
        return;
      }
      case "content_block_stop": {
        // A tool without parameters streams no JSON at all; its input is the empty object.
        const call = this.#tools.get(event.index);
        if (call && call.arguments === "") {
          call.arguments = "{}";
          this.#emit(Delta_Kind.KIND_TOOL_CALL, "{}", call.toolIndex);
        }
        return;
      }
      case "message_delta":
        if (event.delta.stop_reason) this.#stopReason = event.delta.stop_reason;
        this.#addUsage(event.usage);
        return;
      case "message_stop":
        this.ended = true;
        return;
      case "error":
        throw streamError(event.error.type, event.error.message);
      case "ping":
        return;
    }
  }

  finish(): Completion {
    const finishReason = FINISH[this.#stopReason] ?? this.#stopReason;
    const toolCalls: ToolCall[] = [...this.#tools.values()].map((call) => ({ id: call.id, name: call.name, arguments: call.arguments }));
    if (this.#content === "" && toolCalls.length === 0) {
      const length = finishReason === "length";
      throw new TackError(
        "llm.empty_reply",
        `Anthropic returned no text and no tool calls (stop_reason ${this.#stopReason || "none"}); ${length ? "raise max_tokens" : "retry"}`,
        { retryable: !length, details: { finish_reason: finishReason } },
      );
    }
    const usage = this.#usage;
    return {
      content: this.#content,
      reasoningContent: this.#reasoning,
      toolCalls,
      finishReason,
      // Cache writes are input that missed the cache (Anthropic bills them at 1.25× a miss).
      usage: { inputMissTokens: usage.input + usage.cacheWrite, inputHitTokens: usage.cacheRead, outputTokens: usage.output, reasoningTokens: 0 },
      model: this.#model,
    };
  }

  // message_delta repeats the counts cumulatively; the latest value of each field wins.
  #addUsage(usage: z.infer<typeof UsageSchema> | null | undefined): void {
    if (!usage) return;
    this.#usage = {
      input: usage.input_tokens ?? this.#usage.input,
      cacheWrite: usage.cache_creation_input_tokens ?? this.#usage.cacheWrite,
      cacheRead: usage.cache_read_input_tokens ?? this.#usage.cacheRead,
      output: usage.output_tokens ?? this.#usage.output,
    };
  }

  #malformed(problem: string, data: string): TackError {
    return malformed("Anthropic", problem, data, "check that ANTHROPIC_BASE_URL points at the Anthropic Messages API");
  }

  #emit(kind: Delta_Kind, text: string, toolIndex = 0, toolCallId = "", toolName = ""): void {
    this.#onDelta({ kind, text, toolIndex, toolCallId, toolName });
  }
}

/** The error an `error` event in the stream stands for. */
function streamError(type: string, message: string): TackError {
  const what = `${type}: ${message}`;
  if (type === "rate_limit_error") return new TackError("llm.rate_limited", `Anthropic is rate limiting this key (${what}); retry later`, { retryable: true });
  if (type === "overloaded_error" || type === "api_error") {
    return new TackError("llm.server_error", `Anthropic failed mid-stream (${what}); retry later`, { retryable: true });
  }
  return new TackError("llm.bad_request", `Anthropic refused the request mid-stream (${what}); fix what it names and retry`);
}
