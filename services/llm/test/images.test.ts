import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Bus, LlmRpc, requestStream } from "@tack/bus";
import { SpillBucket } from "@tack/log";
import { ChatMessage, CompleteRequest, CompleteStreamMessage, Role, type ImageRef } from "@tack/proto";
import { removeNamespace } from "@tack/testkit";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { anthropicProvider } from "../src/anthropic.js";
import { deepseekProvider } from "../src/deepseek.js";
import { imageModels, imageTokens } from "../src/images.js";
import { openaiProvider } from "../src/openai.js";
import { startLlmService, type LlmService } from "../src/index.js";
import { runProvider } from "./conversation.js";
import { startFixtureServer, type FixtureServer } from "./fixture-server.js";

// Images of tool results, from an ImageRef in the request to what each provider is sent: the
// providers against a local fake server, and the service on real NATS loading the image from
// the spill object store as the loop stored it.
const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const png = Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), randomBytes(2000)]);
const base64 = png.toString("base64");
const ref: ImageRef = { mimeType: "image/png", object: "local.s1.call_1.image1", bytes: png.length, width: 640, height: 480 };
const loaded = new Map([[ref.object, png]]);

/** A read of shot.png whose result has an image, then the model's answer and a new question. */
function withImage(images: ImageRef[] = [ref], sessionId = "s1"): CompleteRequest {
  return CompleteRequest.fromPartial({
    sessionId, model: "x", systemPrompt: "", temperature: 0, maxTokens: 100,
    messages: [
      { role: Role.ROLE_USER, content: "What is in shot.png?" },
      { role: Role.ROLE_ASSISTANT, toolCalls: [{ id: "call_1", name: "read", arguments: '{"path":"shot.png"}' }] },
      { role: Role.ROLE_TOOL, toolCallId: "call_1", content: "[image: shot.png, PNG 640x480, 2 KB]", images },
      { role: Role.ROLE_ASSISTANT, content: "A chart." },
      { role: Role.ROLE_USER, content: "Of what?" },
    ],
  });
}

let server: FixtureServer;
beforeAll(async () => {
  server = await startFixtureServer();
});
afterAll(() => server.close());
beforeEach(() => {
  server.requests.length = 0;
});

type Wire = { role: string; content: unknown; tool_call_id?: string };
const sentMessages = () => server.requests[0]!.body.messages as Wire[];

describe("images - providers", () => {
  it("images - anthropic sends the image as a base64 image block inside the tool_result", async () => {
    server.respondWith({ file: "anthropic/thinking.sse" });
    const provider = anthropicProvider({ apiKey: "k", baseUrl: server.baseUrl }).create("claude-sonnet-4-5")!;
    expect(provider.takesImages).toBe(true);
    await provider.complete(withImage(), () => undefined, new AbortController().signal, loaded);
    expect(sentMessages()[2]).toEqual({ role: "user", content: [{
      type: "tool_result", tool_use_id: "call_1", content: [
        { type: "text", text: "[image: shot.png, PNG 640x480, 2 KB]" },
        { type: "image", source: { type: "base64", media_type: "image/png", data: base64 } },
      ],
    }] });
  });

  it("images - anthropic says so in place of an image that could not be loaded", async () => {
    server.respondWith({ file: "anthropic/thinking.sse" });
    await runProvider(anthropicProvider({ apiKey: "k", baseUrl: server.baseUrl }), "claude-sonnet-4-5", withImage());
    expect((sentMessages()[2]!.content as Array<{ content: unknown }>)[0]!.content).toEqual([
      { type: "text", text: "[image: shot.png, PNG 640x480, 2 KB]" },
      { type: "text", text: "[the image could not be loaded; read the file again to see it]" },
    ]);
  });

  it("images - openai with a model that views images gets a user message of data URIs after the tool results", async () => {
    server.respondWith({ file: "openai/text.sse" });
    const entry = openaiProvider({ apiKey: "k", baseUrl: `${server.baseUrl}/v1`, imageModels: imageModels("gpt-4o*,gpt-4.1*") });
    const provider = entry.create("gpt-4o-mini")!;
    expect(provider.takesImages).toBe(true);
    await provider.complete(withImage(), () => undefined, new AbortController().signal, loaded);
    expect(sentMessages().slice(1, 5)).toEqual([
      { role: "assistant", content: "", tool_calls: [{ id: "call_1", type: "function", function: { name: "read", arguments: '{"path":"shot.png"}' } }] },
      { role: "tool", tool_call_id: "call_1", content: "[image: shot.png, PNG 640x480, 2 KB]" },
      { role: "user", content: [
        { type: "text", text: "Image from tool call call_1:" },
        { type: "image_url", image_url: { url: `data:image/png;base64,${base64}` } },
      ] },
      { role: "assistant", content: "A chart." },
    ]);
  });

  it("images - openai with a model not known to view images, and deepseek, read that they cannot view it and get no image", async () => {
    const note = "[image: shot.png, PNG 640x480, 2 KB] — this model cannot view images";
    server.respondWith({ file: "openai/text.sse" });
    const entry = openaiProvider({ apiKey: "k", baseUrl: `${server.baseUrl}/v1`, imageModels: imageModels("gpt-4o*") });
    expect(entry.create("llama3")!.takesImages).toBe(false);
    await runProvider(entry, "llama3", withImage());
    server.respondWith({ file: "deepseek/reasoning.sse" });
    const deepseek = deepseekProvider({ apiKey: "k", baseUrl: server.baseUrl });
    expect(deepseek.create("deepseek-chat")!.takesImages).toBe(false);
    await runProvider(deepseek, "deepseek-chat", withImage());
    for (const request of server.requests) {
      const messages = request.body.messages as Wire[];
      expect(messages.find((m) => m.role === "tool")!.content).toBe(note);
      expect(JSON.stringify(messages)).not.toContain(base64.slice(0, 100));
      expect(messages.map((m) => m.role)).toEqual(["user", "assistant", "tool", "assistant", "user"]);
    }
  });

  it("images - TACK_IMAGE_MODELS patterns match whole names with * as the only wildcard", () => {
    const takes = imageModels("gpt-4o*, o3*,my.model");
    expect(["gpt-4o", "gpt-4o-mini", "o3-mini", "my.model"].map(takes)).toEqual([true, true, true, true]);
    expect(["gpt-4", "xgpt-4o", "myxmodel", "o1"].map(takes)).toEqual([false, false, false, false]);
    expect(imageModels("")("gpt-4o")).toBe(false);
    expect([imageTokens(ref), imageTokens({ ...ref, width: 4000, height: 3000 }), imageTokens({ ...ref, width: 0 })]).toEqual([410, 1600, 1600]);
  });
});

describe("images - service", () => {
  let namespace: string;
  let home: string;
  let service: LlmService;
  let client: Bus;

  beforeAll(async () => {
    namespace = `t${randomBytes(6).toString("hex")}`;
    home = await mkdtemp(join(tmpdir(), "tack-llm-images-"));
    service = await startLlmService({
      url: NATS_URL, namespace, home, env: { ANTHROPIC_API_KEY: "sk-ant-test", DEEPSEEK_API_KEY: "sk-test" },
      anthropicBaseUrl: server.baseUrl, deepseekBaseUrl: server.baseUrl,
      scripts: { scriptDirs: [home] }, retry: { baseDelayMs: 5, maxDelayMs: 20 },
    });
    client = await Bus.connect({ url: NATS_URL, namespace, name: "llm-images-test" });
  });
  afterAll(async () => {
    await service?.stop();
    await removeNamespace(client.nc, namespace);
    await client?.close();
    await rm(home, { recursive: true, force: true });
  });

  async function complete(request: CompleteRequest): Promise<CompleteStreamMessage> {
    const messages: CompleteStreamMessage[] = [];
    await requestStream(client, LlmRpc.Complete, request, (message) => messages.push(message), (message) => message.body?.$case === "done" || message.body?.$case === "error", { idleTimeoutMs: 10_000 });
    return messages.at(-1)!;
  }

  it("images - the service loads the session's image from the spill bucket for anthropic, and never another session's", async () => {
    const bucket = await SpillBucket.ensure(client.nc, client.names);
    const object = await bucket.put({ tenant: "local", sessionId: "s1" }, "call_1.image1", png);
    expect(object).toBe(ref.object);
    server.respondWith({ file: "anthropic/thinking.sse" });
    const image = (i: number) => JSON.stringify((server.requests[i]!.body.messages as Wire[])[2]);
    expect((await complete({ ...withImage(), model: "anthropic:claude-sonnet-4-5" })).body?.$case).toBe("done");
    expect(image(0)).toContain(`"data":"${base64}"`);
    // Again from the cache: the same body.
    await complete({ ...withImage(), model: "anthropic:claude-sonnet-4-5" });
    expect(image(1)).toBe(image(0));
    // A request of session s2 naming s1's image gets the note, not the image.
    await complete({ ...withImage([ref], "s2"), model: "anthropic:claude-sonnet-4-5" });
    expect(image(2)).not.toContain(base64.slice(0, 100));
    expect(image(2)).toContain("could not be loaded");
  });

  it("images - the token count of a request holds its images", async () => {
    const count = (request: CompleteRequest) => client.request(LlmRpc.CountTokens, { request });
    const without = await count(withImage([]));
    const withOne = await count(withImage());
    // The image's estimate plus the few tokens of the note a text-only tokenizer sees.
    expect(withOne.conversationTokens - without.conversationTokens).toBeGreaterThanOrEqual(imageTokens(ref));
    expect(withOne.conversationTokens - without.conversationTokens).toBeLessThan(imageTokens(ref) + 20);
  });
});

// Keeps ChatMessage's images field in the wire form: an older sender (no field 6) still decodes.
describe("images - wire", () => {
  it("images - a ChatMessage without images decodes with none", () => {
    const old = ChatMessage.encode(ChatMessage.fromPartial({ role: Role.ROLE_TOOL, content: "x" })).finish();
    expect(ChatMessage.decode(old).images).toEqual([]);
  });
});
