// A server-sent events parser (the subset the gateway uses: id, event, data, comments).

/** One dispatched SSE message. */
export interface SseMessage {
  readonly id: string | undefined;
  readonly event: string;
  readonly data: string;
}

/** Parses an SSE byte stream into messages as they complete; a final message without a blank line is dropped, as the spec says. */
export async function* parseSse(body: AsyncIterable<Uint8Array>): AsyncGenerator<SseMessage> {
  const decoder = new TextDecoder();
  let buffer = "";
  let id: string | undefined;
  let event = "";
  let data: string[] = [];
  for await (const bytes of body) {
    buffer += decoder.decode(bytes, { stream: true });
    let newline: RegExpExecArray | null;
    while ((newline = /\r\n|\r|\n/.exec(buffer)) !== null) {
      // A lone \r at the very end may be the first half of \r\n: wait for more bytes.
      if (newline[0] === "\r" && newline.index === buffer.length - 1) break;
      const line = buffer.slice(0, newline.index);
      buffer = buffer.slice(newline.index + newline[0].length);
      if (line === "") {
        if (data.length > 0) yield { id, event: event || "message", data: data.join("\n") };
        event = "";
        data = [];
        continue;
      }
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon === -1 ? line : line.slice(0, colon);
      const value = colon === -1 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "data") data.push(value);
      else if (field === "event") event = value;
      else if (field === "id") id = value;
    }
  }
}
