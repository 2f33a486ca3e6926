import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { InMemorySpanExporter, NodeTracerProvider, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-node";
import { Bus, requestStream } from "@tack/bus";
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
  service = await startLlmService({ url: NATS_URL, namespace, home, env: { DEEPSEEK_API_KEY: "sk-test-key" }, deepseekBaseUrl: fake.baseUrl });
  client = await Bus.connect({ url: NATS_URL, namespace, name: "llm-test-client" });
});
afterAll(async () => {
  await client?.close();
  await service?.stop();
  await fake?.close();
  await rm(home, { recursive: true, force: true });
});
beforeEach(() => spans.reset());

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
  await requestStream(bus, bus.names.llmComplete, CompleteRequest, request(model), CompleteStreamMessage,
    (message) => messages.push(message), (message) => message.body?.$case !== "delta", { idleTimeoutMs: 10_000 });
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
    fake.respondWith({ file: "tool-calls.sse" });
    const messages = await call(client, "deepseek:deepseek-chat");
    expect(fake.requests.at(-1)?.headers.authorization).toBe("Bearer sk-test-key");
    const toolDeltas = messages.filter((m) => m.body?.$case === "delta" && m.body.value.kind === Delta_Kind.KIND_TOOL_CALL);
    expect(toolDeltas.length).toBeGreaterThan(2);
    const last = messages.at(-1)!.body;
    if (last?.$case !== "done") throw new Error(`expected done, got ${JSON.stringify(last)}`);
    expect(last.value.usage).toEqual({ inputMissTokens: 290, inputHitTokens: 1920, outputTokens: 64, reasoningTokens: 0 });
    expect(last.value.model).toBe("deepseek-chat");
  });

  it("llm service - stop cancels an in-flight completion with a retryable error", async () => {
    const ns = `t${randomBytes(6).toString("hex")}`;
    const second = await startLlmService({ url: NATS_URL, namespace: ns, home, env: { DEEPSEEK_API_KEY: "sk-test-key" }, deepseekBaseUrl: fake.baseUrl });
    const bus = await Bus.connect({ url: NATS_URL, namespace: ns, name: "llm-test-stop" });
    try {
      fake.respondWith({ file: "stream-cut.sse", stall: true });
      const messages: CompleteStreamMessage[] = [];
      let stopping: Promise<void> | undefined;
      await requestStream(bus, bus.names.llmComplete, CompleteRequest, request("deepseek:deepseek-chat"), CompleteStreamMessage, (message) => {
        messages.push(message);
        stopping ??= second.stop();
      }, (message) => message.body?.$case !== "delta", { idleTimeoutMs: 10_000 });
      await stopping;
      expect(messages.at(-1)?.body).toMatchObject({ $case: "error", value: { code: "llm.cancelled", retryable: true } });
    } finally {
      await bus.close();
    }
  });

  it("llm service - main.ts serves until SIGTERM and exits cleanly", async () => {
    const ns = `t${randomBytes(6).toString("hex")}`;
    const child = spawn(join(import.meta.dirname, "..", "..", "..", "node_modules", ".bin", "tsx"), [join(import.meta.dirname, "..", "src", "main.ts")], {
      env: { PATH: process.env.PATH, HOME: home, NATS_URL, TACK_NAMESPACE: ns },
      stdio: ["ignore", "pipe", "inherit"],
    });
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
    try {
      const lines = createInterface({ input: child.stdout });
      for await (const line of lines) if (line.includes("service/ready")) break;
      const bus = await Bus.connect({ url: NATS_URL, namespace: ns, name: "llm-test-main" });
      try {
        expect((await call(bus, `scripted:${SCRIPT}`)).at(-1)?.body?.$case).toBe("done");
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
