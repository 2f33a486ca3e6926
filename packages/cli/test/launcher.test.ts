import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { jetstreamManager } from "@nats-io/jetstream";
import { Bus } from "@tack/bus";
import { launch } from "@tack/cli";
import { describeExit, spawnChild } from "../src/child.js";

const SHARED_NATS = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const scratch = mkdtempSync(join(tmpdir(), "tack-launcher-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
const namespace = () => `t${randomBytes(5).toString("hex")}`;

describe("launcher", () => {
  it("launcher - starts nats-server with JetStream on a free port when no NATS URL is given, and stops it", async () => {
    const dataDir = join(scratch, "own-nats");
    const tack = await launch({ dataDir, namespace: namespace(), services: [] });
    let stopped = false;
    try {
      expect(tack.natsUrl).toMatch(/^nats:\/\/127\.0\.0\.1:\d+$/);
      expect(tack.natsUrl).not.toBe(SHARED_NATS);
      // It admits only the generated users; the launcher's own (admin) credentials come with the handle.
      await expect(Bus.connect({ url: tack.natsUrl, namespace: tack.namespace, name: "launcher-test" })).rejects.toMatchObject({ code: "bus.unauthorized" });
      const bus = await Bus.connect({ url: tack.natsUrl, namespace: tack.namespace, name: "launcher-test", ...tack.natsAuth });
      try {
        const jsm = await jetstreamManager(bus.nc);
        await jsm.streams.add({ name: "LAUNCHER_TEST", subjects: ["launcher.test"] });
        expect((await jsm.getAccountInfo()).streams).toBe(1);
      } finally {
        await bus.close();
      }
      expect(existsSync(join(dataDir, "nats", "jetstream"))).toBe(true);
      expect(readFileSync(join(dataDir, "logs", "nats-server.log"), "utf8")).toMatch(/Server is ready/);
      await tack.stop();
      stopped = true;
      await expect(Bus.connect({ url: tack.natsUrl, name: "launcher-test" })).rejects.toMatchObject({ code: "bus.unreachable" });
    } finally {
      if (!stopped) await tack.stop();
    }
  });

  it("launcher - a missing nats-server says how to install it or set NATS_URL", async () => {
    const path = process.env.PATH;
    process.env.PATH = join(scratch, "empty-bin");
    try {
      await expect(launch({ dataDir: join(scratch, "no-nats"), services: [] })).rejects.toMatchObject({
        code: "launch.nats_missing",
        message: "nats-server is not on PATH: install it (`apt-get install nats-server`) or set NATS_URL to a running NATS server with JetStream",
      });
    } finally {
      process.env.PATH = path;
    }
  });

  it("launcher - uses a given NATS URL without starting nats-server", async () => {
    const dataDir = join(scratch, "shared-nats");
    const tack = await launch({ dataDir, natsUrl: SHARED_NATS, namespace: namespace(), services: [], apiKey: "k1" });
    await tack.stop();
    expect(tack.natsUrl).toBe(SHARED_NATS);
    expect(tack.busCredentials).toBeUndefined();
    expect(tack.apiKey).toBe("k1");
    expect(tack.gatewayUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(existsSync(join(dataDir, "logs", "nats-server.log"))).toBe(false);
  });

  it("launcher - rejects unknown services and bad ports before starting anything", async () => {
    const dataDir = join(scratch, "invalid");
    await expect(launch({ dataDir, services: ["web" as never] })).rejects.toMatchObject({ code: "launch.invalid_options", message: expect.stringContaining('unknown service "web"') });
    await expect(launch({ dataDir, gatewayPort: 70_000 })).rejects.toMatchObject({ code: "launch.invalid_options" });
    await expect(launch({ dataDir, namespace: "Bad.NS" })).rejects.toMatchObject({ code: "launch.invalid_options" });
    expect(existsSync(join(dataDir, "nats"))).toBe(false);
  });

  it("launcher - a child's log holds its output, and its last lines are read back for the failure message", async () => {
    const logFile = join(scratch, "child.log");
    const script = "console.log('first run'); process.exit(0)";
    await spawnChild("demo", process.execPath, ["-e", script], { cwd: scratch, env: process.env, logFile }).exited;
    const child = spawnChild("demo", process.execPath, ["-e", "for (let i = 1; i <= 12; i++) console.error('line ' + i); process.exit(3)"], { cwd: scratch, env: process.env, logFile });
    const exit = await child.exited;
    expect(describeExit(exit)).toBe("exited with code 3");
    expect(await child.tail(2)).toBe("line 11\nline 12");
    expect(await child.tail(20)).not.toContain("first run");
    expect(readFileSync(logFile, "utf8")).toMatch(/first run\n--- .* starting demo: /);

    // A script file, not `-e`: this Node build lets SIGTERM end an `-e` script despite its handler.
    const sleeperScript = join(scratch, "sleeper.cjs");
    writeFileSync(sleeperScript, "process.on('SIGTERM', () => {}); console.log('sleeper ready'); setInterval(() => {}, 1000);\n");
    const sleeper = spawnChild("sleeper", process.execPath, [sleeperScript], { cwd: scratch, env: process.env, logFile });
    // Only once it ignores SIGTERM does the SIGKILL escalation get tested (a loaded machine starts node slowly).
    for (let i = 0; i < 200 && !readFileSync(logFile, "utf8").includes("sleeper ready"); i++) await new Promise((resolve) => setTimeout(resolve, 50));
    await sleeper.stop(300);
    expect(describeExit(sleeper.exit()!)).toBe("was killed by SIGKILL");
  });
});
