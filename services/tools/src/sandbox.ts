import { type Bus, DEFAULT_SILENCE_MS, openSandboxProcess, retrying, type RetryPolicy, retryPolicy, type SandboxOutput, type SandboxProcess, type SandboxProcessRequest, SandboxRpc, TackError } from "@tack/bus";
import { EnsureSandboxRequest, ExecRequest, ExecResponse, type HopRetry } from "@tack/proto";

/** The session's sandbox as the tools see it: make sure it exists, then run commands in it. */
export interface SandboxClient {
  /** Resolves once the session's container exists, creating it if needed. */
  ensure(request: EnsureSandboxRequest): Promise<void>;
  /**
   * Runs one command in the session's container; a non-zero exit is a normal response.
   * Rejects with TackError `tools.cancelled` once `signal` aborts.
   */
  exec(request: ExecRequest, signal: AbortSignal): Promise<ExecResponse>;
  /**
   * Starts a long-lived process in the session's container of `request.mode`, its output going
   * to `onOutput` (a run_code program, decision 0020). Rejects like `exec` when it cannot start.
   */
  spawn(request: SandboxProcessRequest, onOutput: SandboxOutput): Promise<SandboxProcess>;
}

/** A cold start creates a container; the image is local, so this is generous. */
const ENSURE_TIMEOUT_MS = 60_000;
/** Allowance on top of a command's own timeout for the bus round trip and exec overhead. */
const EXEC_MARGIN_MS = 15_000;
/** Used when a request leaves the timeout to the sandbox's default: wait as long as the longest allowed command. */
const UNSPECIFIED_EXEC_TIMEOUT_MS = 600_000;

/** How long an answered ensure is trusted before the next call of the session asks again. */
const ENSURED_FOR_MS = 30_000;

/**
 * SandboxClient over the bus: the sandbox service's `sandbox.ensure` and `sandbox.exec`. An
 * ensure answered for exactly the same session, tenant, workspace and mode within the last
 * 30 s is not asked again (it saves a round trip on every call of a busy session); an exec
 * that finds the container gone (`sandbox.not_found`) forgets that, so the call's retry
 * (`CallSandbox`) ensures it again.
 */
export class BusSandboxClient implements SandboxClient {
  readonly #bus: Bus;
  /** `<session> <mode>` → the ensure request answered and when. */
  readonly #ensured = new Map<string, { request: EnsureSandboxRequest; at: number }>();

  constructor(bus: Bus) {
    this.#bus = bus;
  }

  async ensure(request: EnsureSandboxRequest): Promise<void> {
    const k = `${request.sessionId} ${request.mode}`;
    const known = this.#ensured.get(k);
    if (known && Date.now() - known.at < ENSURED_FOR_MS && sameEnsure(known.request, request)) return;
    await this.#bus.request(SandboxRpc.EnsureSandbox, request, {
      timeoutMs: ENSURE_TIMEOUT_MS, silenceMs: DEFAULT_SILENCE_MS,
    });
    this.#ensured.set(k, { request, at: Date.now() });
    if (this.#ensured.size > 10_000) this.#ensured.delete(this.#ensured.keys().next().value!);
  }

  async exec(request: ExecRequest, signal: AbortSignal): Promise<ExecResponse> {
    if (signal.aborted) throw cancelledError();
    const timeoutMs = (request.timeoutMs || UNSPECIFIED_EXEC_TIMEOUT_MS) + EXEC_MARGIN_MS;
    try {
      // The exec contract has no cancel message: on abort we stop waiting, and the command
      // runs on in the container until its own timeout.
      return await abortable(this.#bus.request(SandboxRpc.Exec, request, { timeoutMs, silenceMs: DEFAULT_SILENCE_MS }), signal);
    } catch (error) {
      // The container went away since it was ensured (reaped, or gone with a dead replica): the next ensure asks again.
      if (error instanceof TackError && error.code === "sandbox.not_found") this.#ensured.delete(`${request.sessionId} ${request.mode}`);
      throw error;
    }
  }

  async spawn(request: SandboxProcessRequest, onOutput: SandboxOutput): Promise<SandboxProcess> {
    try {
      return await openSandboxProcess(this.#bus, request, onOutput);
    } catch (error) {
      if (error instanceof TackError && error.code === "sandbox.not_found") this.#ensured.delete(`${request.sessionId} ${request.mode}`);
      throw error;
    }
  }
}

function sameEnsure(a: EnsureSandboxRequest, b: EnsureSandboxRequest): boolean {
  return a.sessionId === b.sessionId && a.tenant === b.tenant && a.workspace === b.workspace && a.mode === b.mode;
}

/** Which tool call a `CallSandbox` serves. */
export interface CallIdentity {
  readonly callId: string;
  /** 1 for the first dispatch of the call, higher for a retry after a lost worker. */
  readonly attempt: number;
  /** When the loop first dispatched the call (ms since the epoch). */
  readonly firstAttemptAtMs: number;
}

/**
 * The sandbox as one tool call sees it: each exec carries the idempotency key
 * `<call id>#<n>` (n counting the call's execs), so a retried call replays what already ran
 * instead of running it twice; a request that no sandbox replica answered, or whose replica
 * stopped answering, is sent again with backoff within the policy's window, and each such
 * retry is kept in `retries` (the loop logs them as `tool/retry`).
 */
export class CallSandbox implements SandboxClient {
  readonly retries: HopRetry[] = [];
  readonly #inner: SandboxClient;
  readonly #call: CallIdentity;
  readonly #policy: RetryPolicy;
  readonly #signal: AbortSignal;
  #execs = 0;
  /** The call's ensure, repeated when its container turns out gone. */
  #ensured: EnsureSandboxRequest | undefined;
  #replayed = false;

  constructor(inner: SandboxClient, call: CallIdentity, policy: RetryPolicy, signal: AbortSignal) {
    this.#inner = inner;
    this.#call = call;
    this.#policy = policy;
    this.#signal = signal;
  }

  /** True when at least one exec was answered from the sandbox's record of an earlier attempt. */
  get replayed(): boolean {
    return this.#replayed;
  }

  ensure(request: EnsureSandboxRequest): Promise<void> {
    this.#ensured = request;
    return this.#retrying(() => this.#inner.ensure(request));
  }

  async exec(request: ExecRequest, signal: AbortSignal): Promise<ExecResponse> {
    this.#execs += 1;
    const keyed: ExecRequest = {
      ...request, execKey: `${this.#call.callId}#${this.#execs}`, attempt: this.#call.attempt, firstAttemptAtMs: this.#call.firstAttemptAtMs,
    };
    // A re-send is a retry of this exec (attempt > 1): the sandbox replays it, or refuses it where it cannot know whether an earlier send ran.
    let lost = false;
    const response = await this.#retrying(async (n) => {
      // The container went with a dead sandbox replica: ensure it again (a survivor takes it over) before the re-send.
      if (lost && this.#ensured) await this.#inner.ensure(this.#ensured);
      try {
        return await this.#inner.exec(n === 1 ? keyed : { ...keyed, attempt: keyed.attempt + n - 1 }, signal);
      } catch (error) {
        lost = error instanceof TackError && error.code === "sandbox.not_found" && this.#ensured !== undefined;
        throw error;
      }
    }, (error) => error.code === "sandbox.not_found" && this.#ensured !== undefined);
    if (response.replayed) this.#replayed = true;
    return response;
  }

  /** Starts the process; a container gone since the call's ensure (a dead sandbox replica) is ensured again first, within the retry window. */
  spawn(request: SandboxProcessRequest, onOutput: SandboxOutput): Promise<SandboxProcess> {
    let lost = false;
    return this.#retrying(async () => {
      if (lost && this.#ensured) await this.#inner.ensure(this.#ensured);
      try {
        return await this.#inner.spawn(request, onOutput);
      } catch (error) {
        lost = error instanceof TackError && error.code === "sandbox.not_found" && this.#ensured !== undefined;
        throw error;
      }
    }, (error) => error.code === "sandbox.not_found" && this.#ensured !== undefined);
  }

  #retrying<T>(send: (attempt: number) => Promise<T>, alsoRetry: (error: TackError) => boolean = () => false): Promise<T> {
    return retrying(this.#policy, send, {
      signal: this.#signal,
      // A cancelled call is the tools service stopping: the loop sends it to another worker.
      retryable: (error) => (error.retryable || alsoRetry(error)) && error.code !== "tools.cancelled",
      onRetry: ({ attempt, error, delayMs }) => {
        this.retries.push({ attempt, code: error.code, message: error.message, delayMs });
      },
    });
  }
}

/** The retry window of sandbox requests when none is configured: a restarted sandbox service answers well within it. */
export const DEFAULT_RETRY_WINDOW_MS = 60_000;

/** The policy of a tools worker's retries to the sandbox service. */
export function sandboxRetryPolicy(windowMs = DEFAULT_RETRY_WINDOW_MS): RetryPolicy {
  return retryPolicy({ windowMs, baseDelayMs: 250, maxDelayMs: 5_000 }, "tools.invalid_options");
}

/** The error every SandboxClient rejects with when a call is cancelled. */
export function cancelledError(): TackError {
  return new TackError("tools.cancelled", "tool call cancelled because the tools service is stopping; retry it", { retryable: true });
}

function abortable<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(cancelledError());
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}
