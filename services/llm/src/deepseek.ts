import { TackError } from "@tack/bus";
import { Delta_Kind, Role, type ChatMessage, type CompleteRequest, type Delta, type ToolCall, type Usage } from "@tack/proto";
import { z } from "zod";
import { cancelled, type Completion, type Provider, type ProviderEntry } from "./provider.js";
import { SseParser } from "./sse.js";

/** Where DeepSeek is reached when neither the options nor DEEPSEEK_BASE_URL say otherwise. */
export const DEEPSEEK_BASE_URL = "https://api.deepseek.com";

/** Settings of the DeepSeek provider, already resolved by the service. */
export interface DeepSeekOptions {
  /** API key; without one every completion fails with `llm.missing_key`. */
  apiKey?: string;
  /** Base URL without `/chat/completions`, e.g. `https://api.deepseek.com`. */
  baseUrl: string;
  /** Fail with `llm.timeout` when the server sends nothing for this long (default 120 s). */
  idleTimeoutMs?: number;
}

// DeepSeek model ids are lowercase names like `deepseek-chat`; whether one exists is the API's call.
const MODEL_NAME = /^[a-z0-9][a-z0-9._-]*$/;

/** The `deepseek:MODEL` provider: OpenAI-compatible streaming chat completions. */
export function deepseekProvider(options: DeepSeekOptions): ProviderEntry {
  return {
    form: "deepseek:MODEL",
    create: (model) => (MODEL_NAME.test(model) ? {
      complete: (request, onDelta, signal) => complete(options, model, request, onDelta, signal),
      check: async () => { requireKey(options); },
    } satisfies Provider : undefined),
  };
}

function requireKey(options: DeepSeekOptions): string {
  if (!options.apiKey) {
    throw new TackError(
      "llm.missing_key",
      "no DeepSeek API key: set DEEPSEEK_API_KEY or write ~/.tack/credentials.yaml (chmod 600) with `deepseek:` and an indented `api_key: sk-...`, then restart the llm service",
    );
  }
  return options.apiKey;
}

async function complete(
  options: DeepSeekOptions,
  model: string,
  request: CompleteRequest,
  onDelta: (delta: Delta) => void,
  signal: AbortSignal,
): Promise<Completion> {
  const apiKey = requireKey(options);
  if (signal.aborted) throw cancelled();
  const body = JSON.stringify(requestBody(model, request));
  const idleTimeoutMs = options.idleTimeoutMs ?? 120_000;
  const idle = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  const arm = () => {
    clearTimeout(timer);
    timer = setTimeout(() => idle.abort(), idleTimeoutMs);
  };
  // Why the transfer stopped, if we stopped it; otherwise the network did.
  const stopped = (): TackError | undefined => {
    if (signal.aborted) return cancelled();
    if (idle.signal.aborted) return new TackError("llm.timeout", `DeepSeek sent nothing for ${idleTimeoutMs} ms; retry`, { retryable: true });
    return undefined;
  };
  arm();
  try {
    let response: Response;
    try {
      response = await fetch(`${options.baseUrl.replace(/\/+$/, "")}/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json", accept: "text/event-stream" },
        body,
        signal: AbortSignal.any([signal, idle.signal]),
      });
    } catch (error) {
      const cause = (error as { cause?: { code?: string; message?: string } }).cause;
      throw stopped() ?? new TackError(
        "llm.unreachable",
        `cannot reach DeepSeek at ${options.baseUrl} (${cause?.code ?? cause?.message ?? (error as Error).message}); check the network or DEEPSEEK_BASE_URL`,
        { retryable: true, cause: error },
      );
    }
    if (!response.ok) throw await httpError(response, model, apiKey);
    if (!response.body) throw streamCut();
    const reply = new ReplyStream(model, onDelta);
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    const parser = new SseParser();
    try {
      while (!reply.done) {
        const chunk = await reader.read().catch((error: unknown) => {
          throw stopped() ?? streamCut(error);
        });
        arm();
        if (chunk.done) {
          const end = parser.end();
          for (const event of end.events) reply.accept(event);
          if (!reply.done && (end.partialLine || reply.finishReason === "")) throw streamCut();
          break;
        }
        for (const event of parser.push(decoder.decode(chunk.value, { stream: true }))) {
          reply.accept(event);
          if (reply.done) break;
        }
      }
    } finally {
      // Releases the connection when we stop reading before the server ends the body.
      await reader.cancel().catch(() => undefined);
    }
    return reply.finish();
  } finally {
    clearTimeout(timer);
  }
}

/** The OpenAI-compatible request body, system prompt first. */
function requestBody(model: string, request: CompleteRequest): Record<string, unknown> {
  const messages: Record<string, unknown>[] = [];
  if (request.systemPrompt !== "") messages.push({ role: "system", content: request.systemPrompt });
  request.messages.forEach((message, i) => messages.push(wireMessage(message, i)));
  const tools = request.tools.map((tool) => {
    let parameters: unknown = { type: "object", properties: {} };
    if (tool.parametersJson !== "") {
      try {
        parameters = JSON.parse(tool.parametersJson);
      } catch (error) {
        throw new TackError("llm.invalid_request", `tool ${tool.name} has parameters_json that is not JSON (${(error as Error).message}); fix its schema export`, {
          details: { tool: tool.name }, cause: error,
        });
      }
    }
    return { type: "function", function: { name: tool.name, description: tool.description, parameters } };
  });
  return {
    model,
    messages,
    ...(tools.length > 0 ? { tools } : {}),
    temperature: request.temperature,
    ...(request.maxTokens > 0 ? { max_tokens: request.maxTokens } : {}),
    stream: true,
    stream_options: { include_usage: true },
  };
}

function wireMessage(message: ChatMessage, i: number): Record<string, unknown> {
  switch (message.role) {
    case Role.ROLE_SYSTEM:
      return { role: "system", content: message.content };
    case Role.ROLE_USER:
      return { role: "user", content: message.content };
    case Role.ROLE_ASSISTANT:
      // DeepSeek's thinking mode answers 400 when an assistant message with tool calls comes
      // back without its reasoning_content; elsewhere it ignores the field, so it is sent only then.
      if (message.toolCalls.length === 0) return { role: "assistant", content: message.content };
      return {
        role: "assistant",
        content: message.content,
        reasoning_content: message.reasoningContent,
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

async function httpError(response: Response, model: string, apiKey: string): Promise<TackError> {
  const status = response.status;
  const text = await response.text().catch(() => "");
  let detail = text;
  try {
    const message = (JSON.parse(text) as { error?: { message?: unknown } }).error?.message;
    if (typeof message === "string") detail = message;
  } catch {
    // Not JSON (a proxy's HTML page, say): keep the raw text.
  }
  detail = redact(detail.replace(/\s+/g, " ").trim().slice(0, 300), apiKey) || response.statusText;
  const details: Record<string, string> = { status: String(status) };
  const what = `HTTP ${status}: ${detail}`;
  if (status === 401 || status === 403) {
    return new TackError("llm.auth", `DeepSeek rejected the API key (${what}); check DEEPSEEK_API_KEY or the api_key in ~/.tack/credentials.yaml`, { details });
  }
  if (status === 429) {
    const retryAfter = response.headers.get("retry-after");
    if (retryAfter) details.retry_after = retryAfter;
    return new TackError("llm.rate_limited", `DeepSeek is rate limiting this key (${what}); retry ${retryAfter ? `after ${retryAfter} s` : "later"}`, {
      retryable: true, details,
    });
  }
  if (status >= 500) return new TackError("llm.server_error", `DeepSeek failed (${what}); retry later`, { retryable: true, details });
  if (status === 400 && /model not exist/i.test(detail)) {
    return new TackError("llm.unknown_model", `DeepSeek has no model ${JSON.stringify(model)} (${what}); use deepseek:MODEL with a model it serves, e.g. deepseek:deepseek-chat`, {
      details: { ...details, model },
    });
  }
  return new TackError("llm.bad_request", `DeepSeek refused the request (${what}); fix what it names and retry`, { details });
}

/** Hides the key and anything key-shaped from provider text that ends up in errors and logs. */
function redact(text: string, apiKey: string): string {
  return text.split(apiKey).join("sk-***").replace(/sk-[A-Za-z0-9_*-]{4,}/g, "sk-***");
}

function streamCut(cause?: unknown): TackError {
  return new TackError("llm.stream_cut", "the DeepSeek stream ended before the reply was complete (no [DONE] or finish_reason); retry", {
    retryable: true, cause,
  });
}

function malformed(problem: string, data: string): TackError {
  return new TackError(
    "llm.malformed_chunk",
    `DeepSeek sent a malformed stream chunk (${problem}): ${data.slice(0, 200)}; retry, and check that DEEPSEEK_BASE_URL is an OpenAI-compatible endpoint`,
    { retryable: true },
  );
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
    prompt_cache_hit_tokens: z.number().int().nullish(),
    prompt_cache_miss_tokens: z.number().int().nullish(),
    completion_tokens_details: z.object({ reasoning_tokens: z.number().int().nullish() }).nullish(),
  }).nullish(),
  error: z.object({ message: z.string() }).nullish(),
});

/** Accumulates one streamed reply from its SSE events, emitting deltas as they come. */
class ReplyStream {
  done = false;
  finishReason = "";
  #content = "";
  #reasoning = "";
  #model: string;
  #usage: Usage = { inputMissTokens: 0, inputHitTokens: 0, outputTokens: 0, reasoningTokens: 0 };
  readonly #tools = new Map<number, { id: string; name: string; arguments: string }>();
  readonly #onDelta: (delta: Delta) => void;

  constructor(model: string, onDelta: (delta: Delta) => void) {
    this.#model = model;
    this.#onDelta = onDelta;
  }

  accept(data: string): void {
    if (data === "[DONE]") {
      this.done = true;
      return;
    }
    let json: unknown;
    try {
      json = JSON.parse(data);
    } catch {
      throw malformed("not JSON", data);
    }
    const parsed = ChunkSchema.safeParse(json);
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      throw malformed(`${issue.path.join(".")}: ${issue.message}`, data);
    }
    const chunk = parsed.data;
    if (chunk.error) throw new TackError("llm.server_error", `DeepSeek failed mid-stream (${chunk.error.message}); retry`, { retryable: true });
    if (chunk.model) this.#model = chunk.model;
    if (chunk.usage) {
      const usage = chunk.usage;
      const hit = usage.prompt_cache_hit_tokens ?? 0;
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
    if (choice.finish_reason) this.finishReason = choice.finish_reason;
  }

  finish(): Completion {
    if (this.finishReason === "insufficient_system_resource") {
      throw new TackError("llm.server_error", "DeepSeek interrupted the reply for lack of inference resources (finish_reason insufficient_system_resource); retry later", {
        retryable: true,
      });
    }
    const toolCalls: ToolCall[] = [...this.#tools.entries()].sort(([a], [b]) => a - b).map(([index, call]) => {
      if (!call.id || !call.name) throw malformed(`tool call ${index} never got ${call.id ? "a name" : "an id"}`, call.arguments);
      return { id: call.id, name: call.name, arguments: call.arguments };
    });
    if (this.#content === "" && toolCalls.length === 0) {
      const length = this.finishReason === "length";
      throw new TackError(
        "llm.empty_reply",
        `DeepSeek returned no content and no tool calls (finish_reason ${this.finishReason || "none"}); ${length ? "raise max_tokens" : "retry"}`,
        { retryable: !length, details: { finish_reason: this.finishReason } },
      );
    }
    return {
      content: this.#content,
      reasoningContent: this.#reasoning,
      toolCalls,
      finishReason: this.finishReason,
      usage: this.#usage,
      model: this.#model,
    };
  }

  #emit(kind: Delta_Kind, text: string, toolIndex = 0, toolCallId = "", toolName = ""): void {
    this.#onDelta({ kind, text, toolIndex, toolCallId, toolName });
  }
}
