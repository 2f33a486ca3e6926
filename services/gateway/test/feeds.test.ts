// The gateway's session feeds against a real JetStream log: views that include every event stored
// before the call, followers that start anywhere and never lose or repeat an event, one consumer
// per session however many follow it.
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { JetStreamManager } from "@nats-io/jetstream";
import { Bus } from "@tack/bus";
import { draft, ensureLogStream, FORMAT_VERSION, SessionLogWriter, UnknownEventTypeError } from "@tack/log";
import { Event } from "@tack/proto";
import { removeNamespace } from "@tack/testkit";
import { SessionFeeds } from "../src/feeds.js";
import { restTodo, restWaiting } from "../src/gen/rest-json.js";
import type { SessionRow } from "../src/store.js";

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
let bus: Bus;
let jsm: JetStreamManager;

beforeAll(async () => {
  bus = await Bus.connect({ url: NATS_URL, namespace: `t${randomBytes(5).toString("hex")}`, name: "feeds-test" });
  jsm = await ensureLogStream(bus.nc, bus.names);
});
afterAll(async () => {
  await removeNamespace(bus.nc, bus.names.namespace).catch(() => undefined);
  await bus.close();
});

let counter = 0;
/** A new session with a `session/created` event and `messages` user messages. */
async function session(messages: number): Promise<{ row: SessionRow; writer: SessionLogWriter }> {
  const id = `s${++counter}_${randomBytes(3).toString("hex")}`;
  const row: SessionRow = {
    id, tenant: "acme", title: "", model: "scripted:x.json", mode: "standard", workspace: "/w", sandbox_mode: "workspace-write",
    approval_policy: "ask", created_at: "", updated_at: "", archived: 0,
  };
  const writer = await SessionLogWriter.open(bus.nc, bus.names, { tenant: row.tenant, sessionId: id });
  await writer.append(draft("sessionCreated", { sessionId: id, tenant: row.tenant, mode: "code", model: row.model, workspace: "/w", formatVersion: FORMAT_VERSION, title: "" }, "loop"));
  if (messages > 0) await writer.append(...Array.from({ length: messages }, (_, i) => draft("userMessage", { text: `m${i + 2}` }, "gateway")));
  return { row, writer };
}

/** Collects `count` events of a follower, then stops it. */
async function take(feeds: SessionFeeds, row: SessionRow, fromSeq: number, count: number, pace?: () => Promise<void>): Promise<number[]> {
  const stop = new AbortController();
  const seqs: number[] = [];
  for await (const batch of feeds.follow(row, fromSeq, stop.signal)) {
    for (const event of batch) {
      seqs.push(event.seq);
      if (seqs.length === count) stop.abort();
    }
    if (!stop.signal.aborted && pace) await pace();
  }
  return seqs;
}

const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

async function consumersOnLog(): Promise<number> {
  return (await jsm.streams.info(bus.names.logStream)).state.consumer_count;
}

describe("session feeds", () => {
  it("feeds - a view holds every event stored before it was asked for, without a new consumer per view", async () => {
    const feeds = new SessionFeeds(bus, jsm);
    try {
      const { row, writer } = await session(2);
      expect((await feeds.view(row)).lastSeq).toBe(3);
      const consumers = await consumersOnLog();
      for (let i = 0; i < 20; i++) {
        await writer.append(draft("planMode", { on: i % 2 === 0 }, "loop"));
        // Asked right after the append was acknowledged: never one behind.
        const view = await feeds.view(row);
        expect(view.lastSeq).toBe(4 + i);
        expect(view.state.planMode).toBe(i % 2 === 0);
      }
      expect(view0(await feeds.view(row))).toEqual({ mode: "code", lastSeq: 23 });
      expect(await consumersOnLog()).toBe(consumers);
      expect(feeds.size).toBe(1);
    } finally {
      feeds.close();
    }
  });

  it("feeds - a view's state in the API's form: task list, what waits for a person (in the order asked) until decided or the turn ends", async () => {
    const feeds = new SessionFeeds(bus, jsm);
    try {
      const { row, writer } = await session(1);
      await writer.append(
        draft("turnStart", { turn: 1, userMessageSeq: 2 }, "loop"),
        draft("todoUpdated", { callId: "t1", items: [{ id: "", content: "a", status: "pending" }, { id: "2", content: "b", status: "completed" }] }, "loop"),
        draft("questionAsked", { callId: "q1", questions: [{ header: "H", question: "Q?", multiSelect: true, options: [{ label: "x", description: "d" }] }] }, "loop"),
        draft("approvalAsked", { callId: "a1", toolName: "bash", operation: "ls", requestedMode: "danger-full-access", justification: "j" }, "loop"),
        draft("planSubmitted", { callId: "p1", plan: "P" }, "loop"),
      );
      const { state } = await feeds.view(row);
      // In the REST form the generated encoders write.
      expect(state.todos.map(restTodo)).toEqual([{ content: "a", status: "pending" }, { id: "2", content: "b", status: "completed" }]);
      expect(state.waiting.map(restWaiting)).toEqual([
        { kind: "question", call_id: "q1", seq: 5, questions: [{ header: "H", question: "Q?", multi_select: true, options: [{ label: "x", description: "d" }] }] },
        { kind: "approval", call_id: "a1", tool: "bash", operation: "ls", requested_mode: "danger-full-access", justification: "j", approval_kind: "sandbox", seq: 6 },
        { kind: "plan", call_id: "p1", plan: "P", seq: 7 },
      ]);
      await writer.append(draft("approvalDecided", { callId: "a1", decision: "allow_once", decidedBy: "me" }, "loop"));
      expect((await feeds.view(row)).state.waiting.map((w) => w.callId)).toEqual(["q1", "p1"]);
      // No one can answer a call of an ended turn: it no longer waits.
      await writer.append(draft("turnEnd", { turn: 1, reason: "error", steps: 1 }, "loop"));
      expect((await feeds.view(row)).state.waiting).toEqual([]);
    } finally {
      feeds.close();
    }
  });

  it("feeds - views asked at once share the check of the log's end, and each still holds what was stored before it was asked", async () => {
    const feeds = new SessionFeeds(bus, jsm);
    try {
      const { row, writer } = await session(0);
      const pending: Promise<void>[] = [];
      for (let i = 0; i < 30; i++) {
        const [stored] = await writer.append(draft("userMessage", { text: `n${i}` }, "gateway"));
        // Views asked while earlier ones are still waiting for their check.
        for (let j = 0; j < 20; j++) pending.push(feeds.view(row).then((view) => expect(view.lastSeq).toBeGreaterThanOrEqual(stored!.seq)));
      }
      await Promise.all(pending);
      expect((await feeds.view(row)).lastSeq).toBe(31);
    } finally {
      feeds.close();
    }
  });

  it("feeds - followers from the start, the middle and past the end each get every event once, in order, live ones too", async () => {
    // The feed keeps only 8 events: followers starting earlier read the rest from the log first.
    const feeds = new SessionFeeds(bus, jsm, { recentEvents: 8 });
    try {
      const { row, writer } = await session(39);
      await feeds.view(row);
      const followers = [take(feeds, row, 1, 60), take(feeds, row, 20, 41), take(feeds, row, 38, 23), take(feeds, row, 45, 16)];
      for (let i = 0; i < 20; i++) await writer.append(draft("userMessage", { text: `live ${i}` }, "gateway"));
      const [a, b, c, d] = await Promise.all(followers);
      expect(a).toEqual(range(1, 60));
      expect(b).toEqual(range(20, 60));
      expect(c).toEqual(range(38, 60));
      expect(d).toEqual(range(45, 60));
    } finally {
      feeds.close();
    }
  });

  it("feeds - 200 followers of one session share one consumer", async () => {
    const feeds = new SessionFeeds(bus, jsm);
    try {
      const { row, writer } = await session(0);
      const before = await consumersOnLog();
      const followers = Array.from({ length: 200 }, () => take(feeds, row, 2, 5));
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(await consumersOnLog()).toBe(before + 1);
      await writer.append(...Array.from({ length: 5 }, (_, i) => draft("userMessage", { text: `x${i}` }, "gateway")));
      for (const seqs of await Promise.all(followers)) expect(seqs).toEqual(range(2, 6));
    } finally {
      feeds.close();
    }
  });

  it("feeds - a follower that falls behind its queue reads the log itself and loses nothing", async () => {
    const feeds = new SessionFeeds(bus, jsm, { recentEvents: 4, followerQueue: 3 });
    try {
      const { row, writer } = await session(0);
      const slow = take(feeds, row, 1, 101, () => new Promise((resolve) => setTimeout(resolve, 2)));
      for (let i = 0; i < 10; i++) await writer.append(...Array.from({ length: 10 }, (_, j) => draft("userMessage", { text: `${i}.${j}` }, "gateway")));
      expect(await slow).toEqual(range(1, 101));
    } finally {
      feeds.close();
    }
  });

  it.each([
    ["its backlog fits (followerQueue 1,000)", 1000],
    ["it falls back to the log (followerQueue 5: a burst of 10 while paused is too many)", 5],
  ])("feeds - a sink that is not drained gets every event once, in order, when %s", async (_, followerQueue) => {
    const feeds = new SessionFeeds(bus, jsm, { recentEvents: 4, followerQueue });
    try {
      const { row, writer } = await session(0);
      const got: number[] = [];
      const batchSizes: number[] = [];
      let release: (() => void) | undefined;
      let pauses = 0;
      const stop = new AbortController();
      const streaming = feeds.stream(row, 1, stop.signal, {
        write: (batch) => {
          got.push(...batch.map((e) => e.seq));
          batchSizes.push(batch.length);
          if (got.length >= 61) stop.abort();
          // Every other write, the first included, leaves the sink "full" until the test drains it.
          return batchSizes.length % 2 === 0;
        },
        drained: () => {
          pauses += 1;
          return new Promise<void>((resolve) => { release = resolve; });
        },
      });
      // Drains the sink every 20 ms, as a socket that empties slowly would.
      const drainer = setInterval(() => { release?.(); release = undefined; }, 20);
      try {
        for (let i = 0; i < 6; i++) await writer.append(...Array.from({ length: 10 }, (_, j) => draft("userMessage", { text: `${i}.${j}` }, "gateway")));
        await streaming;
      } finally {
        clearInterval(drainer);
      }
      expect(got).toEqual(range(1, 61));
      expect(pauses).toBeGreaterThan(0);
      // Live events come in batches (a burst of appends read at once), not one write per event.
      expect(Math.max(...batchSizes)).toBeGreaterThan(1);
    } finally {
      feeds.close();
    }
  });

  it("feeds - a history read from the feed holds every event stored before it, and is refused once the feed let older ones go", async () => {
    const feeds = new SessionFeeds(bus, jsm, { recentEvents: 8 });
    try {
      const { row, writer } = await session(3);
      expect((await feeds.history(row, 1))?.map((e) => e.seq)).toEqual([1, 2, 3, 4]);
      await writer.append(draft("userMessage", { text: "just stored" }, "gateway"));
      expect((await feeds.history(row, 3))?.map((e) => e.seq)).toEqual([3, 4, 5]);
      expect(await feeds.history(row, 9)).toEqual([]);
      await writer.append(...Array.from({ length: 10 }, (_, i) => draft("userMessage", { text: `more ${i}` }, "gateway")));
      // 15 events, 8 kept (8..15): from 1 the caller must read the log; from 8 on the feed answers.
      expect(await feeds.history(row, 1)).toBeUndefined();
      expect((await feeds.history(row, 8))?.map((e) => e.seq)).toEqual(range(8, 15));
    } finally {
      feeds.close();
    }
  });

  it("feeds - followers of a forgotten (deleted) session end with the reason; an idle feed is closed", async () => {
    const feeds = new SessionFeeds(bus, jsm, { idleMs: 200 });
    try {
      const { row } = await session(1);
      const follower = feeds.follow(row, 1, new AbortController().signal);
      const seqs: number[] = [];
      while (seqs.length < 2) seqs.push(...((await follower.next()).value ?? []).map((e: Event) => e.seq));
      expect(seqs).toEqual([1, 2]);
      const waiting = follower.next();
      feeds.forget(row, new Error("session was deleted"));
      await expect(waiting).rejects.toThrow("session was deleted");
      expect(feeds.size).toBe(0);
      await feeds.view(row);
      expect(feeds.size).toBe(1);
      await expect.poll(() => feeds.size, { timeout: 2000 }).toBe(0);
    } finally {
      feeds.close();
    }
  });

  it("feeds - a log event of an unknown type that is not ignorable fails the view with the type named", async () => {
    const feeds = new SessionFeeds(bus, jsm);
    try {
      const { row } = await session(0);
      const subject = bus.names.logSubject(row.tenant, row.id);
      const alien = Event.encode(Event.fromPartial({ seq: 2, type: "future/thing", ignorable: false }) as Event).finish();
      await bus.nc.request(subject, alien);
      const failed = feeds.view(row);
      await expect(failed).rejects.toBeInstanceOf(UnknownEventTypeError);
      await expect(failed).rejects.toThrow("future/thing");
    } finally {
      feeds.close();
    }
  });
});

function view0(view: { state: { mode: string | undefined }; lastSeq: number }) {
  return { mode: view.state.mode, lastSeq: view.lastSeq };
}
