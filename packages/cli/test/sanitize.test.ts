import { describe, expect, it } from "vitest";
import { TackError } from "@tack/bus";
import { Event } from "@tack/proto";
import { terminalSafe, terminalSafeDeep, terminalSafeError, terminalSafeJson } from "../src/sanitize.js";
import { eventLine, TranscriptRenderer } from "../src/transcript.js";

// Anything a terminal could act on: C0 controls but \t and \n, DEL, C1 controls, bidi controls.
// eslint-disable-next-line no-control-regex -- the test looks for control characters
const RAW_CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/;

let seq = 0;
const event = (type: string, payload: Record<string, unknown>): Event => Event.fromJSON({ seq: ++seq, type, source: "loop", ...payload });

describe("sanitize", () => {
  it("sanitize - an OSC 52 clipboard write is shown, not performed", () => {
    const out = terminalSafe("before\u001b]52;c;cm0gLXJmIH4=\u0007after");
    expect(out).toBe("before␛]52;c;cm0gLXJmIH4=␇after");
    expect(out).not.toMatch(RAW_CONTROL);
  });

  it("sanitize - a window title set (OSC 0, ended by BEL or ST) is shown", () => {
    expect(terminalSafe("\u001b]0;pwned\u0007")).toBe("␛]0;pwned␇");
    expect(terminalSafe("\u001b]2;pwned\u001b\\")).toBe("␛]2;pwned␛\\");
  });

  it("sanitize - cursor movement, erasing and a lone carriage return cannot overwrite earlier output", () => {
    expect(terminalSafe("ok\u001b[2A\u001b[2Kfake line")).toBe("ok␛[2A␛[2Kfake line");
    expect(terminalSafe("safe\rmalicious")).toBe("safe␍malicious");
    expect(terminalSafe("back\bspace\u007f")).toBe("back␈space␡");
  });

  it("sanitize - the one-byte C1 introducers (CSI 0x9b, OSC 0x9d, DCS 0x90, PM 0x9e, APC 0x9f) are shown as code points", () => {
    expect(terminalSafe("\u009b31mred")).toBe("<U+009B>31mred");
    expect(terminalSafe("\u009d0;title\u009c")).toBe("<U+009D>0;title<U+009C>");
    expect(terminalSafe("\u0090q\u009c \u009ex\u009c \u009fy\u009c")).toBe("<U+0090>q<U+009C> <U+009E>x<U+009C> <U+009F>y<U+009C>");
    // ESC-introduced DCS, PM and APC as well.
    expect(terminalSafe("\u001bPq\u001b\\\u001b^x\u001b\\\u001b_y\u001b\\")).not.toMatch(RAW_CONTROL);
  });

  it("sanitize - bidi overrides and isolates are shown, so text reads in the order it is stored", () => {
    expect(terminalSafe("access = \u202eadmin\u202c")).toBe("access = <U+202E>admin<U+202C>");
    expect(terminalSafe("\u2066a\u2067b\u2068c\u2069 \u202a\u202b\u202d")).toBe("<U+2066>a<U+2067>b<U+2068>c<U+2069> <U+202A><U+202B><U+202D>");
  });

  it("sanitize - newlines, tabs and ordinary Unicode stay as they are; CRLF becomes LF", () => {
    expect(terminalSafe("a\tb\nc é 漢字 🙂")).toBe("a\tb\nc é 漢字 🙂");
    expect(terminalSafe("one\r\ntwo\r\n")).toBe("one\ntwo\n");
  });

  it("sanitize - JSON output stays exact (parses back to the same value) and carries no raw control", () => {
    const value = { text: "\u001b]52;c;x\u0007 \u009b2J \u202eevil \u2066 \u007f \r\n\t é", nested: [{ k: "\u0085" }] };
    const json = terminalSafeJson(value);
    expect(json).not.toMatch(RAW_CONTROL);
    expect(JSON.parse(json)).toEqual(value);
    expect(json).toContain("\\u009b");
    expect(json).toContain("\\u202e");
    // Plain JSON.stringify leaves C1 and bidi controls raw: that is why this exists.
    expect(JSON.stringify(value)).toMatch(RAW_CONTROL);
  });

  it("sanitize - strings deep inside an object are made safe; other values are kept", () => {
    const date = new Date(0);
    expect(terminalSafeDeep({ a: ["\u001b[1m", 3, null], b: { c: "\u009b" }, date })).toEqual({ a: ["␛[1m", 3, null], b: { c: "<U+009B>" }, date });
    expect(terminalSafeDeep({ date }).date).toBe(date);
  });

  it("sanitize - an error message from the gateway is made safe, keeping code and details", () => {
    const safe = terminalSafeError(new TackError("loop.boom", "bad \u001b]0;x\u0007", { details: { a: "b" } })) as TackError;
    expect(safe).toMatchObject({ code: "loop.boom", message: "bad ␛]0;x␇", details: { a: "b" } });
    const clean = new TackError("x.y", "fine");
    expect(terminalSafeError(clean)).toBe(clean);
  });

  it("sanitize - the transcript shows escapes in tool output and model text, and only its own styling is raw", () => {
    seq = 0;
    const events = [
      event("assistant/chunks", { assistantChunks: { turn: 1, step: 1, deltas: [
        // A sequence split across chunks is caught too.
        { kind: "KIND_TEXT", text: "Hi \u001b" }, { kind: "KIND_TEXT", text: "]0;owned\u0007 \u009b2J" },
      ] } }),
      event("assistant/message", { assistantMessage: { turn: 1, step: 1, content: "Hi \u001b]0;owned\u0007 \u009b2J", toolCalls: [
        { id: "c1", name: "bash", arguments: '{"command": "printf \'\\u001b]52;c;eA==\\u0007\\u009b\\u202e\'"}' },
      ] } }),
      event("tool/call", { toolCall: { callId: "c1", name: "bash\u001b[31m", arguments: '{"command": "printf \'\\u001b]52;c;eA==\\u0007\\u009b\\u202e\'"}' } }),
      event("tool/result", { toolResult: { callId: "c1", name: "bash", content: "out\u001b]52;c;eA==\u0007\r\nline2 \u202eevil\u202c\rover", isError: false } }),
      event("error", { error: { code: "llm.x", message: "bad \u001b[2K" } }),
      event("turn/end", { turnEnd: { turn: 1, reason: "completed", steps: 1 } }),
    ];
    const plain = new TranscriptRenderer({ color: false });
    const text = events.map((e) => plain.render(e)).join("") + plain.finish();
    expect(text).not.toMatch(RAW_CONTROL);
    expect(text).toContain("Hi ␛]0;owned␇ <U+009B>2J");
    expect(text).toContain("    out␛]52;c;eA==␇\n    line2 <U+202E>evil<U+202C>␍over");
    expect(text).toContain("▶ bash␛[31m {\"command\":\"printf '\\u001b]52;c;eA==\\u0007\\u009b\\u202e'\"}");
    expect(text).toContain("✗ llm.x: bad ␛[2K");
    // With color, the only escape sequences are SGR styling the renderer added itself.
    const colored = new TranscriptRenderer({ color: true });
    const styled = events.map((e) => colored.render(e)).join("") + colored.finish();
    // eslint-disable-next-line no-control-regex -- the test looks for control characters
    expect(styled.replace(/\u001b\[\d+(;\d+)*m/g, "")).not.toMatch(RAW_CONTROL);
    expect(styled).not.toContain("\u001b]");
    expect(styled).not.toContain("\u009b");
  });

  it("sanitize - `tack events` lines show controls visibly", () => {
    seq = 0;
    const line = eventLine(event("tool/result", { toolResult: { callId: "c1", name: "bash", content: "\u001b]0;title\u0007 \u009b1A \u2067x", isError: false } }));
    expect(line).not.toMatch(RAW_CONTROL);
    expect(line).toContain("bash ok: ␛]0;title␇ <U+009B>1A <U+2067>x");
    const call = eventLine(event("tool/call", { toolCall: { callId: "c1", name: "bash", arguments: '{"command":"\\u009b2J"}' } }));
    expect(call).toBe(`${String(2).padStart(4)}  tool/call          bash {"command":"\\u009b2J"}`);
  });
});
