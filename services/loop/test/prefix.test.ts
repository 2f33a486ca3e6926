import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { removeNamespace, waitFor } from "@tack/testkit";
import { Bus, LlmRpc, LoopRpc, ToolsRpc } from "@tack/bus";
import { readAll } from "@tack/log";
import { CallToolResponse, ChatMessage, CompleteRequest, CreateSessionRequest, ListToolsResponse, Role } from "@tack/proto";
import { startLoopService, type LoopService } from "@tack/loop-service";

// What the provider's prefix cache sees: every request must extend the previous one byte for
// byte, and nothing in the system prompt or the tool list may change mid-session.
const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const STEPS = 30;
let bus: Bus;
let loop: LoopService;
const requests: CompleteRequest[] = [];

beforeAll(async () => {
  bus = await Bus.connect({ url: NATS_URL, namespace: `t${randomBytes(5).toString("hex")}`, name: "prefix-test" });
  bus.serve(LlmRpc.Complete, async (req, w) => {
    requests.push(req);
    const n = req.messages.filter((m) => m.role === Role.ROLE_ASSISTANT).length;
    const toolCalls = n < STEPS - 1 ? [{ id: `call_${n}_0`, name: "read", arguments: JSON.stringify({ path: `src/file${n}.ts` }) }] : [];
    w.send({ index: 0, body: { $case: "done", value: {
      content: n < STEPS - 1 ? `Reading file ${n}.` : "All files read.", reasoningContent: `step ${n}`, toolCalls,
      finishReason: toolCalls.length ? "tool_calls" : "stop", usage: undefined, model: "scripted", costUsd: 0, priceWindow: "",
    } } });
  });
  bus.serve(LlmRpc.CheckModel, async () => ({ provider: "scripted" }));
  bus.serve(ToolsRpc.ListTools, async () => ListToolsResponse.fromPartial({
    tools: [{ name: "read", description: "Read a file.", parametersJson: '{"type":"object"}' }],
  }));
  bus.serve(ToolsRpc.CallTool, async (req) => CallToolResponse.fromPartial({
    content: `contents of ${JSON.parse(req.arguments).path}\n${"x".repeat(200)}`, isError: false, durationMs: 1,
  }));
  loop = await startLoopService({ natsUrl: NATS_URL, namespace: bus.names.namespace, stepLimit: STEPS + 5 });
});

afterAll(async () => {
  await loop.stop();
  // Streams, lease/spend buckets and spill store of this test's namespace.
  await removeNamespace(bus.nc, bus.names.namespace);
  await bus.close();
});

describe("prefix stability", () => {
  it("prefix - each of 30 requests extends the previous one byte for byte, with a fixed system prompt and tool list", async () => {
    const workspace = mkdtempSync(join(tmpdir(), "tack-prefix-"));
    const { sessionId } = await bus.request(LoopRpc.CreateSession, CreateSessionRequest.fromPartial({ model: "scripted:x", workspace }));
    await bus.request(LoopRpc.SubmitMessage, { tenant: "local", sessionId, text: "read every file" });
    await waitFor("turn/end", async () => (await readAll(bus.nc, bus.names, { tenant: "local", sessionId })).some((e) => e.type === "turn/end"), { timeoutMs: 15_000, intervalMs: 50 });
    expect(requests).toHaveLength(STEPS);
    // The messages as a provider receives them: one JSON array, serialized the same way each time.
    const serialized = requests.map((r) => JSON.stringify(r.messages.map((m) => ChatMessage.toJSON(m))));
    for (let i = 1; i < serialized.length; i++) {
      const previous = serialized[i - 1]!.slice(0, -1); // without the closing bracket
      expect(serialized[i]!.startsWith(previous), `request ${i + 1} does not extend request ${i}`).toBe(true);
      expect(serialized[i]!.length).toBeGreaterThan(serialized[i - 1]!.length);
      expect(requests[i]!.systemPrompt).toBe(requests[0]!.systemPrompt);
      expect(JSON.stringify(requests[i]!.tools)).toBe(JSON.stringify(requests[0]!.tools));
      expect([requests[i]!.model, requests[i]!.temperature, requests[i]!.maxTokens]).toEqual([requests[0]!.model, requests[0]!.temperature, requests[0]!.maxTokens]);
    }
  });
});
