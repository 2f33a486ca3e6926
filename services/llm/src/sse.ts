/**
 * Incremental Server-Sent Events parser: feed it decoded text as it arrives and it returns
 * the `data` of every event completed so far. Comments (`: keep-alive`) and other fields
 * are ignored, as OpenAI-compatible streams only use `data`.
 */
export class SseParser {
  #buffer = "";
  #data: string[] = [];

  /** Adds received text; returns the data of each event it completed, in order. */
  push(text: string): string[] {
    this.#buffer += text;
    const events: string[] = [];
    let newline: number;
    while ((newline = this.#buffer.indexOf("\n")) >= 0) {
      const line = this.#buffer.slice(0, newline).replace(/\r$/, "");
      this.#buffer = this.#buffer.slice(newline + 1);
      if (line === "") {
        if (this.#data.length > 0) events.push(this.#data.join("\n"));
        this.#data = [];
      } else if (line.startsWith("data:")) {
        this.#data.push(line.slice(line.startsWith("data: ") ? 6 : 5));
      }
    }
    return events;
  }

  /**
   * Ends the stream: returns the data of a last event that had complete lines but no blank
   * line after it, and whether the stream stopped in the middle of a line.
   */
  end(): { events: string[]; partialLine: boolean } {
    const events = this.#data.length > 0 ? [this.#data.join("\n")] : [];
    const partialLine = this.#buffer !== "";
    this.#data = [];
    this.#buffer = "";
    return { events, partialLine };
  }
}
