import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { SseParser } from "../src/sse.js";

function parseAll(pieces: string[]): { events: string[]; partialLine: boolean } {
  const parser = new SseParser();
  const events = pieces.flatMap((piece) => parser.push(piece));
  const end = parser.end();
  return { events: [...events, ...end.events], partialLine: end.partialLine };
}

describe("sse", () => {
  it("sse - yields the same events however the text is split", () => {
    const text = readFileSync(join(import.meta.dirname, "fixtures", "deepseek", "tool-calls.sse"), "utf8");
    const whole = parseAll([text]);
    expect(whole.events.at(-1)).toBe("[DONE]");
    expect(whole.events).toHaveLength(text.split("\n\n").length - 1);
    expect(parseAll(Array.from(text))).toEqual(whole);
  });

  it("sse - skips comments, accepts CRLF and joins multi-line data", () => {
    expect(parseAll([": keep-alive\r\n\r\ndata: a\r\ndata:b\r\n\r\nevent: x\n\n"]).events).toEqual(["a\nb"]);
  });

  it("sse - reports a stream that stops inside a line", () => {
    expect(parseAll(["data: 1\n\ndata: {\"choi"])).toEqual({ events: ["1"], partialLine: true });
    expect(parseAll(["data: 1\n"])).toEqual({ events: ["1"], partialLine: false });
  });
});
