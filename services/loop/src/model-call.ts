// One model call of a step: streamed from the llm service, its deltas logged as they come, retried across llm restarts.
import { LlmRpc, requestStream, retrying, TackError, type Bus, type RetryPolicy } from "@tack/bus";
import { draft, type Draft, type ModelRequest } from "@tack/log";
import { CompleteRequest, type CompleteDone, type Delta, type Event } from "@tack/proto";

/** What a model call needs from its session. */
export interface ModelCallDeps {
  readonly bus: Bus;
  readonly sessionId: string;
  readonly append: (...drafts: Draft[]) => Promise<Event[]>;
  /** Deltas packed into one `assistant/chunks` event at most. */
  readonly chunkPack: number;
  /** Longest silence of the provider (no delta) before the call fails. */
  readonly llmIdleTimeoutMs: number;
  /** Longest silence of the llm service itself (not even a heartbeat) before it counts as dead. */
  readonly silenceMs: number;
  /** Retries of a call that no llm replica answered, or whose replica died mid-stream. */
  readonly retry: RetryPolicy;
}

const SOURCE = "loop";

/**
 * Streams one model call; its deltas are logged as `assistant/chunks` when `logChunks` (not
 * for a summary, which is no assistant message). The llm service retries provider failures
 * itself and says so (`retry` messages); a call that no llm replica takes, or whose replica
 * stops mid-stream, is sent again here within the retry window. Either way the retry is an
 * `llm/retry` event and the void attempt's unlogged deltas are dropped; its logged chunks stay
 * in the log as what was streamed, and only the final `done` becomes the assistant message.
 */
export async function callModel(deps: ModelCallDeps, turn: number, step: number, request: ModelRequest, logChunks = true): Promise<CompleteDone> {
  const pending: Delta[] = [];
  const writes: Array<Promise<unknown>> = [];
  // A write is awaited after the call; if the call fails first, its rejection (a lost lease, say)
  // must not go unhandled and end the process: the caller hears of the call's own failure.
  const write = (appended: Promise<unknown>) => {
    appended.catch(() => undefined);
    writes.push(appended);
  };
  const flush = () => {
    if (pending.length === 0) return;
    write(deps.append(draft("assistantChunks", { turn, step, deltas: pending.splice(0) }, SOURCE)));
  };
  // Retry events logged so far: a replica's own attempts are numbered after the calls before it.
  let logged = 0;
  const logRetry = (attempt: number, code: string, message: string, delayMs: number) => {
    pending.length = 0;
    logged += 1;
    write(deps.append(draft("llmRetry", { turn, step, attempt, code, message, delayMs }, SOURCE)));
  };
  const body = CompleteRequest.fromPartial({
    sessionId: deps.sessionId, model: request.model, systemPrompt: request.systemPrompt, tools: [...request.tools],
    messages: [...request.messages], temperature: request.temperature, maxTokens: request.maxTokens,
  });
  const done = await retrying(deps.retry, async () => {
    const prior = logged;
    let result: CompleteDone | undefined;
    let error: TackError | undefined;
    await requestStream(deps.bus, LlmRpc.Complete, body, (m) => {
      const b = m.body;
      if (b?.$case === "delta") {
        if (!logChunks) return;
        pending.push(b.value);
        if (pending.length >= deps.chunkPack) flush();
      } else if (b?.$case === "retry") logRetry(prior + b.value.attempt, b.value.code, b.value.message, b.value.delayMs);
      else if (b?.$case === "done") result = b.value;
      else if (b?.$case === "error") error = TackError.fromBusError(b.value);
    }, (m) => m.body?.$case === "done" || m.body?.$case === "error", { idleTimeoutMs: deps.llmIdleTimeoutMs, silenceMs: deps.silenceMs });
    // An error the llm service reports (after its own retries) is the provider's answer: not retried here.
    if (error) throw new ProviderError(error);
    if (!result) throw new TackError("llm.empty_reply", "the model reply stream ended without a final message");
    return result;
  }, {
    // Only the bus failing is ours to retry: no replica answered, or the one streaming died.
    retryable: (e) => e.retryable && e.code.startsWith("bus.") && !(e instanceof ProviderError),
    onRetry: ({ error, delayMs }) => logRetry(logged + 1, error.code, error.message, delayMs),
  }).catch((error: unknown) => {
    throw error instanceof ProviderError ? error.reported : error;
  }).finally(flush);
  await Promise.all(writes);
  return done;
}

/** An error the llm service sent as its answer (wrapped so the retry policy leaves it alone). */
class ProviderError extends TackError {
  readonly reported: TackError;
  constructor(reported: TackError) {
    super(reported.code, reported.message, { retryable: reported.retryable, details: { ...reported.details } });
    this.reported = reported;
  }
}
