import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jetstreamManager } from "@nats-io/jetstream";
import { Bus } from "@tack/bus";
import { ensureLogStream } from "@tack/log";
import { removeNamespace } from "@tack/testkit";

// The machine's NATS is a single server: more than one replica must be refused, never stored as a
// number the server cannot honour (replicas on a real cluster: test/e2e/jetstream-cluster.test.ts).
const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
let bus: Bus;

beforeAll(async () => {
  bus = await Bus.connect({ url: NATS_URL, namespace: `t${randomBytes(5).toString("hex")}`, name: "log-replicas-test" });
});
afterAll(async () => {
  await removeNamespace(bus.nc, bus.names.namespace);
  await bus.close();
});

describe("log stream replicas", () => {
  it("log - replicas other than 1, 3 or 5 are refused before anything is created", async () => {
    await expect(ensureLogStream(bus.nc, bus.names, { replicas: 2 })).rejects.toMatchObject({ code: "log.bad_replicas", message: expect.stringContaining("log replicas 2 is not 1, 3 or 5") });
    const jsm = await jetstreamManager(bus.nc);
    await expect(jsm.streams.info(bus.names.logStream)).rejects.toThrow(/stream not found/);
  });

  it("log - a single server refuses 3 replicas for a new stream and for an existing one, naming the fix", async () => {
    const refusal = { code: "log.replicas_unavailable", message: expect.stringMatching(/cannot keep the log stream with 3 replicas .*run a JetStream cluster of at least 3 servers, or set log\.replicas: 1/) };
    await expect(ensureLogStream(bus.nc, bus.names, { replicas: 3 })).rejects.toMatchObject(refusal);
    const jsm = await ensureLogStream(bus.nc, bus.names, { replicas: 1 });
    await expect(ensureLogStream(bus.nc, bus.names, { replicas: 3 })).rejects.toMatchObject(refusal);
    expect((await jsm.streams.info(bus.names.logStream)).config.num_replicas).toBe(1);
  });
});
