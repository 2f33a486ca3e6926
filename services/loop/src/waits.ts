// Tool calls that wait for a person (approvals, questions, plans): one parking place per kind.
import { TackError } from "@tack/bus";

/** How a kind of wait logs its outcome and words the outcomes no person gave. */
export interface WaitKind<T> {
  /** Appends the event that ends the wait with `outcome`; returns its seq. */
  readonly log: (outcome: T) => Promise<number>;
  /** The outcome when no one answered by the deadline. */
  readonly timedOut: (callId: string) => T;
  /** The outcome when the turn was stopped by `by`. */
  readonly cancelled: (callId: string, by: string) => T;
  /** The refusal of an answer for a call that is not waiting. */
  readonly notPending: (callId: string) => TackError;
}

interface Pending<T> {
  readonly asked: Promise<unknown>;
  readonly timer: NodeJS.Timeout;
  readonly resolve: (outcome: T) => void;
  readonly reject: (error: unknown) => void;
}

/**
 * The calls of one kind a session waits on. Each wait ends exactly once: by a person's answer,
 * by its deadline or by a cancel; that outcome is logged before the waiting call learns it.
 */
export class PendingWaits<T> {
  readonly #pending = new Map<string, Pending<T>>();
  readonly #kind: WaitKind<T>;

  constructor(kind: WaitKind<T>) {
    this.#kind = kind;
  }

  /**
   * Parks call `callId` until it is answered. `asked` settles once the event asking is in the
   * log (no outcome is logged before it); at `deadlineMs` (epoch ms) it ends as timed out.
   * Rejects with `loop.wait_abandoned` if `abandon` runs first.
   */
  wait(callId: string, asked: Promise<unknown>, deadlineMs: number): Promise<T> {
    const outcome = new Promise<T>((resolve, reject) => {
      // Node fires a longer timeout at once; the option is bounded well below this.
      const delay = Math.min(Math.max(0, deadlineMs - Date.now()), 2 ** 31 - 1);
      const timer = setTimeout(() => void this.#settle(callId, this.#kind.timedOut(callId)).catch(() => undefined), delay);
      this.#pending.set(callId, { asked, timer, resolve, reject });
    });
    // Abandoned while its caller still waits for the ask to be logged, the rejection is not
    // handled yet; the caller still meets it when it awaits the outcome.
    outcome.catch(() => undefined);
    return outcome;
  }

  /** Call ids waiting now, oldest first. */
  get waiting(): string[] {
    return [...this.#pending.keys()];
  }

  /** Logs a person's answer and wakes the call; throws the kind's `notPending` error when `callId` is not waiting. */
  answer(callId: string, outcome: T): Promise<number> {
    return this.#settle(callId, outcome);
  }

  /** Ends every wait as cancelled by `by` (the turn is stopping), logging each. */
  async cancelAll(by: string): Promise<void> {
    await Promise.all([...this.#pending.keys()].map((callId) => this.#settle(callId, this.#kind.cancelled(callId, by))));
  }

  /** Drops every wait without logging anything: this process no longer owns the session, and its next owner parks them again. */
  abandon(): void {
    for (const [callId, pending] of this.#pending) {
      clearTimeout(pending.timer);
      pending.reject(new TackError("loop.wait_abandoned", `call ${callId} is left waiting for the session's next owner`));
    }
    this.#pending.clear();
  }

  async #settle(callId: string, outcome: T): Promise<number> {
    const pending = this.#pending.get(callId);
    if (!pending) throw this.#kind.notPending(callId);
    // Removed before the first await, so exactly one outcome is logged per wait.
    this.#pending.delete(callId);
    clearTimeout(pending.timer);
    try {
      await pending.asked;
      const seq = await this.#kind.log(outcome);
      pending.resolve(outcome);
      return seq;
    } catch (error) {
      pending.reject(error);
      throw error;
    }
  }
}
