import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Bus } from "@tack/bus";
import { Role, Surface_Kind, type Event, type Surface } from "@tack/proto";
import { deriveRequest, draft, materialize, parseSpillPath, Projection, pruneText, serializeRequest, SpillBucket, spillObjectName, spillPath } from "@tack/log";

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";

/** A log as events, seq by seq, from drafts. */
function log(...drafts: ReturnType<typeof draft>[]): Event[] {
  return drafts.map((d, i) => materialize(d, i + 1, { seconds: 1_800_000_000, nanos: 0 }));
}

const header = draft("requestHeader", { reason: "initial", model: "m", systemPrompt: "sys", tools: [], temperature: 0, maxTokens: 100 }, "loop");
const user = (text: string, surface?: Surface) => draft("userMessage", { text }, "gateway", surface);
const assistant = (id: string) => draft("assistantMessage", { content: "", toolCalls: [{ id, name: "bash", arguments: "{}" }], finishReason: "tool_calls" }, "loop");
const result = (id: string, content: string) => draft("toolResult", { callId: id, name: "bash", content }, "loop");
const pruned = (upToSeq: number, headChars = 10, tailChars = 5) => draft("contextPruned", { upToSeq, headChars, tailChars }, "loop");
const replace = (from: number, to: number): Surface => ({ kind: Surface_Kind.KIND_REPLACE, replaceFromSeq: from, replaceToSeq: to, sourceSeqs: [], origin: "compaction:summary" });

/** The request after each prefix of the log, kept incrementally, next to one derived from scratch. */
function bothWays(events: Event[]): void {
  const incremental = new Projection();
  for (let i = 0; i < events.length; i++) {
    incremental.apply(events[i]!);
    if (i === 0) continue;
    expect(serializeRequest(incremental.request())).toBe(serializeRequest(deriveRequest(events.slice(0, i + 1))));
  }
}

describe("projection - prune", () => {
  const long = (c: string) => `${c.repeat(20)}${"-".repeat(100)}${c.repeat(20)}`; // 140 characters

  it("projection - results up to up_to_seq longer than head + tail show as head, a count of what was left out, and tail", () => {
    const events = log(
      header, user("go"), assistant("a"), result("a", long("a")), assistant("b"), result("b", "short"), assistant("c"), result("c", long("c")),
      pruned(6), assistant("d"), result("d", long("d")),
    );
    const messages = deriveRequest(events).messages;
    expect(messages.map((m) => m.content)).toEqual([
      "go", "", `${"a".repeat(10)}\n\n[... 125 characters of this tool result left out to save context; run the tool again if you need them ...]\n\n${"a".repeat(5)}`,
      "", "short", "", long("c"), "", long("d"),
    ]);
    // The log keeps the whole content.
    const logged = events.find((e) => e.payload?.$case === "toolResult" && e.payload.value.callId === "a")!;
    expect(logged.payload?.$case === "toolResult" && logged.payload.value.content).toBe(long("a"));
    bothWays(events);
  });

  it("projection - planPrune predicts exactly what the event does, and a later prune never cuts a result twice", () => {
    const events = log(header, user("go"), assistant("a"), result("a", long("a")), assistant("c"), result("c", long("c")));
    const p = new Projection();
    for (const e of events) p.apply(e);
    const before = p.messages.reduce((n, m) => n + m.content.length, 0);
    const plan = p.planPrune(4, 10, 5);
    p.apply(materialize(pruned(4), 7, { seconds: 0, nanos: 0 }));
    expect(plan).toEqual({ resultsPruned: 1, charsSaved: before - p.messages.reduce((n, m) => n + m.content.length, 0) });
    expect(p.entries().map((e) => [e.seq, e.pruned])).toEqual([[2, false], [3, false], [4, true], [5, false], [6, false]]);
    // A wider prune later shortens only the result not pruned yet; the first keeps its bytes (the cached prefix).
    const first = p.messages[2]!.content;
    expect(p.planPrune(6, 3, 3)).toMatchObject({ resultsPruned: 1 });
    p.apply(materialize(pruned(6, 3, 3), 8, { seconds: 0, nanos: 0 }));
    expect(p.messages[2]!.content).toBe(first);
    expect(p.messages[4]!.content).toMatch(/^ccc\n\n\[\.\.\. 134 characters/);
    expect(p.planPrune(6, 3, 3)).toEqual({ resultsPruned: 0, charsSaved: 0 });
  });

  it("projection - a result barely over head + tail is left whole, since the marker would make it longer", () => {
    expect(pruneText("x".repeat(20), 10, 5)).toBe("x".repeat(20));
    const events = log(header, user("go"), assistant("a"), result("a", "x".repeat(20)), pruned(4));
    expect(deriveRequest(events).messages[2]!.content).toBe("x".repeat(20));
  });

  it("projection - pruneText never splits a surrogate pair", () => {
    const text = `${"😀".repeat(100)}`;
    const cut = pruneText(text, 11, 11);
    expect(cut).not.toMatch(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/);
    expect(cut.startsWith("😀".repeat(5))).toBe(true);
    expect(cut.endsWith("😀".repeat(5))).toBe(true);
  });
});

describe("projection - summary", () => {
  it("projection - a summary replaces its range in place; a later summary replaces the first one and what followed", () => {
    const events = log(
      header, user("task"), assistant("a"), result("a", "A"), assistant("b"), result("b", "B"),
      user("summary one", replace(2, 6)), draft("contextSummarized", { fromSeq: 2, toSeq: 6, summarySeq: 7, model: "m" }, "loop"),
      assistant("c"), result("c", "C"),
      user("summary two", replace(7, 10)),
    );
    expect(deriveRequest(events.slice(0, 10)).messages.map((m) => [m.role, m.content])).toEqual([
      [Role.ROLE_USER, "summary one"], [Role.ROLE_ASSISTANT, ""], [Role.ROLE_TOOL, "C"],
    ]);
    expect(deriveRequest(events).messages.map((m) => m.content)).toEqual(["summary two"]);
    bothWays(events);
  });
});

describe("spill bucket", () => {
  let bus: Bus;
  beforeAll(async () => {
    bus = await Bus.connect({ url: NATS_URL, namespace: `t${randomBytes(5).toString("hex")}`, name: "spill-test" });
  });
  afterAll(async () => {
    await (await SpillBucket.open(bus.nc, bus.names))?.destroy();
    await bus.close();
  });

  it("spill - a session reads back its whole result by call id; another session or tenant finds nothing", async () => {
    expect(await SpillBucket.open(bus.nc, bus.names)).toBeUndefined();
    const bucket = await SpillBucket.ensure(bus.nc, bus.names);
    const whole = Buffer.from("r".repeat(300_000));
    const address = { tenant: "acme", sessionId: "s1" };
    expect(await bucket.put(address, "call_1", whole)).toBe("acme.s1.call_1");
    const reopened = (await SpillBucket.open(bus.nc, bus.names))!;
    expect(Buffer.from((await reopened.get(address, "call_1"))!).equals(whole)).toBe(true);
    expect(await reopened.get({ tenant: "acme", sessionId: "s2" }, "call_1")).toBeUndefined();
    expect(await reopened.get({ tenant: "other", sessionId: "s1" }, "call_1")).toBeUndefined();
    // A call id cannot climb out of the session's prefix.
    expect(spillObjectName({ tenant: "acme", sessionId: "s2" }, "../s1.call_1")).toBe("acme.s2.../s1.call_1");
  });

  it("spill - the read path names a call id and nothing else", () => {
    expect(spillPath("call_1")).toBe("tack-spill:call_1");
    expect(parseSpillPath("tack-spill:call_1")).toBe("call_1");
    expect(parseSpillPath("src/tack-spill:call_1")).toBeUndefined();
  });
});
