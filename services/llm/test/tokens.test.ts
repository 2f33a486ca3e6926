import { CompleteRequest, Role } from "@tack/proto";
import { describe, expect, it } from "vitest";
import { deepseekRequestBody } from "../src/deepseek.js";
import { PrefixCache } from "../src/prefix-cache.js";
import { countRequestTokens, countTokens, requestTokenSegments, tokenIds } from "../src/tokens.js";

describe("tokens", () => {
  it("tokens - counts with the DeepSeek V3 vocabulary, not characters", () => {
    expect(tokenIds("Hello, my dog is cute.")).toEqual([19923, 14, 1026, 6397, 344, 33125, 16]);
    expect(countTokens("")).toBe(0);
    // Chinese packs more than one character per token; the 4-characters rule is off by 2x here.
    const chinese = "你好世界，这是一个编码代理。";
    expect(countTokens(chinese)).toBeLessThan(chinese.length);
    expect(countTokens(chinese)).toBeGreaterThan(chinese.length / 4);
  });

  it("tokens - a request is counted as the DeepSeek body: tools first, then one message per segment", () => {
    const request = CompleteRequest.fromPartial({
      systemPrompt: "You are Tack.",
      tools: [{ name: "read", description: "Read a file.", parametersJson: '{"type":"object"}' }],
      messages: [{ role: Role.ROLE_USER, content: "Hi." }],
    });
    const body = deepseekRequestBody("scripted", request);
    const segments = [JSON.stringify(body.tools), ...(body.messages as unknown[]).map((m) => JSON.stringify(m))];
    expect(requestTokenSegments(request)).toEqual(segments.map((segment) => tokenIds(`${segment}\n`)));
    expect(countRequestTokens(request)).toBe(segments.reduce((sum, segment) => sum + countTokens(`${segment}\n`), 0));
    // Appending a message appends a segment: the earlier ones stay as they were.
    const longer = requestTokenSegments({ ...request, messages: [...request.messages, { role: Role.ROLE_ASSISTANT, content: "Hello.", reasoningContent: "", toolCalls: [], toolCallId: "", images: [] }] });
    expect(longer.slice(0, -1)).toEqual(requestTokenSegments(request));
  });
});

describe("prefix cache", () => {
  const ids = (from: number, count: number) => Array.from({ length: count }, (_, i) => from + i);

  it("prefix cache - hits the longest earlier prefix in whole blocks", () => {
    const cache = new PrefixCache(64);
    const first = ids(0, 150);
    expect(cache.lookup([first])).toBe(0);
    // The same request again: its two whole blocks hit, the 22-token tail misses.
    expect(cache.lookup([first])).toBe(128);
    // Extended: only the blocks seen before hit; asked again, its third whole block hits too.
    expect(cache.lookup([[...first, ...ids(1000, 100)]])).toBe(128);
    expect(cache.lookup([[...first, ...ids(1000, 100)]])).toBe(192);
  });

  it("prefix cache - a change stops the hit at the block it falls in", () => {
    const cache = new PrefixCache(64);
    cache.lookup([ids(0, 300)]);
    const changed = ids(0, 300);
    changed[100] = -1;
    expect(cache.lookup([changed])).toBe(64);
    expect(cache.lookup([ids(5, 300)])).toBe(0);
    expect(cache.lookup([ids(0, 63)])).toBe(0);
  });

  it("prefix cache - blocks run across segments", () => {
    const cache = new PrefixCache(64);
    cache.lookup([ids(0, 100), ids(100, 100)]);
    expect(cache.lookup([ids(0, 30), ids(30, 150), ids(180, 20)])).toBe(192);
  });
});
