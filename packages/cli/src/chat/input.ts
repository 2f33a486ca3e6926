// Line input for `tack chat` on node:readline: one interface for the whole chat, asked for one
// line at a time (the prompt, an approval, a question), with Ctrl-C and end of input reported.
import { createInterface, type Interface } from "node:readline";

/** What the input tells its owner besides lines. */
export interface InputHandlers {
  /** Ctrl-C (on a terminal readline reads it; elsewhere it is SIGINT). */
  onInterrupt(): void;
  /** A line typed while nothing asked for one (e.g. while a turn streams). */
  onStrayLine(line: string): void;
}

/** Lines from a terminal (or a pipe), one request at a time. */
export class LineInput {
  readonly #rl: Interface;
  readonly #output: NodeJS.WritableStream;
  #waiter: ((line: string | undefined) => void) | undefined;
  #closed = false;
  readonly #handlers: InputHandlers;
  readonly #onSigint = () => this.#handlers.onInterrupt();

  constructor(input: NodeJS.ReadableStream & { isTTY?: boolean }, output: NodeJS.WritableStream & { isTTY?: boolean }, handlers: InputHandlers) {
    this.#handlers = handlers;
    this.#output = output;
    const terminal = input.isTTY === true && output.isTTY === true;
    this.#rl = createInterface({ input, output, terminal, historySize: terminal ? 200 : 0 });
    this.#rl.on("line", (line) => {
      const waiter = this.#waiter;
      this.#waiter = undefined;
      if (waiter) waiter(line);
      else handlers.onStrayLine(line);
    });
    this.#rl.on("close", () => {
      this.#closed = true;
      const waiter = this.#waiter;
      this.#waiter = undefined;
      waiter?.(undefined);
    });
    // On a terminal readline turns Ctrl-C into its own SIGINT event; from a pipe the signal comes to the process.
    this.#rl.on("SIGINT", this.#onSigint);
    process.on("SIGINT", this.#onSigint);
  }

  /** True once the input ended (Ctrl-D, or the end of a pipe). */
  get closed(): boolean {
    return this.#closed;
  }

  /** True while a line is asked for. */
  get asking(): boolean {
    return this.#waiter !== undefined;
  }

  /**
   * Shows `prompt` and resolves with the next line, or undefined when the input ended or
   * `signal` aborted (the prompt is then left as it is: the caller says what happened).
   */
  line(prompt: string, signal?: AbortSignal): Promise<string | undefined> {
    if (this.#closed || signal?.aborted) return Promise.resolve(undefined);
    if (this.#waiter) this.#waiter(undefined);
    return new Promise((resolve) => {
      const onAbort = () => {
        if (this.#waiter === finish) this.#waiter = undefined;
        resolve(undefined);
      };
      const finish = (line: string | undefined) => {
        signal?.removeEventListener("abort", onAbort);
        resolve(line);
      };
      this.#waiter = finish;
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#rl.setPrompt(prompt);
      this.#rl.prompt();
    });
  }

  /** Text typed but not yet sent (the prompt's line). */
  get pending(): string {
    return this.#rl.line;
  }

  /** Drops the text typed on the prompt's line and shows the prompt again. */
  clearLine(): void {
    this.#rl.write(null, { ctrl: true, name: "e" });
    this.#rl.write(null, { ctrl: true, name: "u" });
  }

  /** Writes text (already terminal-safe) on its own lines, above the prompt when one is shown. */
  print(text: string): void {
    this.#output.write(text);
  }

  /** Shows the current prompt again (after output printed while it waited). */
  reprompt(): void {
    if (this.#waiter && !this.#closed) this.#rl.prompt(true);
  }

  close(): void {
    process.off("SIGINT", this.#onSigint);
    this.#rl.close();
  }
}
