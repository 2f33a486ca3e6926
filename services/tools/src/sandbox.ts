import { TackError, type Bus } from "@tack/bus";
import { EnsureSandboxRequest, EnsureSandboxResponse, ExecRequest, ExecResponse } from "@tack/proto";

/** The session's sandbox as the tools see it: make sure it exists, then run commands in it. */
export interface SandboxClient {
  /** Resolves once the session's container exists, creating it if needed. */
  ensure(request: EnsureSandboxRequest): Promise<void>;
  /**
   * Runs one command in the session's container; a non-zero exit is a normal response.
   * Rejects with TackError `tools.cancelled` once `signal` aborts.
   */
  exec(request: ExecRequest, signal: AbortSignal): Promise<ExecResponse>;
}

/** A cold start creates a container; the image is local, so this is generous. */
const ENSURE_TIMEOUT_MS = 60_000;
/** Allowance on top of a command's own timeout for the bus round trip and exec overhead. */
const EXEC_MARGIN_MS = 15_000;
/** Used when a request leaves the timeout to the sandbox's default: wait as long as the longest allowed command. */
const UNSPECIFIED_EXEC_TIMEOUT_MS = 600_000;

/** SandboxClient over the bus: the sandbox service's `sandbox.ensure` and `sandbox.exec`. */
export class BusSandboxClient implements SandboxClient {
  readonly #bus: Bus;

  constructor(bus: Bus) {
    this.#bus = bus;
  }

  async ensure(request: EnsureSandboxRequest): Promise<void> {
    await this.#bus.request(this.#bus.names.sandboxEnsure, EnsureSandboxRequest, request, EnsureSandboxResponse, {
      timeoutMs: ENSURE_TIMEOUT_MS,
    });
  }

  async exec(request: ExecRequest, signal: AbortSignal): Promise<ExecResponse> {
    if (signal.aborted) throw cancelledError();
    const timeoutMs = (request.timeoutMs || UNSPECIFIED_EXEC_TIMEOUT_MS) + EXEC_MARGIN_MS;
    // The exec contract has no cancel message: on abort we stop waiting, and the command
    // runs on in the container until its own timeout.
    return abortable(this.#bus.request(this.#bus.names.sandboxExec, ExecRequest, request, ExecResponse, { timeoutMs }), signal);
  }
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
