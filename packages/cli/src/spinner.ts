// Start-up progress on stderr: an animated line on a terminal, plain lines elsewhere (logs, CI).

const FRAMES = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/** A one-line progress display; `done` or `fail` ends it. */
export class Spinner {
  readonly #stream: NodeJS.WriteStream;
  readonly #tty: boolean;
  #text = "";
  #frame = 0;
  #timer: NodeJS.Timeout | undefined;

  constructor(stream: NodeJS.WriteStream) {
    this.#stream = stream;
    this.#tty = stream.isTTY === true;
  }

  /** Shows `text` as the current step (a new line when not on a terminal). */
  update(text: string): void {
    this.#text = text;
    if (!this.#tty) {
      this.#stream.write(`${text}…\n`);
      return;
    }
    this.#timer ??= setInterval(() => this.#draw(), 80);
    this.#draw();
  }

  /** Ends the spinner with a final line. */
  done(text: string): void {
    this.#end(`✓ ${text}`);
  }

  /** Ends the spinner with a failure line. */
  fail(text: string): void {
    this.#end(`✗ ${text}`);
  }

  #draw(): void {
    this.#frame = (this.#frame + 1) % FRAMES.length;
    this.#stream.write(`\r\x1b[K${FRAMES[this.#frame]} ${this.#text}`);
  }

  #end(line: string): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.#stream.write(this.#tty ? `\r\x1b[K${line}\n` : `${line}\n`);
  }
}
