import { Delta_Kind } from "@tack/proto";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { ChatCompletionsOptions } from "../src/chat-completions.js";
import { deepseekProvider } from "../src/deepseek.js";
import { conversation as request, runProvider } from "./conversation.js";
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

function run(model: string, options: Partial<ChatCompletionsOptions> = {}): ReturnType<typeof runProvider> {
  return runProvider(deepseekProvider({ apiKey: KEY, baseUrl: server.baseUrl, ...options }), model, { ...request, model: `deepseek:${model}` });
}

describe("deepseek", () => {
  it("deepseek - sends system prompt, history, tools and stream options; reasoning only with tool calls", async () => {
    server.respondWith({ file: "deepseek/reasoning.sse" });
    await run("deepseek-reasoner");
    expect(server.requests).toHaveLength(1);
    const [received] = server.requests;
    expect(received!.method).toBe("POST");
    expect(received!.url).toBe("/chat/completions");
    expect(received!.headers.authorization).toBe(`Bearer ${KEY}`);
    expect(received!.body).toEqual({
      model: "deepseek-reasoner",
      messages: [
        { role: "system", content: "You are Tack." },
        { role: "user", content: "What is in README.md?" },
        {
          role: "assistant",
          content: "",
          reasoning_content: "I should read it.",
          tool_calls: [{ id: "call_00_abc", type: "function", function: { name: "read_file", arguments: '{"path":"README.md"}' } }],
        },
        { role: "tool", tool_call_id: "call_00_abc", content: "# Tack" },
        { role: "assistant", content: "It is a harness." },
        { role: "user", content: "Add two and three." },
      ],
      tools: [{
        type: "function",
        function: {
          name: "read_file",
          description: "Read a file.",
          parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
        },
      }],
      temperature: 0.2,
      max_tokens: 4096,
      stream: true,
      stream_options: { include_usage: true },
    });
  });

  it("deepseek - streams reasoning then content and reads cache usage", async () => {
    server.respondWith({ file: "deepseek/reasoning.sse" });
    const { deltas, result, error } = await run("deepseek-reasoner");
    expect(error).toBeUndefined();
    expect(deltas.map((d) => [d.kind, d.text])).toEqual([
      [Delta_Kind.KIND_REASONING, "The user"],
      [Delta_Kind.KIND_REASONING, " wants the"],
      [Delta_Kind.KIND_REASONING, " sum of 2"],
      [Delta_Kind.KIND_REASONING, " and 3 —"],
      [Delta_Kind.KIND_REASONING, " that is 5."],
      [Delta_Kind.KIND_TEXT, "2 + 3"],
      [Delta_Kind.KIND_TEXT, " = **5**"],
      [Delta_Kind.KIND_TEXT, "."],
    ]);
    expect(result).toEqual({
      content: "2 + 3 = **5**.",
      reasoningContent: "The user wants the sum of 2 and 3 — that is 5.",
      toolCalls: [],
      finishReason: "stop",
      usage: { inputMissTokens: 19, inputHitTokens: 1024, outputTokens: 31, reasoningTokens: 18 },
      model: "deepseek-reasoner",
    });
  });

  it("deepseek - assembles tool calls split across chunks", async () => {
    server.respondWith({ file: "deepseek/tool-calls.sse" });
    const { deltas, result, error } = await run("deepseek-chat");
    expect(error).toBeUndefined();
    expect(result).toEqual({
      content: "I'll read both files.",
      reasoningContent: "",
      toolCalls: [
        { id: "call_00_q8RmT1xYk2cVb3nWp4sLz7Ae", name: "read_file", arguments: '{"path":"src/main.ts"}' },
        { id: "call_01_Hx5Jd9Kf2Lm6Nq8Rs0Tv3Wy", name: "read_file", arguments: '{"path":"README.md"}' },
      ],
      finishReason: "tool_calls",
      usage: { inputMissTokens: 290, inputHitTokens: 1920, outputTokens: 64, reasoningTokens: 0 },
      model: "deepseek-chat",
    });
    const toolDeltas = deltas.filter((d) => d.kind === Delta_Kind.KIND_TOOL_CALL);
    // Id and name arrive once, on the first delta of each call.
    expect(toolDeltas.filter((d) => d.toolCallId !== "").map((d) => [d.toolIndex, d.toolCallId, d.toolName])).toEqual([
      [0, "call_00_q8RmT1xYk2cVb3nWp4sLz7Ae", "read_file"],
      [1, "call_01_Hx5Jd9Kf2Lm6Nq8Rs0Tv3Wy", "read_file"],
    ]);
    expect(toolDeltas.filter((d) => d.toolCallId === "").every((d) => d.toolName === "")).toBe(true);
    for (const call of [0, 1]) {
      const fragments = toolDeltas.filter((d) => d.toolIndex === call).map((d) => d.text).join("");
      expect(fragments).toBe(result!.toolCalls[call]!.arguments);
    }
    expect(deltas.filter((d) => d.kind === Delta_Kind.KIND_TEXT).map((d) => d.text).join("")).toBe("I'll read both files.");
  });

  it("deepseek - 429 is retryable rate limiting and keeps retry-after", async () => {
    server.respondWith({ file: "deepseek/rate-limited.json", status: 429, headers: { "retry-after": "7" } });
    const { error } = await run("deepseek-chat");
    expect(error?.code).toBe("llm.rate_limited");
    expect(error?.retryable).toBe(true);
    expect(error?.details).toMatchObject({ status: "429", retry_after: "7" });
    expect(error?.message).toContain("Rate limit reached for requests");
  });

  it("deepseek - 500 is a retryable server error", async () => {
    server.respondWith({ file: "deepseek/server-error.json", status: 500 });
    const { error } = await run("deepseek-chat");
    expect(error?.code).toBe("llm.server_error");
    expect(error?.retryable).toBe(true);
    expect(error?.message).toContain("HTTP 500");
  });

  it("deepseek - 401 names DEEPSEEK_API_KEY and never echoes a key", async () => {
    server.respondWith({ file: "deepseek/auth.json", status: 401 });
    const { error } = await run("deepseek-chat");
    expect(error?.code).toBe("llm.auth");
    expect(error?.retryable).toBe(false);
    expect(error?.message).toContain("DEEPSEEK_API_KEY");
    expect(error?.message).not.toContain(KEY);
    expect(error?.message).not.toContain("sk-3f9c");
  });

  it("deepseek - 400 Model Not Exist is an unknown model", async () => {
    server.respondWith({ file: "deepseek/model-not-exist.json", status: 400 });
    const { error } = await run("deepseek-chatt");
    expect(error?.code).toBe("llm.unknown_model");
    expect(error?.message).toContain('"deepseek-chatt"');
  });

  it("deepseek - other 4xx is a bad request", async () => {
    server.respondWith({ file: "deepseek/model-not-exist.json", status: 422 });
    const { error } = await run("deepseek-chat");
    expect(error?.code).toBe("llm.bad_request");
    expect(error?.retryable).toBe(false);
  });

  it("deepseek - a malformed chunk fails after the deltas before it", async () => {
    server.respondWith({ file: "deepseek/malformed.sse" });
    const { deltas, error } = await run("deepseek-chat");
    expect(deltas.map((d) => d.text)).toEqual(["Looking"]);
    expect(error?.code).toBe("llm.malformed_chunk");
    expect(error?.message).toContain("not JSON");
  });

  it("deepseek - a connection cut mid-chunk is a retryable stream cut", async () => {
    server.respondWith({ file: "deepseek/stream-cut.sse", cut: true });
    const { deltas, error } = await run("deepseek-chat");
    expect(deltas.map((d) => d.text)).toEqual(["The file", " defines"]);
    expect(error?.code).toBe("llm.stream_cut");
    expect(error?.retryable).toBe(true);
  });

  it("deepseek - a body that ends cleanly before finish is a stream cut", async () => {
    server.respondWith({ file: "deepseek/stream-cut.sse" });
    const { error } = await run("deepseek-chat");
    expect(error?.code).toBe("llm.stream_cut");
  });

  it("deepseek - a reply with neither content nor tool calls is empty", async () => {
    server.respondWith({ file: "deepseek/empty.sse" });
    const { error } = await run("deepseek-chat");
    expect(error?.code).toBe("llm.empty_reply");
    expect(error?.retryable).toBe(true);
  });

  it("deepseek - a silent server times out", async () => {
    server.respondWith({ file: "deepseek/stream-cut.sse", stall: true });
    const { deltas, error } = await run("deepseek-chat", { idleTimeoutMs: 300 });
    expect(deltas).toHaveLength(2);
    expect(error?.code).toBe("llm.timeout");
    expect(error?.retryable).toBe(true);
  });

  it("deepseek - aborting the signal cancels the stream", async () => {
    server.respondWith({ file: "deepseek/stream-cut.sse", stall: true });
    const controller = new AbortController();
    const provider = deepseekProvider({ apiKey: KEY, baseUrl: server.baseUrl }).create("deepseek-chat")!;
    const pending = provider.complete(request, () => controller.abort(), controller.signal);
    await expect(pending).rejects.toMatchObject({ code: "llm.cancelled", retryable: true });
  });

  it("deepseek - no key fails with llm.missing_key before any request", async () => {
    server.respondWith({ file: "deepseek/reasoning.sse" });
    const { error } = await run("deepseek-chat", { apiKey: undefined });
    expect(error?.code).toBe("llm.missing_key");
    expect(error?.message).toContain("DEEPSEEK_API_KEY");
    expect(error?.message).toContain("~/.tack/credentials.yaml");
    expect(server.requests).toHaveLength(0);
  });

  it("deepseek - an unreachable base URL is retryable", async () => {
    const closed = await startFixtureServer();
    await closed.close();
    const { error } = await run("deepseek-chat", { baseUrl: closed.baseUrl });
    expect(error?.code).toBe("llm.unreachable");
    expect(error?.retryable).toBe(true);
    expect(error?.message).toContain("DEEPSEEK_BASE_URL");
  });

  it("deepseek - model names that cannot be DeepSeek models are not bound", () => {
    const entry = deepseekProvider({ apiKey: KEY, baseUrl: server.baseUrl });
    expect(entry.create("Deepseek Chat")).toBeUndefined();
    for (const model of ["deepseek-v4-flash", "deepseek-v4-pro", "deepseek-chat", "deepseek-reasoner"]) expect(entry.create(model)).toBeDefined();
  });

  it("deepseek - V4 flash and pro are sent by name", async () => {
    for (const model of ["deepseek-v4-flash", "deepseek-v4-pro"]) {
      server.respondWith({ file: "deepseek/tool-calls.sse" });
      const { error } = await run(model);
      expect(error).toBeUndefined();
      expect(server.requests.at(-1)?.body.model).toBe(model);
    }
  });
});
