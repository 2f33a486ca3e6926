import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Bus, LlmRpc, TackError } from "@tack/bus";
import { CompleteStreamMessage } from "@tack/proto";
import { removeNamespace } from "@tack/testkit";
import { callModel } from "../src/model-call.js";

// One model call over real NATS, with an llm responder on the bus. The case here: the session's
// log writes fail (its lease went to another loop) while the call itself fails too. The call's
// failure is what the caller hears; the failed writes must not escape as unhandled rejections,
// which end a Node process (it did: a loop replica died of one under load, taking every session
// it owned with it).
const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const namespace = `mc${randomBytes(5).toString("hex")}`;
let bus: Bus;
const unhandled: unknown[] = [];
const onUnhandled = (reason: unknown) => unhandled.push(reason);

beforeAll(async () => {
  bus = await Bus.connect({ url: NATS_URL, namespace, name: "model-call-test" });
  // Three deltas, then the provider's failure as the stream's last message.
  bus.serve(LlmRpc.Complete, async (_req, w) => {
    for (let i = 0; i < 3; i++) w.send(CompleteStreamMessage.fromPartial({ index: i, body: { $case: "delta", value: { text: `part ${i} ` } } }));
    w.send(CompleteStreamMessage.fromPartial({ index: 3, body: { $case: "error", value: { code: "llm.provider_error", message: "the provider is overloaded" } } }));
  });
  process.on("unhandledRejection", onUnhandled);
});

afterAll(async () => {
  process.off("unhandledRejection", onUnhandled);
  await removeNamespace(bus.nc, namespace).catch(() => undefined);
  await bus?.close();
});

describe("callModel", () => {
  it("a failing call whose chunk writes were refused rejects with the call's error, and no write rejection goes unhandled", async () => {
    let appends = 0;
    const lost = new TackError("loop.lease_lost", "lost the lease: another loop took over the session");
    const call = callModel({
      bus, sessionId: "s1", chunkPack: 1, llmIdleTimeoutMs: 5_000, silenceMs: 5_000,
      retry: { maxAttempts: 1, windowMs: 1_000, baseDelayMs: 10, maxDelayMs: 10, random: () => 0 },
      append: async () => {
        appends += 1;
        throw lost;
      },
    }, 1, 1, { model: "scripted", systemPrompt: "", tools: [], messages: [], temperature: 0, maxTokens: 100 });
    await expect(call).rejects.toMatchObject({ code: "llm.provider_error" });
    // Unhandled rejections are reported after a turn of the event loop.
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(appends).toBe(3);
    expect(unhandled).toEqual([]);
  });
});
