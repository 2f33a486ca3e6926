import { describe, expect, it } from "vitest";
import { Event } from "@tack/proto";
import { TackError } from "@tack/bus";
import { sseMessages, TackApiError } from "@tack/client";
import { cliError, protoEvent } from "../src/api.js";
import { eventLine, TranscriptRenderer } from "../src/transcript.js";

let seq = 0;
// Events are written in their JSON form, as the gateway sends them.
const event = (type: string, payload: Record<string, unknown>): Event => Event.fromJSON({ seq: ++seq, type, source: "loop", ...payload });

const listing = Array.from({ length: 25 }, (_, i) => `file-${i + 1}.txt`).join("\n");
seq = 0;
const run: Event[] = [
  event("session/created", { sessionCreated: { sessionId: "s1", model: "scripted:/x/hello.json", workspace: "/w", mode: "standard", formatVersion: 1 } }),
  event("sandbox/mode", { sandboxMode: { mode: "workspace-write" } }),
  event("user/message", { userMessage: { text: "list the files" } }),
  event("turn/start", { turnStart: { turn: 1, userMessageSeq: 3 } }),
  event("step/start", { stepStart: { turn: 1, step: 1 } }),
  event("assistant/message", { assistantMessage: {
    turn: 1, step: 1, content: "I'll list the files.", reasoningContent: "A listing answers this.",
    toolCalls: [{ id: "c1", name: "bash", arguments: '{"command": "ls"}' }], finishReason: "tool_calls",
  } }),
  event("tool/call", { toolCall: { callId: "c1", name: "bash", arguments: '{"command": "ls"}', turn: 1, step: 1 } }),
  event("tool/result", { toolResult: { callId: "c1", name: "bash", content: `${listing}\n`, isError: false, durationMs: 12 } }),
  event("step/end", { stepEnd: { turn: 1, step: 1, toolCalls: 1 } }),
  event("usage/report", { usage: { turn: 1, step: 2, model: "scripted", usage: { inputMissTokens: 10, inputHitTokens: 90, outputTokens: 5, reasoningTokens: 0 } } }),
  event("assistant/message", { assistantMessage: { turn: 1, step: 2, content: "There are 25 files.", finishReason: "stop" } }),
  event("turn/end", { turnEnd: { turn: 1, reason: "completed", steps: 2 } }),
];

const renderAll = (events: Event[], color = false) => {
  const renderer = new TranscriptRenderer({ color });
  return events.map((e) => renderer.render(e)).join("") + renderer.finish();
};

describe("transcript", () => {
  it("transcript - renders a turn: user, reasoning, text, tool call, result cut at 20 lines, turn end", () => {
    expect(renderAll(run)).toBe([
      "› list the files",
      "A listing answers this.",
      "I'll list the files.",
      '▶ bash {"command":"ls"}',
      ...Array.from({ length: 20 }, (_, i) => `    file-${i + 1}.txt`),
      "    … 5 more lines",
      "There are 25 files.",
      "— turn 1 completed after 2 steps",
      "",
    ].join("\n"));
  });

  it("transcript - streams chunks as they come and does not repeat the complete message", () => {
    seq = 0;
    const events = [
      event("assistant/chunks", { assistantChunks: { turn: 1, step: 1, deltas: [
        { kind: "KIND_REASONING", text: "Think" }, { kind: "KIND_REASONING", text: "ing." },
        { kind: "KIND_TEXT", text: "Hel" },
      ] } }),
      event("assistant/chunks", { assistantChunks: { turn: 1, step: 1, deltas: [
        { kind: "KIND_TEXT", text: "lo." }, { kind: "KIND_TOOL_CALL", text: '{"command"', toolIndex: 0, toolName: "bash" },
      ] } }),
      event("assistant/message", { assistantMessage: { turn: 1, step: 1, content: "Hello.", reasoningContent: "Thinking." } }),
      event("turn/end", { turnEnd: { turn: 1, reason: "completed", steps: 1 } }),
    ];
    expect(renderAll(events)).toBe("Thinking.\nHello.\n— turn 1 completed after 1 step\n");
  });

  it("transcript - labels results of parallel calls, marks errors red and synthesized results", () => {
    seq = 0;
    const events = [
      event("tool/call", { toolCall: { callId: "a", name: "grep", arguments: '{"pattern":"x"}' } }),
      event("tool/call", { toolCall: { callId: "b", name: "bash", arguments: "not json" } }),
      event("tool/result", { toolResult: { callId: "a", name: "grep", content: "" } }),
      event("tool/result", { toolResult: { callId: "b", name: "bash", content: "boom", isError: true, synthesized: true } }),
      event("error/raised", { error: { code: "llm.rate_limited", message: "slow down", retryable: true } }),
      event("turn/end", { turnEnd: { turn: 1, reason: "error", steps: 1 } }),
    ];
    expect(renderAll(events)).toBe([
      '▶ grep {"pattern":"x"}',
      "▶ bash not json",
      "◀ grep a",
      "    (no output)",
      "◀ bash b",
      "    boom",
      "    (written by crash recovery, not by the tool)",
      "✗ llm.rate_limited: slow down (retryable)",
      "— turn 1 error after 1 step",
      "",
    ].join("\n"));
    const colored = renderAll(events, true);
    expect(colored).toContain("    \x1b[31mboom\x1b[39m");
    expect(colored).toContain("\x1b[31m✗ llm.rate_limited");
  });

  it("events - one line per event: seq, type and summary", () => {
    const lines = run.map(eventLine);
    expect(lines[0]).toBe("   1  session/created    s1 model=scripted:/x/hello.json workspace=/w mode=standard");
    expect(lines[2]).toBe("   3  user/message       list the files");
    expect(lines[5]).toBe("   6  assistant/message  I'll list the files. [bash]");
    expect(lines[6]).toBe('   7  tool/call          bash {"command":"ls"}');
    expect(lines[7]).toMatch(/^ {3}8 {2}tool\/result {8}bash ok: file-1\.txt file-2\.txt .*…$/);
    expect(lines[9]).toBe("  10  usage/report       scripted in 100 (cache hit 90) out 5");
    expect(lines[11]).toBe("  12  turn/end           turn 1 completed after 2 steps");
  });
});

describe("gateway stream", () => {
  it("sse - the CLI's stream parser (@tack/client's eventsource-parser) takes messages split across chunks, CRLF line ends and comments", async () => {
    const text = ": keepalive\r\n\r\nid: 1\r\nevent: user/message\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\nid: 2\nevent: turn/end\ndata: {}\n\ndata: unterminated";
    const bytes = new TextEncoder().encode(text);
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        for (let i = 0; i < bytes.length; i += 7) controller.enqueue(bytes.slice(i, i + 7));
        controller.close();
      },
    });
    const messages = [];
    for await (const message of sseMessages(body)) messages.push({ id: message.id, event: message.event, data: message.data });
    expect(messages).toEqual([
      { id: "1", event: "user/message", data: '{"a":\n1}' },
      { id: "2", event: "turn/end", data: "{}" },
    ]);
  });

  it("sse - decodes Event.toJSON data and a payload nested under `payload`; an event without a type is refused", () => {
    const flat = Event.toJSON(run[7]!) as Record<string, unknown>;
    expect(protoEvent(flat)).toEqual(run[7]);
    const nested = protoEvent({ seq: 3, type: "tool/result", payload: { toolResult: { callId: "c", name: "bash", content: "x", isError: true } } });
    expect(nested.payload).toEqual({ $case: "toolResult", value: { callId: "c", name: "bash", content: "x", isError: true, durationMs: 0, synthesized: false, spillObject: "", fullBytes: 0, images: [] } });
    expect(() => protoEvent({ seq: 4 })).toThrow(expect.objectContaining({ code: "cli.bad_event" }));
  });

  it("sse - the client's failures become the CLI's codes; the gateway's codes stay", () => {
    const unreachable = cliError(new TackApiError(0, "client.unreachable", "cannot reach the gateway at http://127.0.0.1:9 (ECONNREFUSED); is Tack running? Start it with `make up`"));
    expect(unreachable).toBeInstanceOf(TackError);
    expect(unreachable).toMatchObject({ code: "cli.gateway_unreachable", retryable: true, message: "cannot reach the gateway at http://127.0.0.1:9 (ECONNREFUSED); is Tack running? Start it with `make up` (or `tack up`)" });
    expect(cliError(new TackApiError(502, "log.unavailable", "NATS is down"))).toMatchObject({ code: "log.unavailable", message: "NATS is down", details: { status: "502" } });
    expect(cliError(new TackApiError(0, "client.bad_event", "not JSON"))).toMatchObject({ code: "cli.bad_event" });
    expect(cliError(new TackApiError(0, "client.event_gap", "jumped from seq 3 to 5"))).toMatchObject({ code: "cli.stream_dropped" });
    expect(cliError(new TackApiError(200, "client.bad_response", "not JSON"))).toMatchObject({ code: "cli.gateway_error" });
    const other = new Error("x");
    expect(cliError(other)).toBe(other);
  });
});
