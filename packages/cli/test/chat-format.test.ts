// tack chat's pure parts: slash commands, approval and question answers, /cost, /context, /details.
import { describe, expect, it } from "vitest";
import { Event } from "@tack/proto";
import { parseCommand } from "../src/args.js";
import { CallBook } from "../src/chat/calls.js";
import { approvalAnswer, approvalCard, contextText, costText, parseSlash, questionAnswer, questionCard } from "../src/chat/format.js";
import { TranscriptRenderer } from "../src/transcript.js";

// eslint-disable-next-line no-control-regex -- the test looks for control characters
const RAW_CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/;

describe("chat", () => {
  it("chat - tack chat's command line: options, --resume alone, and tack alone on a terminal", () => {
    expect(parseCommand(["chat"])).toEqual({ name: "chat", resume: undefined, model: undefined, workspace: undefined, mode: undefined });
    expect(parseCommand(["chat", "--model", "scripted:x.json", "--workspace", "w", "--mode", "minimal"])).toEqual({ name: "chat", resume: undefined, model: "scripted:x.json", workspace: "w", mode: "minimal" });
    expect(parseCommand(["chat", "--resume", "s1"])).toMatchObject({ name: "chat", resume: "s1" });
    expect(parseCommand([], { interactive: true })).toMatchObject({ name: "chat", resume: undefined });
    expect(parseCommand([], { interactive: false })).toMatchObject({ name: "help" });
    const failure = (argv: string[]) => {
      try {
        parseCommand(argv);
      } catch (error) {
        return error as { code: string; message: string; details: { usage: string } };
      }
      throw new Error(`${argv.join(" ")} parsed`);
    };
    expect(failure(["chat", "--resume", "s1", "--model", "scripted:x"]).message).toBe("--resume continues a session as it was created; --model apply to new sessions only");
    expect(failure(["chat", "--resume", ""]).message).toBe("--resume needs the id of a session (tack events and the web UI show them)");
    expect(failure(["chat", "--model", "gpt"]).message).toMatch(/^--model "gpt" is not PROVIDER:MODEL/);
    expect(failure(["chat", "hello"])).toMatchObject({ code: "cli.usage", message: 'tack chat got unexpected arguments: "hello"' });
    expect(failure(["chat", "--mode", "Bad Mode"]).details.usage).toMatch(/^Usage: tack chat /);
    expect(parseCommand(["chat", "--help"])).toMatchObject({ name: "help", text: expect.stringMatching(/^Usage: tack chat/) });
  });

  it("chat - slash commands run locally; other /names are messages (skills)", () => {
    expect(parseSlash("/cost")).toEqual({ name: "cost", args: "" });
    expect(parseSlash("  /mode   read-only ")).toEqual({ name: "mode", args: "read-only" });
    expect(parseSlash("/export out dir/x.json")).toEqual({ name: "export", args: "out dir/x.json" });
    expect(parseSlash("/details 3")).toEqual({ name: "details", args: "3" });
    expect(parseSlash("/pdf-forms fill it")).toBeUndefined();
    expect(parseSlash("/Cost")).toBeUndefined();
    expect(parseSlash("what does /cost do")).toBeUndefined();
  });

  it("chat - approval card and answers", () => {
    const card = approvalCard({ toolName: "bash", operation: "touch x\u001b]0;t\u0007", currentMode: "read-only", requestedMode: "workspace-write", justification: "asked \u202efor", kind: "sandbox" });
    expect(card).toBe("⚠ approval: bash asks to run in workspace-write (the session runs in read-only)\n  operation: touch x␛]0;t␇\n  why: asked <U+202E>for\n");
    expect(approvalCard({ toolName: "mcp__gh__issue", operation: "{}", currentMode: "", requestedMode: "", justification: "", kind: "tool" })).toMatch(/^⚠ approval: mcp__gh__issue asks for a yes before it runs\n {2}operation: \{\}\n {2}why: \(no reason given\)\n$/);
    expect(["y", "Y", "yes", " n ", "no", "maybe", ""].map(approvalAnswer)).toEqual(["allow_once", "allow_once", "allow_once", "reject", "reject", undefined, undefined]);
  });

  it("chat - questions: numbered options, several where allowed, or the person's own words", () => {
    const single = { header: "Lang", question: "Which language?", multiSelect: false, options: [{ label: "TypeScript", description: "typed" }, { label: "Go", description: "" }] };
    expect(questionCard(single, 0, 2)).toBe("? (1/2) Lang: Which language?\n  1. TypeScript — typed\n  2. Go\n  (a number, or type your own answer)\n");
    expect(questionAnswer(single, "2")).toEqual({ selected: ["Go"] });
    expect(questionAnswer(single, "1,2")).toBe("choose one option (this question takes one)");
    expect(questionAnswer(single, "3")).toBe("there is no option 3: choose 1 to 2");
    expect(questionAnswer(single, "Rust, obviously")).toEqual({ other: "Rust, obviously" });
    expect(questionAnswer(single, " ")).toBe("type a number or your own answer");
    const multi = { ...single, multiSelect: true };
    expect(questionAnswer(multi, "2, 1, 2")).toEqual({ selected: ["Go", "TypeScript"] });
    expect(questionCard(multi, 0, 1)).toContain("(one or more numbers, comma-separated, or type your own answer)");
  });

  it("chat - /cost and /context", () => {
    const usage = { cost_usd: 0.0012346, tokens: { input_miss: 1000, input_hit: 3000, output: 250, reasoning: 10 }, turns: [{ turn: 1, cost_usd: 0.001 }, { turn: 2, cost_usd: 0.0002345 }] };
    expect(costText({ usage, model: "scripted:/x.json" }, { tenant: "local", cost_usd: 1.5 })).toBe(
      "cost $0.001235 · scripted:/x.json\ntokens: input 4,000 (cache hit 3,000, 75%) · output 250 (reasoning 10)\nper turn: 1: $0.001000 · 2: $0.000235\ntenant local has spent $1.50 in all\n",
    );
    expect(contextText({ session: "s", tokens: null, note: "no model request yet" })).toBe("context: no model request yet\n");
    const text = contextText({
      session: "s", tokenizer: "deepseek-v3", tokens: { system_prompt: 1000, tools: 2000, conversation: 1000, total: 4000 },
      calibration: null, estimated_total: 4000,
    });
    expect(text.split("\n")).toEqual([
      "context: 4,000 tokens (deepseek-v3)",
      `  [${"S".repeat(10)}${"T".repeat(20)}${"C".repeat(10)}]`,
      "  S system prompt     1,000  25%",
      "  T tools             2,000  50%",
      "  C conversation      1,000  25%",
      "",
    ]);
  });

  it("chat - tool calls are numbered, results cut to a few lines pointing at /details N, which shows everything safely", () => {
    const book = new CallBook();
    const renderer = new TranscriptRenderer({ color: false, resultLines: 2, calls: book });
    const long = ["one", "two", "three\u001b[2J", "four"].join("\n");
    const events = [
      Event.fromJSON({ seq: 1, type: "tool/call", toolCall: { callId: "c1", name: "bash", arguments: "{\"command\":\"ls\"}" } }),
      Event.fromJSON({ seq: 2, type: "tool/result", toolResult: { callId: "c1", name: "bash", content: long, durationMs: 12 } }),
      Event.fromJSON({ seq: 3, type: "tool/call", toolCall: { callId: "c2", name: "read", arguments: "{\"path\":\"a\"}" } }),
    ];
    let out = "";
    for (const event of events) {
      book.record(event);
      out += renderer.render(event);
    }
    expect(out).toBe('▶ [1] bash {"command":"ls"}\n    one\n    two\n    … 2 more lines · /details 1\n▶ [2] read {"path":"a"}\n');
    const details = book.details(1)!;
    expect(details).not.toMatch(RAW_CONTROL);
    expect(details).toBe('[1] bash (c1)\narguments:\n    {\n      "command": "ls"\n    }\nresult after 12 ms:\n    one\n    two\n    three␛[2J\n    four\n');
    expect(book.details(2)).toContain("result: (none yet");
    expect(book.details(3)).toBeUndefined();
    expect(book.size).toBe(2);
  });
});
