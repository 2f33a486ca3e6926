import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Bus } from "@tack/bus";
import { Event, ToolResult } from "@tack/proto";
import { AckPublisher, PublishRefused, PublishUnanswered } from "../src/publisher.js";
import {
  deriveRequest, draft, ensureLogStream, FORMAT_VERSION, LogConflictError, readAll, readSession, serializeRequest, SessionLogWriter, UnknownEventTypeError,
} from "@tack/log";

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
let bus: Bus;

beforeAll(async () => {
  bus = await Bus.connect({ url: NATS_URL, namespace: `t${randomBytes(5).toString("hex")}`, name: "log-test" });
  await ensureLogStream(bus.nc, bus.names);
});
afterAll(async () => {
  const jsm = await jetstreamManager(bus.nc);
  await jsm.streams.delete(bus.names.logStream).catch(() => undefined);
  await bus.close();
});

const created = (id: string) => draft("sessionCreated", {
  sessionId: id, tenant: "local", mode: "standard", model: "scripted:x.json", workspace: "/w", formatVersion: FORMAT_VERSION, title: "",
}, "test");

describe("session log", () => {
  it("log - appends contiguous seqs and reads them back in order", async () => {
    const w = await SessionLogWriter.open(bus.nc, bus.names, { tenant: "local", sessionId: "s1" });
    await w.append(created("s1"), draft("userMessage", { text: "hi" }, "gateway"));
    await w.append(draft("turnStart", { turn: 1, userMessageSeq: 2 }, "loop"));
    const events = await readAll(bus.nc, bus.names, { tenant: "local", sessionId: "s1" });
    expect(events.map((e) => [e.seq, e.type, e.source])).toEqual([
      [1, "session/created", "test"], [2, "user/message", "gateway"], [3, "turn/start", "loop"],
    ]);
    expect(events[1]!.time!.seconds).toBeGreaterThan(1_700_000_000);
  });

  it("log - a reopened writer continues after the last event", async () => {
    const w1 = await SessionLogWriter.open(bus.nc, bus.names, { tenant: "local", sessionId: "s2" });
    await w1.append(created("s2"));
    const w2 = await SessionLogWriter.open(bus.nc, bus.names, { tenant: "local", sessionId: "s2" });
    expect(w2.lastSeq).toBe(1);
    const [e] = await w2.append(draft("userMessage", { text: "again" }, "gateway"));
    expect(e!.seq).toBe(2);
  });

  it("log - a second writer is refused instead of interleaving (single writer)", async () => {
    const a = await SessionLogWriter.open(bus.nc, bus.names, { tenant: "local", sessionId: "s3" });
    const b = await SessionLogWriter.open(bus.nc, bus.names, { tenant: "local", sessionId: "s3" });
    await a.append(created("s3"));
    await expect(b.append(created("s3"))).rejects.toBeInstanceOf(LogConflictError);
    // b stays fenced off for good; a keeps writing.
    await expect(b.append(draft("userMessage", { text: "x" }, "gateway"))).rejects.toBeInstanceOf(LogConflictError);
    await a.append(draft("userMessage", { text: "ok" }, "gateway"));
    expect((await readAll(bus.nc, bus.names, { tenant: "local", sessionId: "s3" })).map((e) => e.seq)).toEqual([1, 2]);
  });

  it("log - pipelined appends of two writers racing for one log never interleave: one wins whole, the other is fenced off", async () => {
    const a = await SessionLogWriter.open(bus.nc, bus.names, { tenant: "local", sessionId: "race" });
    const b = await SessionLogWriter.open(bus.nc, bus.names, { tenant: "local", sessionId: "race" });
    const batch = (who: string) => Array.from({ length: 20 }, (_, i) => draft("userMessage", { text: `${who}${i}` }, who));
    const outcomes = await Promise.allSettled([a.append(...batch("a")), b.append(...batch("b"))]);
    const events = await readAll(bus.nc, bus.names, { tenant: "local", sessionId: "race" });
    expect(events.map((e) => e.seq)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    // Every stored event comes from the one writer that won.
    expect(new Set(events.map((e) => e.source)).size).toBe(1);
    const winner = events[0]!.source;
    expect(outcomes.map((o) => o.status)).toEqual(winner === "a" ? ["fulfilled", "rejected"] : ["rejected", "fulfilled"]);
    expect((outcomes.find((o) => o.status === "rejected") as PromiseRejectedResult).reason).toBeInstanceOf(LogConflictError);
  });

  it("log - pipelined appends of many sessions at once keep every log contiguous and complete, in call order", async () => {
    const writers = await Promise.all(Array.from({ length: 8 }, (_, i) => SessionLogWriter.open(bus.nc, bus.names, { tenant: "local", sessionId: `busy${i}` })));
    const mirrored = writers.map(() => [] as number[]);
    writers.forEach((w, i) => { w.onAppend = (e) => mirrored[i]!.push(e.seq); });
    // Many small appends per writer, not awaited one by one: they pipeline, and other sessions' messages get in between.
    await Promise.all(writers.map((w) => Promise.all(Array.from({ length: 40 }, (_, n) => w.append(draft("userMessage", { text: `m${n}` }, "t"))))));
    for (const [i] of writers.entries()) {
      const events = await readAll(bus.nc, bus.names, { tenant: "local", sessionId: `busy${i}` });
      expect(events.map((e) => e.seq)).toEqual(Array.from({ length: 40 }, (_, n) => n + 1));
      expect(events.map((e) => e.payload?.$case === "userMessage" && e.payload.value.text)).toEqual(Array.from({ length: 40 }, (_, n) => `m${n}`));
      expect(mirrored[i]).toEqual(Array.from({ length: 40 }, (_, n) => n + 1));
    }
  });

  it("log - the publisher: a refused expectation is PublishRefused with JetStream's code; no stream is PublishUnanswered at once", async () => {
    const publisher = AckPublisher.of(bus.nc);
    const subject = bus.names.logSubject("local", "pub1");
    const data = new Uint8Array([1, 2, 3]);
    expect(await publisher.publish(subject, data, "pub1:1", { lastSubjectSequence: 0 })).toMatchObject({ duplicate: false });
    expect(await publisher.publish(subject, data, "pub1:1", { lastSubjectSequence: 0 })).toMatchObject({ duplicate: true });
    const wrongSeq = await publisher.publish(subject, data, "pub1:2", { lastSubjectSequence: 0 }).catch((e: unknown) => e);
    expect(wrongSeq).toBeInstanceOf(PublishRefused);
    expect((wrongSeq as PublishRefused).code).toBe(10071);
    const wrongId = await publisher.publish(subject, data, "pub1:3", { lastMsgId: "nobody" }).catch((e: unknown) => e);
    expect((wrongId as PublishRefused).code).toBe(10070);
    const started = performance.now();
    const nowhere = await publisher.publish(`${bus.names.namespace}.nostream.x`, data, "x:1", { lastSubjectSequence: 0 }).catch((e: unknown) => e);
    expect(nowhere).toBeInstanceOf(PublishUnanswered);
    expect(performance.now() - started).toBeLessThan(2_000);
  });

  it("log - a retried append with the same Nats-Msg-Id is stored once", async () => {
    const subject = bus.names.logSubject("local", "s4");
    const js = jetstream(bus.nc);
    const data = Event.encode(Event.fromPartial({ seq: 1, type: "user/message", source: "t", payload: { $case: "userMessage", value: { text: "x" } } })).finish();
    const first = await js.publish(subject, data, { msgID: "s4:1", expect: { lastSubjectSequence: 0 } });
    const retry = await js.publish(subject, data, { msgID: "s4:1", expect: { lastSubjectSequence: 0 } });
    expect(retry.duplicate).toBe(true);
    expect(retry.seq).toBe(first.seq);
    expect(await readAll(bus.nc, bus.names, { tenant: "local", sessionId: "s4" })).toHaveLength(1);
  });

  it("log - a reader refuses an unknown non-ignorable type and skips an ignorable one", async () => {
    const w = await SessionLogWriter.open(bus.nc, bus.names, { tenant: "local", sessionId: "s5" });
    await w.append(created("s5"));
    const js = jetstream(bus.nc);
    const subject = bus.names.logSubject("local", "s5");
    const jsm = await jetstreamManager(bus.nc);
    const last = await jsm.streams.getMessage(bus.names.logStream, { last_by_subj: subject });
    const ack = await js.publish(subject, Event.encode(Event.fromPartial({ seq: 2, type: "future/hint", source: "v2", ignorable: true })).finish(), { expect: { lastSubjectSequence: last!.seq } });
    expect((await readAll(bus.nc, bus.names, { tenant: "local", sessionId: "s5" })).map((e) => e.type)).toEqual(["session/created"]);
    await js.publish(subject, Event.encode(Event.fromPartial({ seq: 3, type: "future/thing", source: "v2" })).finish(), { expect: { lastSubjectSequence: ack.seq } });
    const err = await readAll(bus.nc, bus.names, { tenant: "local", sessionId: "s5" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UnknownEventTypeError);
    expect((err as Error).message).toMatch(/event 3 has type "future\/thing".*not ignorable.*upgrade Tack/);
  });

  it("log - a log written in an unknown format version is refused, naming the newer side", async () => {
    const w = await SessionLogWriter.open(bus.nc, bus.names, { tenant: "local", sessionId: "s6" });
    await w.append(draft("sessionCreated", { sessionId: "s6", tenant: "local", mode: "standard", model: "m", workspace: "/w", formatVersion: 99, title: "" }, "test"));
    await expect(readAll(bus.nc, bus.names, { tenant: "local", sessionId: "s6" })).rejects.toThrow(/v99 is not supported.*newer than this Tack/);
  });

  it("log - a following reader resumes from a seq and sees new events", async () => {
    const w = await SessionLogWriter.open(bus.nc, bus.names, { tenant: "local", sessionId: "s7" });
    await w.append(created("s7"), draft("userMessage", { text: "1" }, "g"), draft("userMessage", { text: "2" }, "g"));
    const ac = new AbortController();
    const seen: number[] = [];
    const reading = (async () => {
      for await (const e of readSession(bus.nc, bus.names, { tenant: "local", sessionId: "s7" }, { fromSeq: 2, follow: true, signal: ac.signal })) {
        seen.push(e.seq);
        if (e.seq === 4) ac.abort();
      }
    })();
    await w.append(draft("userMessage", { text: "3" }, "g"));
    await reading;
    expect(seen).toEqual([2, 3, 4]);
  });

  it("log - an oversized event is refused with a clear error and nothing is written", async () => {
    const w = await SessionLogWriter.open(bus.nc, bus.names, { tenant: "local", sessionId: "s8" });
    await w.append(created("s8"));
    await expect(w.append(draft("userMessage", { text: "x".repeat(1_000_000) }, "g"))).rejects.toThrow(/over the 921600-byte limit/);
    expect(w.lastSeq).toBe(1);
    const [e] = await w.append(draft("userMessage", { text: "small" }, "g"));
    expect(e!.seq).toBe(2);
  });
});

describe("projection", () => {
  it("projection - derives the request from the model-visible events only", () => {
    const ev = (seq: number, payload: Event["payload"]) => Event.fromPartial({ seq, payload });
    const r = deriveRequest([
      ev(1, { $case: "requestHeader", value: { reason: "initial", model: "m", systemPrompt: "sys", tools: [], temperature: 0, maxTokens: 100 } }),
      ev(2, { $case: "userMessage", value: { text: "hi" } }),
      ev(3, { $case: "turnStart", value: { turn: 1, userMessageSeq: 2 } }),
      ev(4, { $case: "assistantMessage", value: { turn: 1, step: 1, content: "", reasoningContent: "", toolCalls: [{ id: "c1", name: "bash", arguments: "{}" }], finishReason: "tool_calls" } }),
      ev(5, { $case: "toolResult", value: { callId: "c1", name: "bash", content: "ok", isError: false, durationMs: 1, synthesized: false, spillObject: "", fullBytes: 0, images: [] } }),
    ]);
    expect(r.systemPrompt).toBe("sys");
    expect(r.messages.map((m) => [m.role, m.content, m.toolCallId])).toEqual([
      ["ROLE_USER", "hi", ""], ["ROLE_ASSISTANT", "", ""], ["ROLE_TOOL", "ok", "c1"],
    ]);
  });

  it("projection - a tool result's image references reach its message, in the serialized request too, and survive pruning", () => {
    const ev = (seq: number, payload: Event["payload"]) => Event.fromPartial({ seq, payload });
    const image = { mimeType: "image/png", object: "t.s.c1.image1", bytes: 2048, width: 64, height: 32 };
    const events = [
      ev(1, { $case: "requestHeader", value: { reason: "initial", model: "m", systemPrompt: "", tools: [], temperature: 0, maxTokens: 100 } }),
      ev(2, { $case: "userMessage", value: { text: "look" } }),
      ev(3, { $case: "assistantMessage", value: { turn: 1, step: 1, content: "", reasoningContent: "", toolCalls: [{ id: "c1", name: "read", arguments: "{}" }], finishReason: "tool_calls" } }),
      ev(4, { $case: "toolResult", value: ToolResult.fromPartial({ callId: "c1", name: "read", content: `[image: a.png]${"x".repeat(1000)}`, images: [image] }) }),
    ];
    const before = deriveRequest(events);
    expect(before.messages.at(-1)!.images).toEqual([image]);
    expect(serializeRequest(before)).toContain('"object":"t.s.c1.image1"');
    const pruned = deriveRequest([...events, ev(5, { $case: "contextPruned", value: { upToSeq: 4, headChars: 10, tailChars: 10, resultsPruned: 1, charsSaved: 0 } })]);
    expect(pruned.messages.at(-1)!.content).not.toBe(before.messages.at(-1)!.content);
    expect(pruned.messages.at(-1)!.images).toEqual([image]);
  });
});
