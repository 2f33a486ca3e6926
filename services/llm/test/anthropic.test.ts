import { ChatMessage, Delta_Kind, Role, type CompleteRequest } from "@tack/proto";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { anthropicProvider, type AnthropicOptions } from "../src/anthropic.js";
import { conversation, runProvider } from "./conversation.js";
import { startFixtureServer, type FixtureServer } from "./fixture-server.js";

const KEY = "sk-ant-test-0123456789abcdef";

let server: FixtureServer;
beforeAll(async () => {
  server = await startFixtureServer();
});
afterAll(() => server.close());
beforeEach(() => {
  server.requests.length = 0;
});

function run(model = "claude-sonnet-4-5", options: Partial<AnthropicOptions> = {}, request: CompleteRequest = conversation): ReturnType<typeof runProvider> {
  return runProvider(anthropicProvider({ apiKey: KEY, baseUrl: server.baseUrl, ...options }), model, { ...request, model: `anthropic:${model}` });
}

const message = (role: Role, content: string, extra: Partial<CompleteRequest["messages"][number]> = {}) =>
  ChatMessage.fromPartial({ role, content, ...extra });

describe("anthropic", () => {
  it("anthropic - sends top-level system, input_schema tools, tool_use and tool_result blocks, and two cache breakpoints", async () => {
    server.respondWith({ file: "anthropic/thinking.sse" });
    await run();
    const [received] = server.requests;
    expect(received!.url).toBe("/v1/messages");
    expect(received!.headers["x-api-key"]).toBe(KEY);
    expect(received!.headers["anthropic-version"]).toBe("2023-06-01");
    expect(received!.headers.authorization).toBeUndefined();
    expect(received!.body).toEqual({
      model: "claude-sonnet-4-5",
      max_tokens: 4096,
      system: [{ type: "text", text: "You are Tack.", cache_control: { type: "ephemeral" } }],
      messages: [
        { role: "user", content: [{ type: "text", text: "What is in README.md?" }] },
        // No thinking block: Anthropic only takes one back with its signature.
        { role: "assistant", content: [{ type: "tool_use", id: "call_00_abc", name: "read_file", input: { path: "README.md" } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "call_00_abc", content: "# Tack" }] },
        { role: "assistant", content: [{ type: "text", text: "It is a harness." }] },
        { role: "user", content: [{ type: "text", text: "Add two and three.", cache_control: { type: "ephemeral" } }] },
      ],
      tools: [{ name: "read_file", description: "Read a file.", input_schema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] } }],
      temperature: 0.2,
      stream: true,
    });
  });

  it("anthropic - merges a step's tool results into one user message and defaults max_tokens", async () => {
    server.respondWith({ file: "anthropic/thinking.sse" });
    await run("claude-sonnet-4-5", {}, {
      ...conversation,
      systemPrompt: "",
      maxTokens: 0,
      messages: [
        message(Role.ROLE_USER, "Look around."),
        message(Role.ROLE_ASSISTANT, "Reading.", { toolCalls: [{ id: "t1", name: "read_file", arguments: '{"path":"a"}' }, { id: "t2", name: "read_file", arguments: "{broken" }] }),
        message(Role.ROLE_TOOL, "A", { toolCallId: "t1" }),
        message(Role.ROLE_TOOL, "B", { toolCallId: "t2" }),
      ],
    });
    const body = server.requests[0]!.body;
    expect(body.max_tokens).toBe(8192);
    expect(body.system).toBeUndefined();
    // Without a system prompt the first breakpoint goes on the last tool.
    expect((body.tools as { cache_control?: unknown }[]).at(-1)?.cache_control).toEqual({ type: "ephemeral" });
    expect(body.messages).toEqual([
      { role: "user", content: [{ type: "text", text: "Look around." }] },
      { role: "assistant", content: [
        { type: "text", text: "Reading." },
        { type: "tool_use", id: "t1", name: "read_file", input: { path: "a" } },
        { type: "tool_use", id: "t2", name: "read_file", input: {} },
      ] },
      { role: "user", content: [
        { type: "tool_result", tool_use_id: "t1", content: "A" },
        { type: "tool_result", tool_use_id: "t2", content: "B", cache_control: { type: "ephemeral" } },
      ] },
    ]);
  });

  it("anthropic - streams thinking as reasoning, then text, and reads cache usage", async () => {
    server.respondWith({ file: "anthropic/thinking.sse" });
    const { deltas, result, error } = await run();
    expect(error).toBeUndefined();
    expect(deltas.map((d) => [d.kind, d.text])).toEqual([
      [Delta_Kind.KIND_REASONING, "The user wants the sum"],
      [Delta_Kind.KIND_REASONING, " of 2 and 3 — that is 5."],
      [Delta_Kind.KIND_TEXT, "2 + 3"],
      [Delta_Kind.KIND_TEXT, " = **5**."],
    ]);
    expect(result).toEqual({
      content: "2 + 3 = **5**.",
      reasoningContent: "The user wants the sum of 2 and 3 — that is 5.",
      toolCalls: [],
      finishReason: "stop",
      // Cache writes count as misses: 12 uncached + 40 written; 2048 read.
      usage: { inputMissTokens: 52, inputHitTokens: 2048, outputTokens: 64, reasoningTokens: 0 },
      model: "claude-sonnet-4-5-20250929",
    });
  });

  it("anthropic - assembles tool_use blocks into tool calls numbered from 0", async () => {
    server.respondWith({ file: "anthropic/tool-use.sse" });
    const { deltas, result } = await run();
    expect(result).toMatchObject({
      content: "I'll read both files.",
      toolCalls: [
        { id: "toolu_01A09q90qw90lq917835lq9", name: "read_file", arguments: '{"path": "src/main.ts"}' },
        { id: "toolu_01B7zKp3Lm8Qw2Xc5Vn9Rt4Y", name: "git_status", arguments: "{}" },
      ],
      finishReason: "tool_calls",
      usage: { inputMissTokens: 293, inputHitTokens: 1920, outputTokens: 88, reasoningTokens: 0 },
    });
    const tools = deltas.filter((d) => d.kind === Delta_Kind.KIND_TOOL_CALL);
    expect(tools.filter((d) => d.toolCallId).map((d) => [d.toolIndex, d.toolName])).toEqual([[0, "read_file"], [1, "git_status"]]);
    for (const index of [0, 1]) expect(tools.filter((d) => d.toolIndex === index).map((d) => d.text).join("")).toBe(result!.toolCalls[index]!.arguments);
  });

  it("anthropic - 429 is retryable rate limiting and keeps retry-after", async () => {
    server.respondWith({ file: "anthropic/rate-limited.json", status: 429, headers: { "retry-after": "12" } });
    const { error } = await run();
    expect(error).toMatchObject({ code: "llm.rate_limited", retryable: true, details: { status: "429", retry_after: "12" } });
    expect(error?.message).toContain("would exceed the rate limit");
  });

  it("anthropic - 500 and 529 overloaded are retryable server errors", async () => {
    server.respondWith({ file: "anthropic/server-error.json", status: 500 });
    expect((await run()).error).toMatchObject({ code: "llm.server_error", retryable: true });
    server.respondWith({ file: "anthropic/overloaded.json", status: 529 });
    const { error } = await run();
    expect(error).toMatchObject({ code: "llm.server_error", retryable: true });
    expect(error?.message).toContain("Overloaded");
  });

  it("anthropic - an error event mid-stream is a retryable server error", async () => {
    server.respondWith({ file: "anthropic/overloaded.sse" });
    const { deltas, error } = await run();
    expect(deltas.map((d) => d.text)).toEqual(["Let me"]);
    expect(error).toMatchObject({ code: "llm.server_error", retryable: true });
    expect(error?.message).toContain("overloaded_error");
  });

  it("anthropic - 401 names ANTHROPIC_API_KEY; 404 model is an unknown model; 400 is a bad request", async () => {
    server.respondWith({ file: "anthropic/auth.json", status: 401 });
    const auth = (await run()).error;
    expect(auth).toMatchObject({ code: "llm.auth", retryable: false });
    expect(auth?.message).toContain("ANTHROPIC_API_KEY");
    expect(auth?.message).not.toContain(KEY);
    server.respondWith({ file: "anthropic/model-not-found.json", status: 404 });
    const unknown = (await run("claude-sonnet-9")).error;
    expect(unknown).toMatchObject({ code: "llm.unknown_model" });
    expect(unknown?.message).toContain('"claude-sonnet-9"');
    server.respondWith({ file: "anthropic/bad-request.json", status: 400 });
    expect((await run()).error).toMatchObject({ code: "llm.bad_request", retryable: false });
  });

  it("anthropic - a malformed event fails after the deltas before it", async () => {
    server.respondWith({ file: "anthropic/malformed.sse" });
    const { deltas, error } = await run();
    expect(deltas.map((d) => d.text)).toEqual(["Looking"]);
    expect(error).toMatchObject({ code: "llm.malformed_chunk", retryable: true });
  });

  it("anthropic - a stream cut in the middle is retryable, cut mid-line or cleanly", async () => {
    server.respondWith({ file: "anthropic/stream-cut.sse", cut: true });
    const { deltas, error } = await run();
    expect(deltas.map((d) => d.text)).toEqual(["The file", " defines"]);
    expect(error).toMatchObject({ code: "llm.stream_cut", retryable: true });
    server.respondWith({ file: "anthropic/stream-cut.sse" });
    expect((await run()).error).toMatchObject({ code: "llm.stream_cut" });
  });

  it("anthropic - an empty reply is retryable", async () => {
    server.respondWith({ file: "anthropic/empty.sse" });
    const { error } = await run();
    expect(error).toMatchObject({ code: "llm.empty_reply", retryable: true });
  });

  it("anthropic - a silent server times out", async () => {
    server.respondWith({ file: "anthropic/stream-cut.sse", stall: true });
    const { error } = await run("claude-sonnet-4-5", { idleTimeoutMs: 300 });
    expect(error).toMatchObject({ code: "llm.timeout", retryable: true });
  });

  it("anthropic - no key fails before any request", async () => {
    const { error } = await run("claude-sonnet-4-5", { apiKey: undefined });
    expect(error).toMatchObject({ code: "llm.missing_key" });
    expect(error?.message).toContain("ANTHROPIC_API_KEY");
    expect(server.requests).toHaveLength(0);
  });
});
