import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CompleteRequest, Delta_Kind, Role, type ChatMessage } from "@tack/proto";
import { describe, expect, it } from "vitest";
import { replayProvider } from "../src/replay.js";
import { countTokens } from "../src/tokens.js";
import { runProvider } from "./conversation.js";

const FIXTURES = join(import.meta.dirname, "fixtures");
const RECORDING = "recordings/two-steps.jsonl";

const user = (content: string): ChatMessage => ({ role: Role.ROLE_USER, content, reasoningContent: "", toolCalls: [], toolCallId: "", images: [] });
const assistant = (content: string): ChatMessage => ({ role: Role.ROLE_ASSISTANT, content, reasoningContent: "", toolCalls: [], toolCallId: "", images: [] });
const tool = (content: string, toolCallId: string): ChatMessage => ({ role: Role.ROLE_TOOL, content, reasoningContent: "", toolCalls: [], toolCallId, images: [] });

function replay(file: string, messages: ChatMessage[], dir = FIXTURES): ReturnType<typeof runProvider> {
  const request = CompleteRequest.fromPartial({ sessionId: "s2", model: `replay:${file}`, systemPrompt: "You are Tack.", messages });
  return runProvider(replayProvider({ scriptDirs: [dir] }), file, request);
}

describe("replay", () => {
  it("replay - the first request gets the first recorded assistant message, ids and usage as recorded", async () => {
    const { deltas, result, error } = await replay(RECORDING, [user("What does this project do?")]);
    expect(error).toBeUndefined();
    expect(result).toEqual({
      content: "Let me read the README.",
      reasoningContent: "Read the README first.",
      toolCalls: [{ id: "call_00_Jx4Qm9Rt2Lw7Vb1Kc8Np3Zs", name: "read", arguments: '{"path":"README.md"}' }],
      finishReason: "tool_calls",
      usage: { inputMissTokens: 3021, inputHitTokens: 0, outputTokens: 41, reasoningTokens: 9 },
      model: `replay:${RECORDING}`,
    });
    expect(deltas.filter((d) => d.kind === Delta_Kind.KIND_REASONING).map((d) => d.text).join("")).toBe("Read the README first.");
    expect(deltas.filter((d) => d.kind === Delta_Kind.KIND_TOOL_CALL && d.toolCallId).map((d) => d.toolCallId)).toEqual(["call_00_Jx4Qm9Rt2Lw7Vb1Kc8Np3Zs"]);
  });

  it("replay - the reply is chosen by the number of assistant messages; usage is counted when none was reported", async () => {
    const { result } = await replay(RECORDING, [
      user("What does this project do?"),
      { ...assistant("Let me read the README."), toolCalls: [{ id: "call_00_Jx4Qm9Rt2Lw7Vb1Kc8Np3Zs", name: "read", arguments: '{"path":"README.md"}' }] },
      tool("# Demo\nA tiny web server that greets visitors.", "call_00_Jx4Qm9Rt2Lw7Vb1Kc8Np3Zs"),
    ]);
    expect(result?.content).toBe("It is a tiny web server that greets visitors.");
    expect(result?.finishReason).toBe("stop");
    expect(result?.usage?.outputTokens).toBe(countTokens("It is a tiny web server that greets visitors."));
    expect(result?.usage?.inputMissTokens).toBeGreaterThan(20);
  });

  it("replay - a session that goes further than the recording is llm.script_exhausted", async () => {
    const { error } = await replay(RECORDING, [user("a"), assistant("b"), user("c"), assistant("d"), user("e")]);
    expect(error).toMatchObject({ code: "llm.script_exhausted" });
    expect(error?.message).toContain("has 2 assistant messages");
  });

  it("replay - the gateway's nested payload form is read too", async () => {
    const dir = await mkdtemp(join(tmpdir(), "tack-replay-"));
    try {
      await writeFile(join(dir, "nested.jsonl"), `${JSON.stringify({ seq: 1, type: "assistant/message", payload: { assistantMessage: { turn: 1, step: 1, content: "Hi." } } })}\n`);
      expect((await replay("nested.jsonl", [user("hello")], dir)).result?.content).toBe("Hi.");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("replay - a bad recording names the file and the line", async () => {
    const dir = await mkdtemp(join(tmpdir(), "tack-replay-"));
    try {
      await writeFile(join(dir, "broken.jsonl"), '{"seq":1,"type":"user/message","userMessage":{"text":"hi"}}\n{"seq":2,\n');
      const broken = (await replay("broken.jsonl", [user("hello")], dir)).error;
      expect(broken).toMatchObject({ code: "llm.bad_script" });
      expect(broken?.message).toContain(join(dir, "broken.jsonl"));
      expect(broken?.message).toContain("line 2 is not JSON (at column 10)");
      await writeFile(join(dir, "silent.jsonl"), '{"seq":1,"type":"user/message","userMessage":{"text":"hi"}}\n');
      expect((await replay("silent.jsonl", [user("hello")], dir)).error?.message).toContain("no assistant/message");
      expect((await replay("missing.jsonl", [user("hello")], dir)).error?.message).toContain("ENOENT");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
