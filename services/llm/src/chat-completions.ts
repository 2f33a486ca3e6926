import { TackError } from "@tack/bus";
import { Delta_Kind, Role, type ChatMessage, type CompleteRequest, type Delta, type ToolCall, type Usage } from "@tack/proto";
import { z } from "zod";
import { keyVariable, type KeyedProvider } from "@tack/credentials";
import { CANNOT_VIEW_IMAGES, IMAGE_MISSING, type LoadedImages } from "./images.js";
import { errorDetail, malformed, missingKey, rateLimited, streamSse, type SseConsumer } from "./http.js";
import { toolParameters, type Completion, type Provider, type ProviderEntry } from "./provider.js";

/** Settings of an OpenAI-compatible provider, already resolved by the service. */
export interface ChatCompletionsOptions {
  /** API key; without one every completion fails with `llm.missing_key`. */
  apiKey?: string;
  /** Base URL without `/chat/completions`, e.g. `https://api.deepseek.com`. */
  baseUrl: string;
  /** Fail with `llm.timeout` when the server sends nothing for this long (default 120 s). */
  idleTimeoutMs?: number;
  /** Which models view images (TACK_IMAGE_MODELS); none when absent. */
  imageModels?: (model: string) => boolean;
}

/** What differs between endpoints that speak OpenAI streaming chat completions. */
export interface ChatDialect {
  /** Provider name in messages, e.g. `DeepSeek`. */
  readonly name: string;
  /** Model-reference form, e.g. `deepseek:MODEL`. */
  readonly form: string;
  /** Credentials section and key variable prefix. */
  readonly keyed: KeyedProvider;
  /** Environment variable of the base URL, named when the server cannot be reached. */
  readonly baseUrlVariable: string;
  /** A model the endpoint serves, suggested when a model does not exist. */
  readonly exampleModel: string;
  /** Which model names to bind at all; whether a model exists is the API's call. */
  readonly modelName: RegExp;
  /**
   * Send `reasoning_content` back on assistant messages with tool calls: DeepSeek's thinking
   * mode answers 400 without it, while other endpoints may reject the unknown field.
   */
  readonly echoReasoning: boolean;
  /** The output-limit field: DeepSeek takes `max_tokens`; OpenAI's reasoning models only `max_completion_tokens`. */
  readonly maxTokensField: "max_tokens" | "max_completion_tokens";
}

/** A provider entry for one OpenAI-compatible dialect. */
export function chatCompletionsProvider(dialect: ChatDialect, options: ChatCompletionsOptions): ProviderEntry {
  const requireKey = (): string => {
    if (!options.apiKey) throw missingKey(dialect.name, keyVariable(dialect.keyed), dialect.keyed);
    return options.apiKey;
  };
  return {
    form: dialect.form,
    create: (model) => (dialect.modelName.test(model) ? {
      takesImages: options.imageModels?.(model) ?? false,
      complete: async (request, onDelta, signal, images) => {
        const apiKey = requireKey();
        const reply = new ReplyStream(dialect.name, model, onDelta);
        await streamSse({
          provider: dialect.name,
          url: `${options.baseUrl.replace(/\/+$/, "")}/chat/completions`,
          headers: { authorization: `Bearer ${apiKey}` },
          body: JSON.stringify(chatCompletionsBody(dialect, model, request, options.imageModels?.(model) ? images ?? new Map() : undefined)),
          idleTimeoutMs: options.idleTimeoutMs ?? 120_000,
          baseUrlSetting: dialect.baseUrlVariable,
          httpError: (response) => httpError(dialect, response, model, apiKey),
        }, reply, signal);
        return reply.finish();
      },
      check: async () => { requireKey(); },
    } satisfies Provider : undefined),
  };
}

/**
 * The chat-completions request body for `request`: system prompt first, then the history, then
 * the tools. A tool message cannot hold an image, so for a model that views images (`images`
 * given) the images of a step's tool results follow them as one user message of `image_url`
 * data URIs; any other model reads in the tool result that it cannot view them.
 */
export function chatCompletionsBody(
  dialect: Pick<ChatDialect, "echoReasoning" | "maxTokensField">, model: string, request: CompleteRequest, images?: LoadedImages,
): Record<string, unknown> {
  const messages: Record<string, unknown>[] = [];
  if (request.systemPrompt !== "") messages.push({ role: "system", content: request.systemPrompt });
  let shown: Record<string, unknown>[] = [];
  const showImages = () => {
    if (shown.length > 0) messages.push({ role: "user", content: shown });
    shown = [];
  };
  request.messages.forEach((message, i) => {
    if (message.role !== Role.ROLE_TOOL) showImages();
    if (message.role !== Role.ROLE_TOOL || message.images.length === 0) return messages.push(wireMessage(dialect, message, i));
    if (!images) return messages.push(wireMessage(dialect, { ...message, content: `${message.content}${CANNOT_VIEW_IMAGES}` }, i));
    messages.push(wireMessage(dialect, message, i));
    for (const ref of message.images) {
      const data = images.get(ref.object);
      shown.push({ type: "text", text: `Image from tool call ${message.toolCallId}:${data ? "" : ` ${IMAGE_MISSING}`}` });
      if (data) shown.push({ type: "image_url", image_url: { url: `data:${ref.mimeType};base64,${Buffer.from(data).toString("base64")}` } });
    }
  });
  showImages();
  const tools = request.tools.map((tool) => ({ type: "function", function: { name: tool.name, description: tool.description, parameters: toolParameters(tool) } }));
  return {
    model,
    messages,
    ...(tools.length > 0 ? { tools } : {}),
    temperature: request.temperature,
    ...(request.maxTokens > 0 ? { [dialect.maxTokensField]: request.maxTokens } : {}),
    stream: true,
    stream_options: { include_usage: true },
  };
}

function wireMessage(dialect: Pick<ChatDialect, "echoReasoning">, message: ChatMessage, i: number): Record<string, unknown> {
  switch (message.role) {
    case Role.ROLE_SYSTEM:
      return { role: "system", content: message.content };
    case Role.ROLE_USER:
      return { role: "user", content: message.content };
    case Role.ROLE_ASSISTANT:
      if (message.toolCalls.length === 0) return { role: "assistant", content: message.content };
      return {
        role: "assistant",
        content: message.content,
        ...(dialect.echoReasoning ? { reasoning_content: message.reasoningContent } : {}),
        tool_calls: message.toolCalls.map((call) => ({ id: call.id, type: "function", function: { name: call.name, arguments: call.arguments } })),
      };
    case Role.ROLE_TOOL:
      return { role: "tool", tool_call_id: message.toolCallId, content: message.content };
    default:
      throw new TackError("llm.invalid_request", `message ${i} has role ${message.role}; every message needs a system, user, assistant or tool role`, {
        details: { message: String(i) },
      });
  }
}

async function httpError(dialect: ChatDialect, response: Response, model: string, apiKey: string): Promise<TackError> {
  const status = response.status;
  const detail = await errorDetail(response, apiKey);
  const details: Record<string, string> = { status: String(status) };
  const what = `HTTP ${status}: ${detail}`;
  const name = dialect.name;
  if (status === 401 || status === 403) {
    return new TackError("llm.auth", `${name} rejected the API key (${what}); check ${keyVariable(dialect.keyed)} or the api_key under \`${dialect.keyed}:\` in ~/.tack/credentials.yaml`, { details });
  }
  if (status === 429) return rateLimited(name, response, what);
  if (status >= 500) return new TackError("llm.server_error", `${name} failed (${what}); retry later`, { retryable: true, details });
  // DeepSeek answers 400 "Model Not Exist", OpenAI 404 "The model `x` does not exist".
  if ((status === 400 || status === 404) && /model[^.]*(not exist|does not exist|not found)/i.test(detail)) {
    return new TackError("llm.unknown_model", `${name} has no model ${JSON.stringify(model)} (${what}); use ${dialect.form} with a model it serves, e.g. ${dialect.form.replace("MODEL", dialect.exampleModel)}`, {
      details: { ...details, model },
    });
  }
  if (status === 404) {
    return new TackError("llm.bad_request", `${name} has no chat-completions endpoint at the configured base URL (${what}); check ${dialect.baseUrlVariable} (it usually ends in /v1)`, { details });
  }
  return new TackError("llm.bad_request", `${name} refused the request (${what}); fix what it names and retry`, { details });
}

// The edge of the wire format: only what we read, nullable where servers send null.
const ChunkSchema = z.object({
  model: z.string().nullish(),
  choices: z.array(z.object({
    index: z.number().int().nullish(),
    delta: z.object({
      content: z.string().nullish(),
      reasoning_content: z.string().nullish(),
      tool_calls: z.array(z.object({
        index: z.number().int().nonnegative(),
        id: z.string().nullish(),
        function: z.object({ name: z.string().nullish(), arguments: z.string().nullish() }).nullish(),
      })).nullish(),
    }).nullish(),
    finish_reason: z.string().nullish(),
  })).nullish(),
  usage: z.object({
    prompt_tokens: z.number().int(),
    completion_tokens: z.number().int(),
    // DeepSeek reports its disk cache here.
    prompt_cache_hit_tokens: z.number().int().nullish(),
    prompt_cache_miss_tokens: z.number().int().nullish(),
    // OpenAI reports its prompt cache here.
    prompt_tokens_details: z.object({ cached_tokens: z.number().int().nullish() }).nullish(),
    completion_tokens_details: z.object({ reasoning_tokens: z.number().int().nullish() }).nullish(),
  }).nullish(),
  error: z.object({ message: z.string() }).nullish(),
});

/** Accumulates one streamed reply from its SSE events, emitting deltas as they come. */
class ReplyStream implements SseConsumer {
  ended = false;
  #finishReason = "";
  #content = "";
  #reasoning = "";
  #model: string;
  #usage: Usage = { inputMissTokens: 0, inputHitTokens: 0, outputTokens: 0, reasoningTokens: 0 };
  readonly #tools = new Map<number, { id: string; name: string; arguments: string }>();
  readonly #provider: string;
  readonly #onDelta: (delta: Delta) => void;

  constructor(provider: string, model: string, onDelta: (delta: Delta) => void) {
    this.#provider = provider;
    this.#model = model;
    this.#onDelta = onDelta;
  }

  // Some servers close the body after the finish reason without sending `[DONE]`.
  get whole(): boolean {
    return this.#finishReason !== "";
  }

  accept(data: string): void {
    if (data === "[DONE]") {
      this.ended = true;
      return;
    }
    let json: unknown;
    try {
      json = JSON.parse(data);
    } catch {
      throw this.#malformed("not JSON", data);
    }
    const parsed = ChunkSchema.safeParse(json);
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      throw this.#malformed(`${issue.path.join(".")}: ${issue.message}`, data);
    }
    const chunk = parsed.data;
    if (chunk.error) throw new TackError("llm.server_error", `${this.#provider} failed mid-stream (${chunk.error.message}); retry`, { retryable: true });
    if (chunk.model) this.#model = chunk.model;
    if (chunk.usage) {
      const usage = chunk.usage;
      const hit = usage.prompt_cache_hit_tokens ?? usage.prompt_tokens_details?.cached_tokens ?? 0;
      this.#usage = {
        inputMissTokens: usage.prompt_cache_miss_tokens ?? usage.prompt_tokens - hit,
        inputHitTokens: hit,
        outputTokens: usage.completion_tokens,
        reasoningTokens: usage.completion_tokens_details?.reasoning_tokens ?? 0,
      };
    }
    const choice = chunk.choices?.find((c) => (c.index ?? 0) === 0);
    if (!choice) return;
    const delta = choice.delta;
    if (delta?.reasoning_content) {
      this.#reasoning += delta.reasoning_content;
      this.#emit(Delta_Kind.KIND_REASONING, delta.reasoning_content);
    }
    if (delta?.content) {
      this.#content += delta.content;
      this.#emit(Delta_Kind.KIND_TEXT, delta.content);
    }
    for (const call of delta?.tool_calls ?? []) {
      let known = this.#tools.get(call.index);
      if (!known) this.#tools.set(call.index, (known = { id: "", name: "", arguments: "" }));
      // Id and name go out once, with the first delta that carries them.
      const id = call.id && !known.id ? call.id : "";
      const name = call.function?.name && !known.name ? call.function.name : "";
      const fragment = call.function?.arguments ?? "";
      known.id ||= id;
      known.name ||= name;
      known.arguments += fragment;
      if (fragment || id || name) this.#emit(Delta_Kind.KIND_TOOL_CALL, fragment, call.index, id, name);
    }
    if (choice.finish_reason) this.#finishReason = choice.finish_reason;
  }

  finish(): Completion {
    if (this.#finishReason === "insufficient_system_resource") {
      throw new TackError("llm.server_error", `${this.#provider} interrupted the reply for lack of inference resources (finish_reason insufficient_system_resource); retry later`, {
        retryable: true,
      });
    }
    const toolCalls: ToolCall[] = [...this.#tools.entries()].sort(([a], [b]) => a - b).map(([index, call]) => {
      if (!call.id || !call.name) throw this.#malformed(`tool call ${index} never got ${call.id ? "a name" : "an id"}`, call.arguments);
      return { id: call.id, name: call.name, arguments: call.arguments };
    });
    if (this.#content === "" && toolCalls.length === 0) {
      const length = this.#finishReason === "length";
      throw new TackError(
        "llm.empty_reply",
        `${this.#provider} returned no content and no tool calls (finish_reason ${this.#finishReason || "none"}); ${length ? "raise max_tokens" : "retry"}`,
        { retryable: !length, details: { finish_reason: this.#finishReason } },
      );
    }
    return {
      content: this.#content,
      reasoningContent: this.#reasoning,
      toolCalls,
      finishReason: this.#finishReason,
      usage: this.#usage,
      model: this.#model,
    };
  }

  #malformed(problem: string, data: string): TackError {
    return malformed(this.#provider, problem, data, "check that the base URL is an OpenAI-compatible chat-completions endpoint");
  }

  #emit(kind: Delta_Kind, text: string, toolIndex = 0, toolCallId = "", toolName = ""): void {
    this.#onDelta({ kind, text, toolIndex, toolCallId, toolName });
  }
}
