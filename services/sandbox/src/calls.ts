// What a container's owner remembers of the keyed execs it ran, so a retried tool call never runs a command twice.
import { TackError } from "@tack/bus";
import type { ExecRequest, ExecResponse } from "@tack/proto";

/** Keyed execs kept per container at most; the oldest finished ones are forgotten first. */
const MAX_REMEMBERED = 64;
/** A finished exec's result is kept this long for a retry to pick up. */
const KEEP_MS = 15 * 60_000;

interface Remembered {
  readonly result: Promise<ExecResponse>;
  finishedAt: number | undefined;
}

/**
 * The execs of one container that carried an `exec_key`, as seen by the process that serves
 * the container since `since`. A repeat of a key waits for, or returns, the first run's result
 * (`replayed`). A key it has not seen, on a retry of a call first sent before `since`, may have
 * run under a process that is gone: that is `sandbox.call_fate_unknown`, never a second run.
 */
export class ExecMemory {
  /** Since when this memory saw every keyed exec of its container (0: since the container's start). */
  readonly since: number;
  readonly #calls = new Map<string, Remembered>();

  constructor(since: number) {
    this.since = since;
  }

  /** Runs `request` through `run` unless its key was seen; see the class comment. */
  async run(request: ExecRequest, run: () => Promise<ExecResponse>): Promise<ExecResponse> {
    const key = request.execKey;
    if (!key) return run();
    const seen = this.#calls.get(key);
    if (seen) return { ...(await seen.result), replayed: true };
    if (request.attempt > 1 && Number(request.firstAttemptAtMs) < this.since) {
      throw new TackError(
        "sandbox.call_fate_unknown",
        `exec ${key} is a retry of a tool call first sent before this sandbox process took the container over (${new Date(this.since).toISOString()}); whether it ran cannot be known, so it is not run again`,
        { details: { exec_key: key } },
      );
    }
    const entry: Remembered = { result: run(), finishedAt: undefined };
    this.#calls.set(key, entry);
    this.#trim();
    try {
      return await entry.result;
    } catch (error) {
      // A failure to run (not a command's non-zero exit) leaves nothing done: a retry may run it.
      this.#calls.delete(key);
      throw error;
    } finally {
      entry.finishedAt = Date.now();
    }
  }

  /** Execs remembered right now (tests and debugging). */
  get size(): number {
    return this.#calls.size;
  }

  #trim(): void {
    const now = Date.now();
    for (const [key, entry] of this.#calls) {
      if (entry.finishedAt !== undefined && now - entry.finishedAt > KEEP_MS) this.#calls.delete(key);
    }
    if (this.#calls.size <= MAX_REMEMBERED) return;
    for (const [key, entry] of this.#calls) {
      if (this.#calls.size <= MAX_REMEMBERED) break;
      if (entry.finishedAt !== undefined) this.#calls.delete(key);
    }
  }
}
