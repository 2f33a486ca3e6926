import { mkdtemp, rm, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { TackError } from "@tack/bus";
import { CompleteRequest, Delta_Kind, Role, type ChatMessage, type Delta } from "@tack/proto";
import { describe, expect, it } from "vitest";
import type { Completion } from "../src/provider.js";
import { scriptedProvider } from "../src/scripted.js";
import { countRequestTokens, countTokens } from "../src/tokens.js";

const FIXTURES = join(import.meta.dirname, "fixtures");
const SCRIPT = join(FIXTURES, "scripts", "two-steps.json");

const user = (content: string): ChatMessage => ({ role: Role.ROLE_USER, content, reasoningContent: "", toolCalls: [], toolCallId: "", images: [] });
const assistant = (content: string): ChatMessage => ({ role: Role.ROLE_ASSISTANT, content, reasoningContent: "", toolCalls: [], toolCallId: "", images: [] });

function requestWith(model: string, messages: ChatMessage[]): CompleteRequest {
  return { ...CompleteRequest.fromPartial({ sessionId: "s1", systemPrompt: "You are Tack." }), model, messages };
}

async function run(model: string, messages: ChatMessage[], dir = FIXTURES): Promise<{ deltas: Delta[]; result: Completion; request: CompleteRequest }> {
  const provider = scriptedProvider({ scriptDirs: [dir] }).create(model.slice("scripted:".length))!;
  const request = requestWith(model, messages);
  const deltas: Delta[] = [];
  const result = await provider.complete(request, (delta) => deltas.push(delta), new AbortController().signal);
  return { deltas, result, request };
}

async function failure(model: string, messages: ChatMessage[] = [user("hi")], dir = FIXTURES): Promise<TackError> {
  const error = await run(model, messages, dir).then(() => undefined, (e: unknown) => e);
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
      // Counted with the DeepSeek tokenizer; without a `cache` in the script every input token misses.
      usage: {
        inputMissTokens: countRequestTokens(request),
        inputHitTokens: 0,
        outputTokens: countTokens(reasoning) + countTokens("Let me look at the README.") + countTokens("read_file") + countTokens('{"path":"README.md"}')
          + countTokens("glob") + countTokens('{"pattern":"src/**/*.ts"}'),
        reasoningTokens: countTokens(reasoning),
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

  it("scripted - a relative reference resolves inside the script directories", async () => {
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

  it("scripted - an unknown field is rejected with the fields allowed there, not its name", async () => {
    const error = await failure("scripted:scripts/typo.json");
    expect(error.code).toBe("llm.bad_script");
    expect(error.message).toContain("replies[0]: has a field that is not allowed (allowed: content, reasoning, tool_calls, finish_reason)");
  });

  it("scripted - invalid JSON and a missing file are bad scripts", async () => {
    expect((await failure("scripted:scripts/not-json.json")).message).toContain("not valid JSON (at line 1 column 44)");
    const missing = await failure("scripted:scripts/missing.json");
    expect(missing.code).toBe("llm.bad_script");
    expect(missing.message).toContain("ENOENT");
  });

  it("scripted - an edited script is re-read when its mtime changes", async () => {
    const dir = await mkdtemp(join(tmpdir(), "tack-scripted-"));
    try {
      const file = join(dir, "script.json");
      const entry = scriptedProvider({ scriptDirs: [dir] });
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

  it("scripted - with cache, input hits the longest earlier prefix in 64-token blocks", async () => {
    const dir = await mkdtemp(join(tmpdir(), "tack-scripted-"));
    try {
      const file = join(dir, "cached.json");
      await writeFile(file, JSON.stringify({ cache: { block_tokens: 64 }, replies: [{ content: "one ".repeat(40) }, { content: "two" }] }));
      const entry = scriptedProvider({ scriptDirs: [dir] });
      const ask = async (messages: ChatMessage[]) =>
        (await entry.create("cached.json")!.complete(requestWith("scripted:cached.json", messages), () => undefined, new AbortController().signal)).usage!;
      const first = [user("Explain the project in detail, please. ".repeat(20))];
      const total = countRequestTokens(requestWith("scripted:cached.json", first));
      expect(await ask(first)).toMatchObject({ inputHitTokens: 0, inputMissTokens: total });
      // The next step extends the request: every whole block of the first request hits.
      const second = [...first, assistant("one ".repeat(40)), user("and the tests?")];
      const usage = await ask(second);
      expect(usage.inputHitTokens).toBe(Math.floor(total / 64) * 64);
      expect(usage.inputHitTokens + usage.inputMissTokens).toBe(countRequestTokens(requestWith("scripted:cached.json", second)));
      // A fresh provider (a new llm process) starts with an empty cache.
      const fresh = scriptedProvider({ scriptDirs: [dir] }).create("cached.json")!;
      expect((await fresh.complete(requestWith("scripted:cached.json", first), () => undefined, new AbortController().signal)).usage?.inputHitTokens).toBe(0);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("scripted - a bad cache setting is a bad script", async () => {
    const dir = await mkdtemp(join(tmpdir(), "tack-scripted-"));
    try {
      await writeFile(join(dir, "bad-cache.json"), JSON.stringify({ cache: { block_tokens: 0 }, replies: [] }));
      const error = await failure("scripted:bad-cache.json", [user("hi")], dir);
      expect(error.message).toContain("cache.block_tokens");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

function order(kind: Delta_Kind): number {
  return [Delta_Kind.KIND_REASONING, Delta_Kind.KIND_TEXT, Delta_Kind.KIND_TOOL_CALL].indexOf(kind);
}
