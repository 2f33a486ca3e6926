import { trace } from "@opentelemetry/api";
import { Bus, endpoint, inSpan, LlmRpc, startService, TackError, type BusAuth } from "@tack/bus";
import { CompleteRequest, type CompleteDone, type CompleteStreamMessage, type Delta, type RetryNotice } from "@tack/proto";
import { ANTHROPIC_BASE_URL, anthropicProvider } from "./anthropic.js";
import { loadCredentials } from "@tack/credentials";
import { DEFAULT_IMAGE_MODELS, ImageLoader, imageModels } from "./images.js";
import { DEEPSEEK_BASE_URL, deepseekProvider } from "./deepseek.js";
import { OPENAI_BASE_URL, openaiProvider } from "./openai.js";
import { loadPriceTable, priceFor, type PriceTable } from "./prices.js";
import { countRequestParts, loadTokenizer } from "./tokens.js";
import { ProviderRegistry } from "./provider.js";
import { replayProvider } from "./replay.js";
import { compileRetryPolicy, withRetries, type RetryOptions, type RetryPolicy } from "./retry.js";
import { scriptedProvider } from "./scripted.js";
import type { ScriptFileOptions } from "./script-file.js";

/** How to start the llm service. */
export interface LlmServiceOptions {
  /** NATS server URL, e.g. `nats://127.0.0.1:4222`. */
  url: string;
  /** NATS user and TLS files (`commonConfig().natsAuth`); none for an open NATS. */
  natsAuth?: BusAuth;
  /** Subject namespace (default `tack`); tests use a unique one. */
  namespace?: string;
  /** DeepSeek base URL; defaults to env DEEPSEEK_BASE_URL, then https://api.deepseek.com. */
  deepseekBaseUrl?: string;
  /** OpenAI-compatible base URL; defaults to env OPENAI_BASE_URL, then https://api.openai.com/v1. */
  openaiBaseUrl?: string;
  /** Anthropic base URL; defaults to env ANTHROPIC_BASE_URL, then https://api.anthropic.com. */
  anthropicBaseUrl?: string;
  /** Environment for the `*_API_KEY`, `*_BASE_URL` and TACK_PRICES variables (default `process.env`). */
  env?: NodeJS.ProcessEnv;
  /** Home directory holding `.tack/credentials.yaml` (default the user's home). */
  home?: string;
  /**
   * Which files `scripted:` and `replay:` may read: only regular files inside `scriptDirs`
   * (absolute; a relative reference is looked up in each), at most `maxScriptBytes`. The
   * entry point passes the operator configuration's `models`.
   */
  scripts: ScriptFileOptions;
  /** Price table JSON file; defaults to env TACK_PRICES, then the built-in table. */
  pricesPath?: string;
  /** How failed provider calls are retried (default 5 attempts, 500 ms doubling to 10 s). */
  retry?: RetryOptions;
}

/** A running llm service. */
export interface LlmService {
  /** Cancels in-flight completions (they end with retryable `llm.cancelled`) and leaves the bus. */
  stop(): Promise<void>;
}

/**
 * Starts the llm service: serves `<ns>.llm.complete` (queue group `llm`) as a stream of
 * deltas ending in one `done` or `error`, retrying retryable provider failures with a
 * `retry` notice before each new attempt, and `<ns>.llm.check`. Fails before connecting
 * when the credentials file is readable by others, the price table is invalid or the script
 * directories are not absolute.
 */
export async function startLlmService(options: LlmServiceOptions): Promise<LlmService> {
  const env = options.env ?? process.env;
  const retry = compileRetryPolicy(options.retry);
  const credentials = await loadCredentials({ env, home: options.home });
  const prices = await loadPriceTable({ path: options.pricesPath, env });
  const registry = new ProviderRegistry({
    scripted: scriptedProvider(options.scripts),
    replay: replayProvider(options.scripts),
    deepseek: deepseekProvider({ apiKey: credentials.deepseek?.key, baseUrl: options.deepseekBaseUrl ?? env.DEEPSEEK_BASE_URL ?? DEEPSEEK_BASE_URL }),
    openai: openaiProvider({
      apiKey: credentials.openai?.key, baseUrl: options.openaiBaseUrl ?? env.OPENAI_BASE_URL ?? OPENAI_BASE_URL,
      imageModels: imageModels(env.TACK_IMAGE_MODELS ?? DEFAULT_IMAGE_MODELS),
    }),
    anthropic: anthropicProvider({ apiKey: credentials.anthropic?.key, baseUrl: options.anthropicBaseUrl ?? env.ANTHROPIC_BASE_URL ?? ANTHROPIC_BASE_URL }),
  });
  const bus = await Bus.connect({ url: options.url, namespace: options.namespace, name: "tack-llm", ...options.natsAuth });
  const images = new ImageLoader(bus.nc, bus.names.spillBucket);
  const service = await startService({
    bus, name: "llm", description: "model completions streamed over NATS",
    // Counting (scripted usage, llm.count) needs the tokenizer, whose synchronous load blocks the
    // process for seconds: done before the first subscription, not inside the first request.
    warm: async () => loadTokenizer(),
    endpoints: (signal) => [
      endpoint(LlmRpc.CheckModel, async (request) => {
        const resolved = registry.resolve(request.model);
        await resolved.provider.check();
        return { provider: resolved.providerName };
      }),
      endpoint(LlmRpc.CountTokens, async (request) => ({
        ...countRequestParts(CompleteRequest.fromPartial(request.request ?? {})), tokenizer: "deepseek-v3",
      })),
      endpoint(LlmRpc.EstimateCost, async (request) => {
        const usage = { inputMissTokens: request.inputTokens, inputHitTokens: 0, outputTokens: request.outputTokens, reasoningTokens: 0 };
        const price = priceFor(request.model, usage, new Date(), prices);
        return { costUsd: price.costUsd, priceWindow: price.window };
      }),
      endpoint(LlmRpc.Complete, async (request, writer) => {
        let index = 0;
        const send = (body: CompleteStreamMessage["body"]) => writer.send({ index: index++, body });
        try {
          const done = await completeInSpan({ registry, retry, prices, images }, request, {
            onDelta: (delta) => send({ $case: "delta", value: delta }),
            onRetry: (notice) => send({ $case: "retry", value: notice }),
          }, signal);
          send({ $case: "done", value: done });
        } catch (error) {
          // Errors travel inside the stream so that `index` stays gapless up to the last message.
          send({ $case: "error", value: TackError.from(error).toBusError() });
        }
      }),
    ],
  }).catch(async (error: unknown) => {
    await bus.close();
    throw error;
  });

  return {
    stop: async () => {
      await service.stop();
      await bus.close();
    },
  };
}

/**
 * Runs one completion inside an `llm.complete` span carrying the model and, at the end, the
 * attempts, usage and cost; each retry is a span event. The cost is priced at the time the
 * reply finished.
 */
async function completeInSpan(
  service: { registry: ProviderRegistry; retry: RetryPolicy; prices: PriceTable; images: ImageLoader },
  request: CompleteRequest,
  listener: { onDelta: (delta: Delta) => void; onRetry: (notice: RetryNotice) => void },
  signal: AbortSignal,
): Promise<CompleteDone> {
  return inSpan("llm.complete", { "llm.model": request.model, "session.id": request.sessionId }, async () => {
    const span = trace.getActiveSpan();
    const resolved = service.registry.resolve(request.model);
    span?.setAttribute("llm.provider", resolved.providerName);
    // Loaded once for all attempts, and only for a model that views them.
    const images = resolved.provider.takesImages ? await service.images.load(request) : undefined;
    let attempts = 0;
    const done = await withRetries(service.retry, (n) => {
      attempts = n;
      return resolved.provider.complete(request, listener.onDelta, signal, images);
    }, (notice) => {
      span?.addEvent("llm.retry", { "llm.attempt": notice.attempt, "error.code": notice.code, "llm.retry_delay_ms": notice.delayMs });
      listener.onRetry(notice);
    }, signal);
    const usage = done.usage ?? { inputMissTokens: 0, inputHitTokens: 0, outputTokens: 0, reasoningTokens: 0 };
    const price = priceFor(request.model, usage, new Date(), service.prices);
    span?.setAttributes({
      "llm.attempts": attempts,
      "llm.response_model": done.model,
      "llm.finish_reason": done.finishReason,
      "llm.input_miss_tokens": usage.inputMissTokens,
      "llm.input_hit_tokens": usage.inputHitTokens,
      "llm.output_tokens": usage.outputTokens,
      "llm.reasoning_tokens": usage.reasoningTokens,
      "llm.cost_usd": price.costUsd,
      "llm.price_window": price.window,
    });
    return { ...done, usage, costUsd: price.costUsd, priceWindow: price.window };
  });
}
