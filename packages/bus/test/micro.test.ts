// Micro-service discovery on the shared NATS: registration, PING/INFO/STATS, and the namespace filter.
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Bus, discoverMicro, microName, microSubjects, registerMicro, TACK_VERSION } from "@tack/bus";

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const namespace = `t${randomBytes(5).toString("hex")}`;
const buses: Bus[] = [];
const connect = async (ns = namespace) => {
  const bus = await Bus.connect({ url: NATS_URL, namespace: ns, name: "micro-test" });
  buses.push(bus);
  return bus;
};
let observer: Bus;

beforeAll(async () => {
  observer = await connect();
});
afterAll(async () => {
  await Promise.all(buses.map((bus) => bus.close()));
});

describe("micro", () => {
  it("micro - registered instances answer PING, INFO and STATS with their namespace, pid and host; other namespaces are left out", async () => {
    const first = await registerMicro(await connect(), { service: "tools", description: "the agent's tools" });
    const second = await registerMicro(await connect(), { service: "tools", description: "the agent's tools", metadata: { replica: "2" } });
    const elsewhere = await registerMicro(await connect(`${namespace}x`), { service: "tools", description: "another deployment's" });
    const loop = await registerMicro(await connect(), { service: "loop", description: "runs sessions", version: "1.2.3" });

    const ping = await discoverMicro(observer, { service: "tools" });
    expect(ping.map((answer) => answer.id).sort()).toEqual([first.info().id, second.info().id].sort());
    for (const answer of ping) {
      expect(answer).toMatchObject({ type: "io.nats.micro.v1.ping_response", name: "tack-tools", version: TACK_VERSION });
      expect(answer.instance).toMatchObject({ service: "tools", name: "tack-tools", namespace, pid: process.pid, host: hostname() });
    }
    expect(ping.find((answer) => answer.id === second.info().id)!.instance.metadata.replica).toBe("2");

    const info = await discoverMicro(observer, { verb: "INFO" });
    expect(info.map((answer) => `${answer.name} ${answer.version} ${answer.description}`).sort()).toEqual([
      "tack-loop 1.2.3 runs sessions", "tack-tools 0.1.0 the agent's tools", "tack-tools 0.1.0 the agent's tools",
    ]);
    const stats = await discoverMicro(observer, { verb: "STATS", service: "loop" });
    expect(stats).toHaveLength(1);
    expect(stats[0]).toMatchObject({ type: "io.nats.micro.v1.stats_response", id: loop.info().id });
    expect(Date.parse(stats[0]!.started)).toBeGreaterThan(0);

    const everywhere = await discoverMicro(observer, { service: "tools", namespace: null });
    expect(everywhere.map((answer) => answer.id)).toContain(elsewhere.info().id);

    // A stopped registration no longer answers.
    await second.stop();
    expect((await discoverMicro(observer, { service: "tools" })).map((answer) => answer.id)).toEqual([first.info().id]);
  });

  it("micro - nobody registered is an empty list; a bad name is refused; the permission subjects cover every discovery subject", async () => {
    expect(await discoverMicro(observer, { service: "nothing-here", waitMs: 300 })).toEqual([]);
    await expect(registerMicro(observer, { service: "bad.name", description: "x" })).rejects.toMatchObject({ code: "bus.micro_invalid" });
    await expect(registerMicro(observer, { service: "loop", description: "x", version: "one" })).rejects.toMatchObject({ code: "bus.micro_invalid" });
    expect(microName("sandbox")).toBe("tack-sandbox");
    expect(microSubjects("sandbox")).toEqual(["$SRV.PING", "$SRV.INFO", "$SRV.STATS", "$SRV.*.tack-sandbox", "$SRV.*.tack-sandbox.*"]);
  });
});
