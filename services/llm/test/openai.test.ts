import { Delta_Kind } from "@tack/proto";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { ChatCompletionsOptions } from "../src/chat-completions.js";
import { openaiProvider } from "../src/openai.js";
import { conversation, runProvider } from "./conversation.js";
import { startFixtureServer, type FixtureServer } from "./fixture-server.js";

const KEY = "sk-test-0123456789abcdef";

let server: FixtureServer;
beforeAll(async () => {
  server = await startFixtureServer();
});
afterAll(() => server.close());
beforeEach(() => {
  server.requests.length = 0;
});

function run(model = "gpt-4.1-mini", options: Partial<ChatCompletionsOptions> = {}): ReturnType<typeof runProvider> {
  // The base URL of an OpenAI-compatible server ends in /v1.
  return runProvider(openaiProvider({ apiKey: KEY, baseUrl: `${server.baseUrl}/v1/`, ...options }), model, { ...conversation, model: `openai:${model}` });
}

describe("openai", () => {
  it("openai - sends a chat-completions body without DeepSeek's reasoning field and with max_completion_tokens", async () => {
    server.respondWith({ file: "openai/text.sse" });
    await run();
    const [received] = server.requests;
    expect(received!.url).toBe("/v1/chat/completions");
    expect(received!.headers.authorization).toBe(`Bearer ${KEY}`);
    expect(received!.body).toEqual({
      model: "gpt-4.1-mini",
      messages: [
        { role: "system", content: "You are Tack." },
        { role: "user", content: "What is in README.md?" },
        { role: "assistant", content: "", tool_calls: [{ id: "call_00_abc", type: "function", function: { name: "read_file", arguments: '{"path":"README.md"}' } }] },
        { role: "tool", tool_call_id: "call_00_abc", content: "# Tack" },
        { role: "assistant", content: "It is a harness." },
        { role: "user", content: "Add two and three." },
      ],
      tools: [{
        type: "function",
        function: { name: "read_file", description: "Read a file.", parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] } },
      }],
      temperature: 0.2,
      max_completion_tokens: 4096,
      stream: true,
      stream_options: { include_usage: true },
    });
  });

  it("openai - streams text and reads cached prompt tokens as cache hits", async () => {
    server.respondWith({ file: "openai/text.sse" });
    const { deltas, result, error } = await run();
    expect(error).toBeUndefined();
    expect(deltas.map((d) => [d.kind, d.text])).toEqual([[Delta_Kind.KIND_TEXT, "2 + 3"], [Delta_Kind.KIND_TEXT, " = **5**"], [Delta_Kind.KIND_TEXT, "."]]);
    expect(result).toEqual({
      content: "2 + 3 = **5**.",
      reasoningContent: "",
      toolCalls: [],
      finishReason: "stop",
      usage: { inputMissTokens: 290, inputHitTokens: 1920, outputTokens: 9, reasoningTokens: 0 },
      model: "gpt-4.1-mini-2025-04-14",
    });
  });

  it("openai - assembles parallel tool calls", async () => {
    server.respondWith({ file: "openai/tool-calls.sse" });
    const { deltas, result } = await run();
    expect(result?.toolCalls).toEqual([
      { id: "call_Qm3Xr8Lp2Vd7Tk1Zs9Nc4Hy6", name: "read_file", arguments: '{"path": "README.md"}' },
      { id: "call_Wb5Jn0Gf3Ka8Ue2Rx7Mo1Py4", name: "glob", arguments: '{"pattern": "src/**/*.ts"}' },
    ]);
    expect(result?.finishReason).toBe("tool_calls");
    expect(result?.usage).toEqual({ inputMissTokens: 2210, inputHitTokens: 0, outputTokens: 52, reasoningTokens: 0 });
    expect(deltas.filter((d) => d.toolCallId !== "").map((d) => [d.toolIndex, d.toolName])).toEqual([[0, "read_file"], [1, "glob"]]);
  });

  it("openai - 429 is retryable rate limiting and keeps retry-after", async () => {
    server.respondWith({ file: "openai/rate-limited.json", status: 429, headers: { "retry-after": "1" } });
    const { error } = await run();
    expect(error).toMatchObject({ code: "llm.rate_limited", retryable: true, details: { status: "429", retry_after: "1" } });
    expect(error?.message).toContain("Rate limit reached for gpt-4.1-mini");
  });

  it("openai - 500 is a retryable server error", async () => {
    server.respondWith({ file: "openai/server-error.json", status: 500 });
    const { error } = await run();
    expect(error).toMatchObject({ code: "llm.server_error", retryable: true });
  });

  it("openai - 401 names OPENAI_API_KEY and never echoes a key", async () => {
    server.respondWith({ file: "openai/auth.json", status: 401 });
    const { error } = await run();
    expect(error).toMatchObject({ code: "llm.auth", retryable: false });
    expect(error?.message).toContain("OPENAI_API_KEY");
    expect(error?.message).not.toContain("sk-test-");
  });

  it("openai - 404 model_not_found is an unknown model; another 404 points at the base URL", async () => {
    server.respondWith({ file: "openai/model-not-found.json", status: 404 });
    const { error } = await run("gpt-9-turbo");
    expect(error).toMatchObject({ code: "llm.unknown_model", retryable: false });
    expect(error?.message).toContain('"gpt-9-turbo"');
    server.respondWith({ file: "openai/server-error.json", status: 404 });
    const wrongPath = await run();
    expect(wrongPath.error).toMatchObject({ code: "llm.bad_request" });
    expect(wrongPath.error?.message).toContain("OPENAI_BASE_URL");
  });

  it("openai - a malformed chunk fails after the deltas before it", async () => {
    server.respondWith({ file: "openai/malformed.sse" });
    const { deltas, error } = await run();
    expect(deltas.map((d) => d.text)).toEqual(["Looking"]);
    expect(error).toMatchObject({ code: "llm.malformed_chunk", retryable: true });
  });

  it("openai - a stream cut in the middle is retryable", async () => {
    server.respondWith({ file: "openai/stream-cut.sse", cut: true });
    const { deltas, error } = await run();
    expect(deltas.map((d) => d.text)).toEqual(["The file", " defines"]);
    expect(error).toMatchObject({ code: "llm.stream_cut", retryable: true });
  });

  it("openai - an empty reply is retryable", async () => {
    server.respondWith({ file: "openai/empty.sse" });
    const { error } = await run();
    expect(error).toMatchObject({ code: "llm.empty_reply", retryable: true });
  });

  it("openai - no key fails before any request; any model name without spaces is bound", async () => {
    const { error } = await run("gpt-4.1-mini", { apiKey: undefined });
    expect(error).toMatchObject({ code: "llm.missing_key" });
    expect(error?.message).toContain("OPENAI_API_KEY");
    expect(server.requests).toHaveLength(0);
    const entry = openaiProvider({ baseUrl: server.baseUrl });
    expect(entry.create("meta-llama/Llama-3.1-8B-Instruct")).toBeDefined();
    expect(entry.create("qwen2.5:7b")).toBeDefined();
    expect(entry.create("two words")).toBeUndefined();
  });
});
