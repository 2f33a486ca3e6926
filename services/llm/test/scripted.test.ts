import { mkdtemp, rm, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { TackError } from "@tack/bus";
import { CompleteRequest, Delta_Kind, Role, type ChatMessage, type Delta } from "@tack/proto";
import { describe, expect, it } from "vitest";
import type { Completion } from "../src/provider.js";
import { scriptedProvider } from "../src/scripted.js";

const FIXTURES = join(import.meta.dirname, "fixtures");
const SCRIPT = join(FIXTURES, "scripts", "two-steps.json");

const user = (content: string): ChatMessage => ({ role: Role.ROLE_USER, content, reasoningContent: "", toolCalls: [], toolCallId: "" });
const assistant = (content: string): ChatMessage => ({ role: Role.ROLE_ASSISTANT, content, reasoningContent: "", toolCalls: [], toolCallId: "" });

function requestWith(model: string, messages: ChatMessage[]): CompleteRequest {
  return { ...CompleteRequest.fromPartial({ sessionId: "s1", systemPrompt: "You are Tack." }), model, messages };
}

async function run(model: string, messages: ChatMessage[], cwd = FIXTURES): Promise<{ deltas: Delta[]; result: Completion; request: CompleteRequest }> {
  const provider = scriptedProvider({ cwd }).create(model.slice("scripted:".length))!;
  const request = requestWith(model, messages);
  const deltas: Delta[] = [];
  const result = await provider.complete(request, (delta) => deltas.push(delta), new AbortController().signal);
  return { deltas, result, request };
}

async function failure(model: string, messages: ChatMessage[] = [user("hi")]): Promise<TackError> {
  const error = await run(model, messages).then(() => undefined, (e: unknown) => e);
  expect(error).toBeInstanceOf(TackError);
  return error as TackError;
}

describe("scripted", () => {
  it("scripted - the first request gets reply 0 with reasoning, text and tool-call deltas", async () => {
    const { deltas, result, request } = await run(`scripted:${SCRIPT}`, [user("What is this project?")]);
    const reasoning = "The user wants to know what the project does; read the README first.";
    expect(result).toEqual({
      content: "Let me look at the README.",
      reasoningContent: reasoning,
      toolCalls: [
        { id: "call_0_0", name: "read_file", arguments: '{"path":"README.md"}' },
        { id: "call_0_1", name: "glob", arguments: '{"pattern":"src/**/*.ts"}' },
      ],
      finishReason: "tool_calls",
      usage: {
        inputMissTokens: Math.ceil(JSON.stringify(CompleteRequest.toJSON(request)).length / 4),
        inputHitTokens: 0,
        outputTokens: Math.ceil((reasoning.length + "Let me look at the README.".length + "read_file".length + 20 + "glob".length + 25) / 4),
        reasoningTokens: Math.ceil(reasoning.length / 4),
      },
      model: `scripted:${SCRIPT}`,
    });
    // Reasoning first, then text, then each tool call; a few pieces each that join back up.
    const kinds = deltas.map((d) => d.kind);
    expect(kinds).toEqual([...kinds].sort((a, b) => order(a) - order(b)));
    expect(deltas.filter((d) => d.kind === Delta_Kind.KIND_REASONING).map((d) => d.text).join("")).toBe(reasoning);
    expect(deltas.filter((d) => d.kind === Delta_Kind.KIND_TEXT).map((d) => d.text).join("")).toBe("Let me look at the README.");
    expect(deltas.filter((d) => d.kind === Delta_Kind.KIND_TEXT).length).toBeGreaterThan(1);
    const tools = deltas.filter((d) => d.kind === Delta_Kind.KIND_TOOL_CALL);
    expect(tools.filter((d) => d.toolCallId).map((d) => [d.toolIndex, d.toolCallId, d.toolName])).toEqual([[0, "call_0_0", "read_file"], [1, "call_0_1", "glob"]]);
    expect(tools.filter((d) => d.toolIndex === 1).map((d) => d.text).join("")).toBe('{"pattern":"src/**/*.ts"}');
  });

  it("scripted - the reply is chosen by the number of assistant messages", async () => {
    const { result, deltas } = await run(`scripted:${SCRIPT}`, [user("What is this project?"), assistant("Let me look."), user("go on")]);
    expect(result.content).toBe("Tack is a coding-agent harness built as microservices over NATS.");
    expect(result.toolCalls).toEqual([]);
    expect(result.finishReason).toBe("stop");
    expect(deltas.every((d) => d.kind === Delta_Kind.KIND_TEXT)).toBe(true);
  });

  it("scripted - relative paths resolve against the service's cwd", async () => {
    const { result } = await run("scripted:scripts/two-steps.json", [user("hi")]);
    expect(result.toolCalls[0]?.id).toBe("call_0_0");
  });

  it("scripted - past the end of the script is llm.script_exhausted", async () => {
    const error = await failure(`scripted:${SCRIPT}`, [user("a"), assistant("b"), user("c"), assistant("d"), user("e")]);
    expect(error.code).toBe("llm.script_exhausted");
    expect(error.message).toContain(SCRIPT);
    expect(error.message).toContain("has 2 replies");
  });

  it("scripted - a bad field names the file and the field", async () => {
    const error = await failure("scripted:scripts/bad-arguments.json");
    expect(error.code).toBe("llm.bad_script");
    expect(error.message).toContain(join(FIXTURES, "scripts", "bad-arguments.json"));
    expect(error.message).toContain("replies[0].tool_calls[0].arguments");
  });

  it("scripted - an unknown field is rejected by name", async () => {
    const error = await failure("scripted:scripts/typo.json");
    expect(error.code).toBe("llm.bad_script");
    expect(error.message).toContain("tool_call");
  });

  it("scripted - invalid JSON and a missing file are bad scripts", async () => {
    expect((await failure("scripted:scripts/not-json.json")).message).toContain("not valid JSON");
    const missing = await failure("scripted:scripts/missing.json");
    expect(missing.code).toBe("llm.bad_script");
    expect(missing.message).toContain("ENOENT");
  });

  it("scripted - an edited script is re-read when its mtime changes", async () => {
    const dir = await mkdtemp(join(tmpdir(), "tack-scripted-"));
    try {
      const file = join(dir, "script.json");
      const entry = scriptedProvider({ cwd: dir });
      const ask = async () => (await entry.create("script.json")!.complete(requestWith("scripted:script.json", []), () => undefined, new AbortController().signal)).content;
      await writeFile(file, JSON.stringify({ replies: [{ content: "first" }] }));
      await utimes(file, 1_000, 1_000);
      expect(await ask()).toBe("first");
      await writeFile(file, JSON.stringify({ replies: [{ content: "second" }] }));
      await utimes(file, 2_000, 2_000);
      expect(await ask()).toBe("second");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

function order(kind: Delta_Kind): number {
  return [Delta_Kind.KIND_REASONING, Delta_Kind.KIND_TEXT, Delta_Kind.KIND_TOOL_CALL].indexOf(kind);
}
