// The launcher's supervision and replicas, with real service processes on a nats-server the
// launcher starts itself (so the bus permission table is in force, micro-service discovery included).
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Bus, discoverMicro } from "@tack/bus";
import { launch, type Launched, type RestartEvent } from "../src/launcher.js";

const scratch = mkdtempSync(join(tmpdir(), "tack-supervision-"));
const dataDir = join(scratch, "state");
const exits: Array<{ service: string; description: string; replica: number }> = [];
const restarts: RestartEvent[] = [];
let tack: Launched;
let bus: Bus;

/** Polls `condition` until it holds, failing with `what` after `timeoutMs`. */
async function until<T>(what: string, condition: () => T | undefined | false | Promise<T | undefined | false>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await condition();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

const startLines = (file: string, name: string) => readFileSync(file, "utf8").split("\n").filter((line) => line.includes(` starting ${name}: `)).length;

beforeAll(async () => {
  tack = await launch({
    dataDir,
    namespace: `t${randomBytes(5).toString("hex")}`,
    services: ["tools", "loop"],
    replicas: { tools: 3, loop: 2 },
    readyTimeoutMs: 90_000,
    onServiceExit: (service, description, _logFile, replica) => exits.push({ service, description, replica }),
    onRestart: (event) => restarts.push(event),
  });
  bus = await Bus.connect({ url: tack.natsUrl, namespace: tack.namespace, name: "supervision-test", ...tack.natsAuth });
}, 180_000);

afterAll(async () => {
  await bus?.close();
  await tack?.stop();
  rmSync(scratch, { recursive: true, force: true });
});

describe("supervision", () => {
  it("supervision - each replica is its own process with its own log, and micro-service discovery finds every one", async () => {
    const tools = tack.pids("tools");
    const loop = tack.pids("loop");
    expect(tools).toHaveLength(3);
    expect(loop).toHaveLength(2);
    expect(new Set([...tools, ...loop]).size).toBe(5);
    expect(tack.replicas("tools").map((r) => [r.replica, r.state, r.restarts])).toEqual([[1, "running", 0], [2, "running", 0], [3, "running", 0]]);
    expect(tack.replicas().map((r) => r.logFile)).toEqual(["tools.log", "tools-2.log", "tools-3.log", "loop.log", "loop-2.log"].map((f) => join(dataDir, "logs", f)));
    expect(startLines(tack.logFile("tools", 3), "tools-3")).toBe(1);
    expect(tack.pid("tools")).toBe(tools[0]);

    // $SRV.INFO.tack-tools: one answer per process, each naming its pid and this namespace.
    const info = await discoverMicro(bus, { verb: "INFO", service: "tools" });
    expect(info.map((answer) => answer.instance.pid).sort()).toEqual([...tools].sort());
    for (const answer of info) {
      expect(answer.name).toBe("tack-tools");
      expect(answer.description).toMatch(/tools/);
      expect(answer.metadata).toMatchObject({ namespace: tack.namespace, service: "tools" });
    }
    // $SRV.PING (every service) and $SRV.STATS by name answer too.
    const ping = await discoverMicro(bus);
    expect(ping.map((answer) => `${answer.instance.service}:${answer.instance.pid}`).sort()).toEqual([...tools.map((p) => `tools:${p}`), ...loop.map((p) => `loop:${p}`)].sort());
    const stats = await discoverMicro(bus, { verb: "STATS", service: "loop" });
    expect(stats.map((answer) => answer.instance.pid).sort()).toEqual([...loop].sort());
    expect(stats.every((answer) => typeof answer.started === "string" && answer.metadata?.owner?.startsWith("loop-"))).toBe(true);
    // Another namespace sees none of them.
    expect(await discoverMicro(bus, { service: "tools", namespace: "elsewhere" })).toEqual([]);
  });

  it("supervision - a SIGKILLed replica is restarted with a new pid and backoff, and the crash and restart are reported", async () => {
    const before = tack.pids("tools");
    const killed = await tack.crash("tools", 2);
    expect(killed).toBe(before[1]);
    expect(exits).toContainEqual({ service: "tools", description: "was killed by SIGKILL", replica: 2 });
    const first = await until("tools#2 to be restarted", () => restarts.find((event) => event.previousPid === killed));
    expect(first).toMatchObject({ service: "tools", replica: 2, reason: "was killed by SIGKILL", restarts: 1, logFile: tack.logFile("tools", 2) });
    expect(first.pid).not.toBe(killed);
    // 250 ms for the first crash, with jitter (half to all of it).
    expect(first.delayMs).toBeGreaterThanOrEqual(125);
    expect(first.delayMs).toBeLessThanOrEqual(250);
    await tack.whenRunning("tools");
    expect(tack.pids("tools")).toEqual([before[0], first.pid, before[2]]);
    expect(tack.replicas("tools")[1]).toMatchObject({ state: "running", pid: first.pid, restarts: 1, lastExit: "was killed by SIGKILL" });
    expect(startLines(tack.logFile("tools", 2), "tools-2")).toBe(2);
    const found = (await discoverMicro(bus, { service: "tools" })).map((answer) => answer.instance.pid);
    expect(found).toContain(first.pid);
    expect(found).not.toContain(killed);

    // A second crash soon after: the wait doubles.
    const again = await tack.crash("tools", 2);
    const second = await until("tools#2 to be restarted again", () => restarts.find((event) => event.previousPid === again));
    expect(second).toMatchObject({ replica: 2, restarts: 2 });
    expect(second.delayMs).toBeGreaterThanOrEqual(250);
    expect(second.delayMs).toBeLessThanOrEqual(500);
    await tack.whenRunning("tools");
  });

  it("supervision - kill() stops every replica of a service for good, start() brings them back", async () => {
    const loopBefore = tack.pids("loop");
    await tack.kill("loop");
    expect(tack.pids("loop")).toEqual([]);
    expect(tack.replicas("loop").map((r) => r.state)).toEqual(["stopped", "stopped"]);
    // A crash of another service, restarted after its backoff: by then a killed loop would have been restarted too.
    const crashed = await tack.crash("tools", 1);
    await until("tools#1 to be restarted", () => restarts.find((event) => event.previousPid === crashed));
    expect(tack.pids("loop")).toEqual([]);
    expect(exits.filter((e) => e.service === "loop")).toEqual([]);
    await expect(tack.crash("loop", 1)).rejects.toMatchObject({ code: "launch.not_running" });
    await expect(tack.crash("tools", 4)).rejects.toMatchObject({ code: "launch.no_such_replica" });

    await tack.start("loop");
    const loopAfter = tack.pids("loop");
    expect(loopAfter).toHaveLength(2);
    expect(loopAfter.some((pid) => loopBefore.includes(pid))).toBe(false);
    await expect(tack.start("loop")).rejects.toMatchObject({ code: "launch.already_running" });
    // Supervised again after start(): a crash is restarted.
    const loopCrash = await tack.crash("loop", 2);
    await until("loop#2 to be restarted", () => restarts.find((event) => event.previousPid === loopCrash));
    await tack.whenRunning("loop");
    expect(tack.pids("loop")).toHaveLength(2);
  });

  it("supervision - nats-server saw no permission violation: every service may answer discovery", () => {
    const log = readFileSync(join(dataDir, "logs", "nats-server.log"), "utf8");
    expect(log).toMatch(/Server is ready/);
    expect(log).not.toMatch(/Permissions Violation/i);
  });

  it("supervision - bad replica counts are refused before anything starts", async () => {
    const dir = join(scratch, "invalid");
    await expect(launch({ dataDir: dir, replicas: { tools: 0 } })).rejects.toMatchObject({ code: "launch.invalid_options", message: expect.stringContaining("replicas of tools is 0") });
    await expect(launch({ dataDir: dir, replicas: { loop: 1.5 } })).rejects.toMatchObject({ code: "launch.invalid_options" });
    await expect(launch({ dataDir: dir, replicas: { gateway: 2 } })).rejects.toMatchObject({ code: "launch.invalid_options", message: expect.stringContaining("the gateway runs once") });
    await expect(launch({ dataDir: dir, replicas: { web: 2 } as never })).rejects.toMatchObject({ code: "launch.invalid_options", message: expect.stringContaining('unknown service "web"') });
    expect(existsSync(dir)).toBe(false);
  });
});
