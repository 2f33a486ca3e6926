import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Bus } from "@tack/bus";
import { draft, ensureLogStream, FORMAT_VERSION, readAll, SessionLogWriter } from "@tack/log";
import { startThrowawayNats, type ThrowawayNats } from "@tack/testkit";

let nats: ThrowawayNats;
let bus: Bus;

beforeAll(async () => {
  nats = await startThrowawayNats();
  bus = await Bus.connect({ url: nats.url, name: "restart-test" });
  await ensureLogStream(bus.nc, bus.names);
});
afterAll(async () => {
  await bus?.close();
  await nats?.stop();
});

describe("broker restart", () => {
  it("log - appends made across a NATS restart are neither lost nor duplicated", async () => {
    const w = await SessionLogWriter.open(bus.nc, bus.names, { tenant: "local", sessionId: "r1" });
    await w.append(draft("sessionCreated", { sessionId: "r1", tenant: "local", mode: "standard", model: "m", workspace: "/w", formatVersion: FORMAT_VERSION, title: "" }, "test"));
    await nats.restart();
    // The writer retries with the same Msg-Id until the server is back.
    await w.append(draft("userMessage", { text: "after restart" }, "test"), draft("userMessage", { text: "and again" }, "test"));
    const events = await readAll(bus.nc, bus.names, { tenant: "local", sessionId: "r1" });
    expect(events.map((e) => [e.seq, e.type])).toEqual([[1, "session/created"], [2, "user/message"], [3, "user/message"]]);
    // A container restart alone took most of a minute on a loaded CI machine; the writer's retries outlast it.
  }, 120_000);
});
