// How streamSse reads a Server-Sent Events body (parsed by eventsource-parser): the bytes are handed
// to it in exactly the chunks given here, through a stubbed fetch, so that every chunk boundary is
// tested, including those inside a UTF-8 character and between the CR and LF of a line end.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { TackError } from "@tack/bus";
import { afterEach, describe, expect, it, vi } from "vitest";
import { streamSse, type SseConsumer } from "../src/http.js";

const FIXTURES = join(import.meta.dirname, "fixtures");

/** Takes every event's data; `[DONE]` ends the reply, `whole` (or `[DONE]`) makes it whole. */
class Recorder implements SseConsumer {
  readonly events: string[] = [];
  ended = false;
  whole = false;

  accept(data: string): void {
    this.events.push(data);
    if (data === "[DONE]") this.ended = true;
    if (data === "[DONE]" || data === "whole") this.whole = true;
  }
}

/** The body as separate chunks: each string or byte array one chunk, then the end (or `error`). */
function serve(chunks: ReadonlyArray<string | Uint8Array>, error?: Error): { cancelled: () => boolean } {
  const queue = chunks.map((chunk) => (typeof chunk === "string" ? new TextEncoder().encode(chunk) : chunk));
  let cancelled = false;
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      const chunk = queue.shift();
      if (chunk) controller.enqueue(chunk);
      else if (error) controller.error(error);
      else controller.close();
    },
    cancel() {
      cancelled = true;
    },
  }, { highWaterMark: 0 });
  vi.stubGlobal("fetch", vi.fn(async () => new Response(body, { headers: { "content-type": "text/event-stream" } })));
  return { cancelled: () => cancelled };
}

/** Reads the body with streamSse: the events the consumer got, and the error it ended with, if any. */
async function read(chunks: ReadonlyArray<string | Uint8Array>, error?: Error): Promise<{ events: string[]; error?: TackError }> {
  serve(chunks, error);
  const consumer = new Recorder();
  const request = {
    provider: "Fake", url: "http://127.0.0.1:9/v1/chat/completions", headers: {}, body: "{}", idleTimeoutMs: 5_000, baseUrlSetting: "FAKE_BASE_URL",
    httpError: async (response: Response) => { throw new Error(`unexpected HTTP ${response.status}`); },
  };
  try {
    await streamSse(request, consumer, new AbortController().signal);
    return { events: consumer.events };
  } catch (error) {
    return { events: consumer.events, error: error as TackError };
  }
}

const bytesOf = (text: string) => Array.from(new TextEncoder().encode(text), (byte) => Uint8Array.of(byte));
const piecesOf = (text: string, size: number) => {
  const bytes = new TextEncoder().encode(text);
  return Array.from({ length: Math.ceil(bytes.length / size) }, (_, i) => bytes.subarray(i * size, (i + 1) * size));
};

afterEach(() => {
  vi.unstubAllGlobals();
});

describe("sse", () => {
  it("sse - yields the same events however the bytes are split, with LF, CRLF or CR line ends", async () => {
    for (const file of ["deepseek/reasoning.sse", "anthropic/tool-use.sse"]) {
      const text = readFileSync(join(FIXTURES, file), "utf8");
      const whole = await read([text]);
      // One event per frame with a data line (not the keep-alive comment), each the JSON (or [DONE]) on that line.
      expect(whole.events).toHaveLength(text.split("\n\n").filter((frame) => /^data:/m.test(frame)).length);
      for (const data of whole.events) if (data !== "[DONE]") expect(() => JSON.parse(data), data).not.toThrow();
      expect(whole.events.join("")).toContain(file.startsWith("deepseek") ? "[DONE]" : "message_stop");
      // Splits inside the UTF-8 characters of the reasoning fixture, too.
      expect(await read(bytesOf(text)), `${file} byte by byte`).toEqual(whole);
      expect(await read(piecesOf(text, 53)), `${file} in 53-byte pieces`).toEqual(whole);
      expect(await read(bytesOf(text.replaceAll("\n", "\r\n"))), `${file} with CRLF`).toEqual(whole);
      expect(await read(bytesOf(text.replaceAll("\n", "\r"))), `${file} with CR`).toEqual(whole);
    }
    expect((await read(bytesOf("data: é✓😀\n\ndata: [DONE]\n\n"))).events).toEqual(["é✓😀", "[DONE]"]);
  });

  it("sse - skips comments and events without data, joins multi-line data and keeps empty data", async () => {
    const { events, error } = await read([": keep-alive\r\n\r\ndata: a\r\ndata:b\r\n\r\nevent: x\n\nid: 7\nretry: 10\nunknown: y\n\ndata:\n\ndata:  two spaces\n\ndata: [DONE]\n\n"]);
    expect(error).toBeUndefined();
    expect(events).toEqual(["a\nb", "", " two spaces", "[DONE]"]);
  });

  it("sse - stops reading at the terminal event and releases the body", async () => {
    const served = serve(["data: 1\n\ndata: [DONE]\n\ndata: after\n\n", "data: later\n\n"]);
    const consumer = new Recorder();
    await streamSse({
      provider: "Fake", url: "http://127.0.0.1:9/", headers: {}, body: "{}", idleTimeoutMs: 5_000, baseUrlSetting: "FAKE_BASE_URL",
      httpError: async () => { throw new Error("unexpected"); },
    }, consumer, new AbortController().signal);
    expect(consumer.events).toEqual(["1", "[DONE]"]);
    expect(served.cancelled()).toBe(true);
  });

  it("sse - a last event without a blank line after it counts; the reply must still be whole", async () => {
    expect(await read(["data: 1\n\n", "data: [DONE]\n"])).toEqual({ events: ["1", "[DONE]"] });
    expect(await read(["data: 1\r\ndata: 2\r\n"])).toMatchObject({ events: ["1\n2"], error: { code: "llm.stream_cut" } });
    expect(await read(["data: whole\r\n"])).toEqual({ events: ["whole"] });
    // A lone CR ends a line too, also as the body's last byte.
    expect(await read(["data: whole\r"])).toEqual({ events: ["whole"] });
    const cut = await read(["data: 1\n"]);
    expect(cut.events).toEqual(["1"]);
    expect(cut.error).toMatchObject({ code: "llm.stream_cut", retryable: true, message: "the Fake stream ended before the reply was complete; retry" });
  });

  it("sse - a body that stops inside a line is a retryable stream cut, whatever came before", async () => {
    const partial = await read(["data: 1\n\n", "data: {\"choi"]);
    expect(partial.events).toEqual(["1"]);
    expect(partial.error).toMatchObject({ code: "llm.stream_cut", retryable: true });
    // Even a reply that was whole: the half line was something more, and it is lost.
    expect(await read(["data: whole\n\nevent: message_delta\ndata: {\"type\""])).toMatchObject({ events: ["whole"], error: { code: "llm.stream_cut" } });
    // A terminal event without its line end is not taken.
    expect(await read(["data: [DONE]"])).toMatchObject({ events: [], error: { code: "llm.stream_cut" } });
    // A body cut inside a UTF-8 character.
    expect(await read(["data: whole\n\n", Uint8Array.of(0xf0, 0x9f)])).toMatchObject({ events: ["whole"], error: { code: "llm.stream_cut" } });
  });

  it("sse - a body that fails mid-stream is a retryable stream cut with the cause", async () => {
    const reset = new Error("socket hang up");
    const failed = await read(["data: 1\n\ndata: {\"ch"], reset);
    expect(failed.events).toEqual(["1"]);
    expect(failed.error).toMatchObject({ code: "llm.stream_cut", retryable: true, cause: reset });
  });
});
