// CompactSession (`POST /v1/sessions/{id}/compact`, `/compact` in `tack chat`) against the real
// loop and llm service with a scripted model (real-loop.ts): the conversation is summarized now,
// with the same events as when the context fills up, and the context meter shrinks.
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Bus } from "@tack/bus";
import { readAll } from "@tack/log";
import { type Gateway } from "@tack/gateway-service";
import { waitFor } from "@tack/testkit";
import { SUMMARY_HEADING } from "@tack/loop-service";
import { GatewayStack, type RealLoop } from "./real-loop.js";

const KEY_ACME = `acme-${randomBytes(16).toString("hex")}`;
const KEY_GLOBEX = `globex-${randomBytes(16).toString("hex")}`;

let stack: GatewayStack;
let bus: Bus;
let loop: RealLoop;
let gateway: Gateway;
let workspace: string;

beforeAll(async () => {
  stack = await GatewayStack.start({ name: "compact", keys: { acme: KEY_ACME, globex: KEY_GLOBEX } });
  ({ bus, loop, gateway, workspace } = stack);
});

afterAll(async () => {
  await stack?.stop();
});

// eslint-disable-next-line @typescript-eslint/no-explicit-any
async function call(method: string, path: string, body?: unknown, key = KEY_ACME): Promise<{ status: number; json: any }> {
  const res = await fetch(`${gateway.url}${path}`, {
    method, headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : undefined };
}

async function session(model: string, sandboxMode?: string): Promise<string> {
  const created = await call("POST", "/v1/sessions", { workspace, model, ...(sandboxMode ? { sandbox_mode: sandboxMode } : {}) });
  expect(created.status, JSON.stringify(created.json)).toBe(201);
  return created.json.id as string;
}

const log = (id: string) => readAll(bus.nc, bus.names, { tenant: "acme", sessionId: id });

describe("compact", () => {
  it("compact - a session with turns is summarized now: context/summarized replaces the conversation, the context meter shrinks, the next turn reads the summary", async () => {
    const id = await session(loop.model);
    const nothing = await call("POST", `/v1/sessions/${id}/compact`, {});
    expect(nothing.status).toBe(200);
    expect(nothing.json).toMatchObject({ compacted: false, seq: 0, note: expect.stringContaining("nothing to compact") });

    // Three turns with long messages: a conversation worth compacting.
    for (const n of [1, 2, 3]) {
      expect((await call("POST", `/v1/sessions/${id}/messages`, { text: `turn ${n}: ${"please keep this detail in mind. ".repeat(60)}` })).status).toBe(202);
      await loop.idle("acme", id);
    }
    const before = await call("GET", `/v1/sessions/${id}/context`);
    expect(before.status).toBe(200);
    const events = await log(id);
    const lastSeq = events.at(-1)!.seq;
    // The summary replaces what the model sees, up to the last reply.
    const lastReply = events.filter((e) => e.type === "assistant/message").at(-1)!.seq;

    const compacted = await call("POST", `/v1/sessions/${id}/compact`, { instructions: "keep the turn numbers" });
    expect(compacted.status, JSON.stringify(compacted.json)).toBe(200);
    expect(compacted.json).toMatchObject({ compacted: true, note: "", seq: lastSeq + 2, to_seq: lastReply, from_seq: events.find((e) => e.type === "user/message")!.seq });
    expect(compacted.json.tokens_after).toBeLessThan(compacted.json.tokens_before);
    const after = await log(id);
    expect(after.slice(events.length).map((e) => e.type)).toEqual(["user/message", "context/summarized"]);
    const summary = after[events.length]!;
    expect(summary.payload?.$case === "userMessage" && summary.payload.value.text).toBe(`${SUMMARY_HEADING}done 4`);
    expect(summary.surface).toMatchObject({ replaceFromSeq: compacted.json.from_seq, replaceToSeq: lastReply, origin: "compaction:summary" });
    const summarized = after.at(-1)!;
    expect(summarized.payload).toMatchObject({ $case: "contextSummarized", value: { fromSeq: compacted.json.from_seq, toSeq: lastReply, summarySeq: lastSeq + 1, model: expect.stringContaining("scripted:") } });

    const meter = await call("GET", `/v1/sessions/${id}/context`);
    expect(meter.json.tokens.conversation).toBeLessThan(before.json.tokens.conversation / 10);
    expect(meter.json.tokens.total).toBeLessThan(before.json.tokens.total);

    // Compacting again right away: the model has not replied since the summary.
    const again = await call("POST", `/v1/sessions/${id}/compact`, {});
    expect(again.json).toMatchObject({ compacted: false, note: expect.stringContaining("since the last summary") });
    expect(await log(id)).toHaveLength(after.length);

    // The next turn goes on from the summary: the model saw it and nothing of the earlier turns.
    expect((await call("POST", `/v1/sessions/${id}/messages`, { text: "go on" })).status).toBe(202);
    // (Not loop.idle: the summary is a user/message that starts no turn.)
    const ended = await waitFor("turn 4 to end", async () => {
      const all = await log(id);
      return all.filter((e) => e.type === "turn/end").length === 4 && all;
    }, { timeoutMs: 15_000, intervalMs: 25 });
    const next = ended.filter((e) => e.type === "assistant/message").at(-1)!;
    expect(next.payload?.$case === "assistantMessage" && next.payload.value.content).toBe("done 1");
  });

  it("compact - refused with 409 while a turn runs (it waits for an approval); another tenant's session is 404", async () => {
    const id = await session(loop.askModel, "read-only");
    await loop.ask("acme", id);
    const busy = await call("POST", `/v1/sessions/${id}/compact`, {});
    expect(busy.status).toBe(409);
    expect(busy.json.error).toMatchObject({ code: "loop.compact_busy", message: expect.stringContaining("wait for the turn to end or cancel it") });
    const events = await log(id);
    expect(events.some((e) => e.type === "context/summarized")).toBe(false);

    const foreign = await call("POST", `/v1/sessions/${id}/compact`, {}, KEY_GLOBEX);
    expect(foreign.status).toBe(404);
    expect(foreign.json.error.code).toBe("gateway.session_not_found");
    const unknown = await call("POST", "/v1/sessions/nope/compact", {});
    expect(unknown.status).toBe(404);
    const tooLong = await call("POST", `/v1/sessions/${id}/compact`, { instructions: "x".repeat(2001) });
    expect(tooLong.status).toBe(400);

    // Once the turn has ended (cancelled), the session can be compacted.
    expect((await call("POST", `/v1/sessions/${id}/cancel`, {})).json).toMatchObject({ cancelled: true });
    await loop.idle("acme", id);
    const compacted = await call("POST", `/v1/sessions/${id}/compact`, {});
    expect(compacted.status, JSON.stringify(compacted.json)).toBe(200);
    expect(compacted.json.compacted).toBe(true);
  });
});
