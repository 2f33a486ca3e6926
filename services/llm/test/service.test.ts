import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { InMemorySpanExporter, NodeTracerProvider, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-node";
import { Bus, LlmRpc, requestStream } from "@tack/bus";
import { CompleteRequest, CompleteStreamMessage, Delta_Kind, Role } from "@tack/proto";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { startLlmService, type LlmService } from "../src/index.js";
import { startFixtureServer, type FixtureServer } from "./fixture-server.js";

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const SCRIPT = join(import.meta.dirname, "fixtures", "scripts", "two-steps.json");

const spans = new InMemorySpanExporter();
new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] }).register();

let namespace: string;
let home: string;
let fake: FixtureServer;
let service: LlmService;
let client: Bus;

beforeAll(async () => {
  namespace = `t${randomBytes(6).toString("hex")}`;
  home = await mkdtemp(join(tmpdir(), "tack-llm-home-"));
  fake = await startFixtureServer();
  // A price table without time windows, so that costs do not depend on when the test runs.
  const prices = join(home, "prices.json");
  await writeFile(prices, JSON.stringify({ models: [
    { match: "deepseek:*", usd_per_million: { input_miss: 1, input_hit: 0.1, output: 2 } },
    { match: "anthropic:*", window: "list", usd_per_million: { input_miss: 3, input_hit: 0.3, output: 15 } },
  ] }));
  service = await startLlmService({
    url: NATS_URL, namespace, home, pricesPath: prices,
    env: { DEEPSEEK_API_KEY: "sk-test-key", OPENAI_API_KEY: "sk-test-openai", ANTHROPIC_API_KEY: "sk-ant-test" },
    deepseekBaseUrl: fake.baseUrl, openaiBaseUrl: `${fake.baseUrl}/v1`, anthropicBaseUrl: fake.baseUrl,
    scripts: { scriptDirs: [join(import.meta.dirname, "fixtures")] },
    // Fast retries: the 429 fixture's retry-after of 7 s is capped at 20 ms.
    retry: { baseDelayMs: 5, maxDelayMs: 20 },
  });
  client = await Bus.connect({ url: NATS_URL, namespace, name: "llm-test-client" });
});
afterAll(async () => {
  await client?.close();
  await service?.stop();
  await fake?.close();
  await rm(home, { recursive: true, force: true });
});
beforeEach(() => {
  spans.reset();
  fake.requests.length = 0;
});

function request(model: string): CompleteRequest {
  return CompleteRequest.fromPartial({
    sessionId: "s1",
    model,
    systemPrompt: "You are Tack.",
    messages: [{ role: Role.ROLE_USER, content: "What is this project?" }],
  });
}

async function call(bus: Bus, model: string): Promise<CompleteStreamMessage[]> {
  const messages: CompleteStreamMessage[] = [];
  await requestStream(bus, LlmRpc.Complete, request(model), (message) => messages.push(message), (message) => message.body?.$case === "done" || message.body?.$case === "error", { idleTimeoutMs: 10_000 });
  return messages;
}

describe("llm service", () => {
  it("llm service - streams scripted deltas then one done over the bus", async () => {
    const messages = await call(client, `scripted:${SCRIPT}`);
    expect(messages.map((m) => m.index)).toEqual(messages.map((_, i) => i));
    const last = messages.at(-1)!;
    expect(messages.slice(0, -1).every((m) => m.body?.$case === "delta")).toBe(true);
    expect(messages.length).toBeGreaterThan(3);
    if (last.body?.$case !== "done") throw new Error(`expected done, got ${JSON.stringify(last)}`);
    expect(last.body.value.content).toBe("Let me look at the README.");
    expect(last.body.value.toolCalls.map((c) => c.id)).toEqual(["call_0_0", "call_0_1"]);
    expect(last.body.value.usage?.outputTokens).toBeGreaterThan(0);
    const span = spans.getFinishedSpans().find((s) => s.name === "llm.complete");
    expect(span?.attributes).toMatchObject({
      "llm.model": `scripted:${SCRIPT}`,
      "llm.provider": "scripted",
      "llm.output_tokens": last.body.value.usage!.outputTokens,
      "llm.input_miss_tokens": last.body.value.usage!.inputMissTokens,
    });
  });

  it("llm service - an unknown model ends the stream with llm.unknown_model", async () => {
    const messages = await call(client, "gpt:4o");
    expect(messages).toHaveLength(1);
    expect(messages[0]!.index).toBe(0);
    const body = messages[0]!.body;
    if (body?.$case !== "error") throw new Error(`expected error, got ${JSON.stringify(body)}`);
    expect(body.value.code).toBe("llm.unknown_model");
    expect(body.value.message).toContain("scripted:FILE");
    expect(body.value.message).toContain("deepseek:MODEL");
  });

  it("llm service - relays a DeepSeek stream with usage", async () => {
    fake.respondWith({ file: "deepseek/tool-calls.sse" });
    const messages = await call(client, "deepseek:deepseek-chat");
    expect(fake.requests.at(-1)?.headers.authorization).toBe("Bearer sk-test-key");
    const toolDeltas = messages.filter((m) => m.body?.$case === "delta" && m.body.value.kind === Delta_Kind.KIND_TOOL_CALL);
    expect(toolDeltas.length).toBeGreaterThan(2);
    const last = messages.at(-1)!.body;
    if (last?.$case !== "done") throw new Error(`expected done, got ${JSON.stringify(last)}`);
    expect(last.value.usage).toEqual({ inputMissTokens: 290, inputHitTokens: 1920, outputTokens: 64, reasoningTokens: 0 });
    expect(last.value.model).toBe("deepseek-chat");
    // $1 per 1M misses, $0.10 per 1M hits, $2 per 1M output in the test's price table.
    expect(last.value.costUsd).toBeCloseTo((290 * 1 + 1920 * 0.1 + 64 * 2) / 1_000_000, 12);
    expect(last.value.priceWindow).toBe("standard");
    const span = spans.getFinishedSpans().find((s) => s.name === "llm.complete");
    expect(span?.attributes).toMatchObject({ "llm.attempts": 1, "llm.cost_usd": last.value.costUsd, "llm.price_window": "standard" });
  });

  it("llm service - a scripted model is unpriced", async () => {
    const last = (await call(client, `scripted:${SCRIPT}`)).at(-1)!.body;
    expect(last).toMatchObject({ $case: "done", value: { costUsd: 0, priceWindow: "unpriced" } });
  });

  it("llm service - retries a 429 and a cut stream with a notice before each new attempt, then relays the reply", async () => {
    fake.respondWith(
      { file: "deepseek/rate-limited.json", status: 429, headers: { "retry-after": "7" } },
      { file: "deepseek/stream-cut.sse", cut: true },
      { file: "deepseek/tool-calls.sse" },
    );
    const messages = await call(client, "deepseek:deepseek-chat");
    expect(fake.requests).toHaveLength(3);
    expect(messages.map((m) => m.index)).toEqual(messages.map((_, i) => i));
    const cases = messages.map((m) => m.body?.$case);
    const retries = messages.flatMap((m) => (m.body?.$case === "retry" ? [m.body.value] : []));
    expect(retries).toEqual([
      { attempt: 1, code: "llm.rate_limited", message: expect.stringContaining("HTTP 429"), delayMs: 20 },
      { attempt: 2, code: "llm.stream_cut", message: expect.stringContaining("ended before the reply was complete"), delayMs: expect.any(Number) },
    ]);
    // The failed attempt's deltas sit between the two notices; the receiver drops them.
    const second = cases.lastIndexOf("retry");
    expect(cases[0]).toBe("retry");
    expect(messages.slice(1, second).map((m) => (m.body?.$case === "delta" ? m.body.value.text : m.body?.$case))).toEqual(["The file", " defines"]);
    expect(cases.slice(second + 1, -1).every((c) => c === "delta")).toBe(true);
    const last = messages.at(-1)!.body;
    expect(last).toMatchObject({ $case: "done", value: { content: "I'll read both files.", finishReason: "tool_calls" } });
    const span = spans.getFinishedSpans().find((s) => s.name === "llm.complete");
    expect(span?.attributes["llm.attempts"]).toBe(3);
    expect(span?.events.map((e) => e.name)).toEqual(["llm.retry", "llm.retry"]);
  });

  it("llm service - gives up after 5 attempts with the last error", async () => {
    fake.respondWith({ file: "deepseek/server-error.json", status: 500 });
    const messages = await call(client, "deepseek:deepseek-chat");
    expect(fake.requests).toHaveLength(5);
    expect(messages.map((m) => m.body?.$case)).toEqual(["retry", "retry", "retry", "retry", "error"]);
    expect(messages.flatMap((m) => (m.body?.$case === "retry" ? [m.body.value.attempt] : []))).toEqual([1, 2, 3, 4]);
    expect(messages.at(-1)!.body).toMatchObject({ $case: "error", value: { code: "llm.server_error", retryable: true } });
  });

  it("llm service - a non-retryable error fails at once", async () => {
    fake.respondWith({ file: "deepseek/auth.json", status: 401 });
    const messages = await call(client, "deepseek:deepseek-chat");
    expect(fake.requests).toHaveLength(1);
    expect(messages).toHaveLength(1);
    expect(messages[0]!.body).toMatchObject({ $case: "error", value: { code: "llm.auth", retryable: false } });
  });

  it("llm service - relays Anthropic and OpenAI-compatible streams with their keys", async () => {
    fake.respondWith({ file: "anthropic/tool-use.sse" });
    const anthropic = (await call(client, "anthropic:claude-sonnet-4-5")).at(-1)!.body;
    expect(fake.requests.at(-1)?.headers["x-api-key"]).toBe("sk-ant-test");
    expect(anthropic).toMatchObject({ $case: "done", value: { finishReason: "tool_calls", priceWindow: "list" } });
    if (anthropic?.$case !== "done") throw new Error("expected done");
    expect(anthropic.value.costUsd).toBeCloseTo((293 * 3 + 1920 * 0.3 + 88 * 15) / 1_000_000, 12);
    fake.respondWith({ file: "openai/text.sse" });
    const openai = (await call(client, "openai:gpt-4.1-mini")).at(-1)!.body;
    expect(fake.requests.at(-1)?.url).toBe("/v1/chat/completions");
    expect(fake.requests.at(-1)?.headers.authorization).toBe("Bearer sk-test-openai");
    expect(openai).toMatchObject({ $case: "done", value: { content: "2 + 3 = **5**.", priceWindow: "unpriced" } });
  });

  it("llm service - replays a recorded session with no key", async () => {
    const last = (await call(client, "replay:recordings/two-steps.jsonl")).at(-1)!.body;
    expect(last).toMatchObject({ $case: "done", value: { toolCalls: [{ id: "call_00_Jx4Qm9Rt2Lw7Vb1Kc8Np3Zs", name: "read" }] } });
  });

  it("llm service - llm.check answers for every provider and names what is missing", async () => {
    const check = (model: string) => client.request(LlmRpc.CheckModel, { model }, { timeoutMs: 10_000 });
    expect(await check("openai:gpt-4.1-mini")).toEqual({ provider: "openai" });
    expect(await check("anthropic:claude-sonnet-4-5")).toEqual({ provider: "anthropic" });
    expect(await check("replay:recordings/two-steps.jsonl")).toEqual({ provider: "replay" });
    await expect(check("replay:recordings/missing.jsonl")).rejects.toMatchObject({ code: "llm.bad_script" });
    await expect(check("claude:sonnet")).rejects.toMatchObject({ code: "llm.unknown_model", message: expect.stringContaining("anthropic:MODEL") });
  });

  it("llm service - stop cancels an in-flight completion with a retryable error", async () => {
    const ns = `t${randomBytes(6).toString("hex")}`;
    const second = await startLlmService({ url: NATS_URL, namespace: ns, home, env: { DEEPSEEK_API_KEY: "sk-test-key" }, deepseekBaseUrl: fake.baseUrl, scripts: { scriptDirs: [] } });
    const bus = await Bus.connect({ url: NATS_URL, namespace: ns, name: "llm-test-stop" });
    try {
      fake.respondWith({ file: "deepseek/stream-cut.sse", stall: true });
      const messages: CompleteStreamMessage[] = [];
      let stopping: Promise<void> | undefined;
      await requestStream(bus, LlmRpc.Complete, request("deepseek:deepseek-chat"), (message) => {
        messages.push(message);
        stopping ??= second.stop();
      }, (message) => message.body?.$case === "done" || message.body?.$case === "error", { idleTimeoutMs: 10_000 });
      await stopping;
      expect(messages.at(-1)?.body).toMatchObject({ $case: "error", value: { code: "llm.cancelled", retryable: true } });
    } finally {
      await bus.close();
    }
  });

  it("llm service - main.ts serves until SIGTERM and exits cleanly, reading scripts only from the configured directories", async () => {
    const ns = `t${randomBytes(6).toString("hex")}`;
    // The operator configuration names the script directories main.ts passes to the service.
    const config = join(home, "config.yaml");
    await writeFile(config, `models:\n  script_dirs: [${JSON.stringify(join(import.meta.dirname, "fixtures"))}]\n`);
    const child = spawn(join(import.meta.dirname, "..", "..", "..", "node_modules", ".bin", "tsx"), [join(import.meta.dirname, "..", "src", "main.ts")], {
      env: { PATH: process.env.PATH, HOME: home, NATS_URL, TACK_NAMESPACE: ns, TACK_CONFIG: config },
      stdio: ["ignore", "ignore", "pipe"],
    });
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
    try {
      // The one logger writes JSON lines to stderr; the service is up once it logged `ready`.
      const lines = createInterface({ input: child.stderr });
      for await (const line of lines) if (line.includes('"component":"llm"') && line.includes('"msg":"ready"')) break;
      const bus = await Bus.connect({ url: NATS_URL, namespace: ns, name: "llm-test-main" });
      try {
        expect((await call(bus, `scripted:${SCRIPT}`)).at(-1)?.body?.$case).toBe("done");
        await expect(bus.request(LlmRpc.CheckModel, { model: "scripted:/etc/passwd" }, { timeoutMs: 10_000 }))
          .rejects.toMatchObject({ code: "llm.bad_script", details: { reason: "outside_script_dirs" } });
      } finally {
        await bus.close();
      }
      child.kill("SIGTERM");
      expect(await exited).toBe(0);
    } finally {
      child.kill("SIGKILL");
    }
  });
});
