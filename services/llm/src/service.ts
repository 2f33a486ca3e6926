import { trace } from "@opentelemetry/api";
import { Bus, inSpan, serveStream, TackError } from "@tack/bus";
import { CheckModelRequest, CheckModelResponse, CompleteRequest, CompleteStreamMessage, type Delta } from "@tack/proto";
import { loadCredentials } from "./credentials.js";
import { DEEPSEEK_BASE_URL, deepseekProvider } from "./deepseek.js";
import { ProviderRegistry, type Completion } from "./provider.js";
import { scriptedProvider } from "./scripted.js";

/** How to start the llm service. */
export interface LlmServiceOptions {
  /** NATS server URL, e.g. `nats://127.0.0.1:4222`. */
  url: string;
  /** Subject namespace (default `tack`); tests use a unique one. */
  namespace?: string;
  /** DeepSeek base URL; defaults to env DEEPSEEK_BASE_URL, then https://api.deepseek.com. */
  deepseekBaseUrl?: string;
  /** Environment for DEEPSEEK_API_KEY and DEEPSEEK_BASE_URL (default `process.env`). */
  env?: NodeJS.ProcessEnv;
  /** Home directory holding `.tack/credentials.yaml` (default the user's home). */
  home?: string;
  /** Directory relative `scripted:` paths resolve against (default `process.cwd()`). */
  cwd?: string;
}

/** A running llm service. */
export interface LlmService {
  /** Cancels in-flight completions (they end with retryable `llm.cancelled`) and leaves the bus. */
  stop(): Promise<void>;
}

/**
 * Starts the llm service: serves `<ns>.llm.complete` (queue group `llm`) as a stream of
 * deltas ending in one `done` or `error`. Fails before connecting when the credentials file
 * is readable by others.
 */
export async function startLlmService(options: LlmServiceOptions): Promise<LlmService> {
  const env = options.env ?? process.env;
  const credentials = await loadCredentials({ env, home: options.home });
  const registry = new ProviderRegistry({
    scripted: scriptedProvider({ cwd: options.cwd ?? process.cwd() }),
    deepseek: deepseekProvider({ apiKey: credentials.deepseekApiKey, baseUrl: options.deepseekBaseUrl ?? env.DEEPSEEK_BASE_URL ?? DEEPSEEK_BASE_URL }),
  });
  const bus = await Bus.connect({ url: options.url, namespace: options.namespace, name: "tack-llm" });
  const inFlight = new Set<Promise<void>>();
  const stopping = new AbortController();

  bus.serve(bus.names.llmCheck, "llm", CheckModelRequest, CheckModelResponse, async (request) => {
    const resolved = registry.resolve(request.model);
    await resolved.provider.check();
    return { provider: resolved.providerName };
  });

  serveStream(bus, bus.names.llmComplete, "llm", CompleteRequest, CompleteStreamMessage, async (request, writer) => {
    let index = 0;
    const send = (body: CompleteStreamMessage["body"]) => writer.send({ index: index++, body });
    const run = (async () => {
      try {
        const done = await completeInSpan(registry, request, (delta) => send({ $case: "delta", value: delta }), stopping.signal);
        // Pricing is added by the price table (issue 4); until then calls are unpriced.
        send({ $case: "done", value: { ...done, costUsd: 0, priceWindow: "" } });
      } catch (error) {
        // Errors travel inside the stream so that `index` stays gapless up to the last message.
        send({ $case: "error", value: TackError.from(error).toBusError() });
      }
    })();
    inFlight.add(run);
    await run.finally(() => inFlight.delete(run));
  });

  // Make sure the server knows our subscriptions before anyone is told we are up.
  await bus.nc.flush();

  return {
    stop: async () => {
      stopping.abort();
      await Promise.all(inFlight);
      await bus.close();
    },
  };
}

/** Runs one completion inside an `llm.complete` span carrying the model and, at the end, its usage. */
async function completeInSpan(
  registry: ProviderRegistry,
  request: CompleteRequest,
  onDelta: (delta: Delta) => void,
  signal: AbortSignal,
): Promise<Completion> {
  return inSpan("llm.complete", { "llm.model": request.model, "session.id": request.sessionId }, async () => {
    const span = trace.getActiveSpan();
    const resolved = registry.resolve(request.model);
    span?.setAttribute("llm.provider", resolved.providerName);
    const done = await resolved.provider.complete(request, onDelta, signal);
    const usage = done.usage;
    span?.setAttributes({
      "llm.response_model": done.model,
      "llm.finish_reason": done.finishReason,
      "llm.input_miss_tokens": usage?.inputMissTokens ?? 0,
      "llm.input_hit_tokens": usage?.inputHitTokens ?? 0,
      "llm.output_tokens": usage?.outputTokens ?? 0,
      "llm.reasoning_tokens": usage?.reasoningTokens ?? 0,
    });
    return done;
  });
}
