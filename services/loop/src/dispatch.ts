// Tool dispatch: one tool call sent to a tools worker that stays alive, retried on another when it dies.
import { retrying, TackError, ToolsRpc, type Bus, type RetryPolicy } from "@tack/bus";
import { draft, type Draft } from "@tack/log";
import { CallToolResponse, type DefinedTools, type Event, type ToolCall } from "@tack/proto";

/** What a dispatch needs from its session. */
export interface DispatchDeps {
  readonly bus: Bus;
  readonly sessionId: string;
  readonly tenant: string;
  readonly workspace: string;
  /** The session's mode (standard, code, ...): the tools service refuses a tool the mode does not offer. */
  readonly sessionMode: string;
  /** The tools the session defined (creator mode), sent with the call so that one of them can be called; none otherwise. */
  readonly defined?: DefinedTools;
  readonly append: (...drafts: Draft[]) => Promise<Event[]>;
  /** Longest wait for a tool result (the bash tool itself allows up to 600 s). */
  readonly toolTimeoutMs: number;
  /** Longest silence of the tools worker (not even a heartbeat) before it counts as dead. */
  readonly silenceMs: number;
  readonly retry: RetryPolicy;
}

const SOURCE = "loop";

/** Wording the model sees for a call whose worker died and whose fate cannot be known. */
export const FATE_UNKNOWN_TEXT =
  "Interrupted: the worker running this tool call stopped, so it may or may not have run. Check its effects (for example, read the files it would have changed) before running it again.";

/**
 * Logs `tool/call` and runs the call under sandbox mode `mode`. The tools worker sends
 * heartbeats; a worker silent for `silenceMs` (it died), or no worker at all, gets the call
 * again — same call id, next attempt — with backoff within the retry window, each retry a
 * `tool/retry` event. Retrying is safe: the sandbox keys every exec by call id and replays
 * what already ran. A call whose fate the sandbox cannot know is answered "may or may not have
 * run"; a tools service that cannot be reached in the window is a result too, never a hang.
 * The calls a tool made of other tools (a run_code program's) are logged as `tool/inner`
 * events, and a tool the call defined (define_tool) as `tool/defined`, before the caller logs the result.
 */
export async function dispatchTool(deps: DispatchDeps, call: ToolCall, mode: string, turn: number, step: number): Promise<CallToolResponse> {
  await deps.append(draft("toolCall", { callId: call.id, name: call.name, arguments: call.arguments, turn, step }, SOURCE));
  const started = performance.now();
  const firstAttemptAtMs = Date.now();
  const logRetry = (attempt: number, hop: string, code: string, message: string, delayMs: number) =>
    deps.append(draft("toolRetry", { callId: call.id, turn, step, attempt, hop, code, message, delayMs }, SOURCE));
  let response: CallToolResponse;
  try {
    response = await retrying(deps.retry, (attempt) => deps.bus.request(ToolsRpc.CallTool, {
      sessionId: deps.sessionId, tenant: deps.tenant, callId: call.id, name: call.name, arguments: call.arguments,
      workspace: deps.workspace, sandboxMode: mode, attempt, firstAttemptAtMs, sessionMode: deps.sessionMode,
      ...(deps.defined ? { defined: deps.defined } : {}),
    }, { timeoutMs: deps.toolTimeoutMs, silenceMs: deps.silenceMs }), {
      onRetry: ({ attempt, error, delayMs }) => logRetry(attempt, "tools", error.code, error.message, delayMs).then(() => undefined),
    });
  } catch (error) {
    const e = TackError.from(error);
    const content = e.code === "sandbox.call_fate_unknown" || e.code === "bus.worker_lost"
      ? FATE_UNKNOWN_TEXT
      : `Tool ${call.name} could not run: ${e.message}`;
    return CallToolResponse.fromPartial({ content, isError: true, durationMs: performance.now() - started });
  }
  for (const r of response.retries) await logRetry(r.attempt, "sandbox", r.code, r.message, r.delayMs);
  if (response.innerCalls.length > 0) {
    await deps.append(...response.innerCalls.map((inner, i) => draft("toolInner", {
      parentCallId: call.id, index: i + 1, name: inner.name, arguments: inner.arguments, content: inner.content, isError: inner.isError, durationMs: inner.durationMs,
    }, SOURCE)));
  }
  // A define_tool call that succeeded: the definition is the log's, so every later list and call (and a resumed session) has it.
  if (response.defined && !response.isError) {
    const { name, description, parametersJson, language, code } = response.defined;
    await deps.append(draft("toolDefined", { callId: call.id, name, description, parametersJson, language, code }, SOURCE));
  }
  return response;
}

/** Runs functions at most `width` at once, starting them in the order they asked. */
export function limiter(width: number): <T>(fn: () => Promise<T>) => Promise<T> {
  let active = 0;
  const queue: Array<() => void> = [];
  return async (fn) => {
    if (active < width) active++;
    else await new Promise<void>((resolve) => queue.push(resolve));
    try {
      return await fn();
    } finally {
      // Hand the slot straight to the next in line, or free it.
      const next = queue.shift();
      if (next) next();
      else active--;
    }
  };
}
