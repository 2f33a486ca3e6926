// `tack status` against a real launch: every service (sandbox and llm twice) on a nats-server
// the launcher starts, up.json written as `tack up` writes it, and the real `tack` executable.
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { upStateOf } from "../src/commands/up.js";
import type { StatusReport } from "../src/commands/status.js";
import { launch, type Launched } from "../src/launcher.js";
import { writeUpState } from "../src/state.js";

const BIN = fileURLToPath(new URL("../bin/tack.js", import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), "tack-status-"));
const project = join(scratch, "project");
const stateDir = join(project, ".tack");
let tack: Launched;

/** Runs the real `tack` in `cwd` without Tack's variables from this environment (asynchronously: the launcher lives in this process). */
function tackCli(args: string[], cwd: string, env: Record<string, string> = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const base = Object.fromEntries(Object.entries(process.env).filter(([key]) => !key.startsWith("TACK_") && key !== "NATS_URL"));
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { cwd, env: { ...base, ...env }, encoding: "utf8", timeout: 60_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === "number" ? error.code : null) : 0, stdout, stderr });
    });
  });
}

const status = async (cwd = project) => {
  const result = await tackCli(["status", "--json"], cwd);
  return { code: result.code, report: JSON.parse(result.stdout) as StatusReport, stderr: result.stderr };
};

beforeAll(async () => {
  mkdirSync(stateDir, { recursive: true, mode: 0o700 });
  tack = await launch({
    dataDir: stateDir,
    namespace: `t${randomBytes(5).toString("hex")}`,
    replicas: { sandbox: 2, llm: 2 },
    readyTimeoutMs: 120_000,
    // No warm pool: this test needs no container.
    env: { TACK_SANDBOX_POOL_SIZE: "0" },
  });
  await writeUpState(stateDir, upStateOf(tack, { apiKeyFile: null, pid: process.pid, localNats: true, startedAt: new Date().toISOString() }));
}, 240_000);

afterAll(async () => {
  await tack?.stop();
  rmSync(scratch, { recursive: true, force: true });
});

describe("tack status", () => {
  it("status - --json shows every replica with its pid, NATS and Docker health, the gateway, and the instances that answered discovery", async () => {
    const { code, report, stderr } = await status();
    expect(stderr).toBe("");
    expect(report.problems).toEqual([]);
    expect(report.healthy).toBe(true);
    expect(code).toBe(0);
    expect(report.tack).toMatchObject({ running: true, local: true, pid: process.pid, gatewayUrl: tack.gatewayUrl, namespace: tack.namespace, natsUrl: tack.natsUrl });
    expect(report.services.map((s) => [s.service, s.replicas.length])).toEqual([["llm", 2], ["tools", 1], ["sandbox", 2], ["skills", 1], ["mcp", 1], ["loop", 1], ["gateway", 1]]);
    for (const { service, replicas } of report.services) {
      expect(replicas.map((r) => r.pid)).toEqual(tack.pids(service as never));
      for (const r of replicas) {
        expect(r, `${service}#${r.replica}`).toMatchObject({ state: "running", alive: true, answered: true, restarts: 0, lastExit: null });
        expect(r.uptimeMs).toBeGreaterThanOrEqual(0);
      }
    }
    expect(report.nats).toMatchObject({ url: tack.natsUrl, reachable: true, jetstream: true, error: null });
    expect(report.nats.serverVersion).toMatch(/^\d+\.\d+\.\d+/);
    expect(report.docker).toMatchObject({ reachable: true, required: true, error: null });
    expect(report.docker.runtimes).toContain("runc");
    expect(report.gateway).toMatchObject({ url: tack.gatewayUrl, healthy: true, status: 200 });

    // Discovery: one instance per process, every service (the gateway included); the two sandbox replicas have their own ids.
    expect(report.discovery.map((i) => i.pid).sort()).toEqual(tack.replicas().map((r) => r.pid).sort());
    expect(new Set(report.discovery.map((i) => i.id)).size).toBe(9);
    const sandboxes = report.discovery.filter((i) => i.service === "sandbox");
    expect(sandboxes).toHaveLength(2);
    expect(sandboxes[0]!.metadata.replica).not.toBe(sandboxes[1]!.metadata.replica);
    expect(sandboxes.map((i) => i.metadata.replica).some((id) => id?.endsWith("-2"))).toBe(true);
    expect(sandboxes.every((i) => i.metadata.runtime === "runc")).toBe(true);

    const table = await tackCli(["status"], project);
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(/^ {2}sandbox#2 +\d+ +running /m);
    expect(table.stdout).toContain(`NATS       ✓ ${tack.natsUrl} · server ${report.nats.serverVersion} · JetStream on`);
    expect(table.stdout).toMatch(/discovery {2}9 instance\(s\) answered \$SRV\.PING: gateway 1, llm 2, loop 1, mcp 1, sandbox 2, skills 1, tools 1/);
    expect(table.stdout.trimEnd().split("\n").at(-1)).toBe("healthy");
  });

  it("status - a service process that is gone makes it unhealthy (exit 1), naming the replica and its log", async () => {
    const pids = tack.pids("llm");
    // kill(): no restart, and up.json still lists the old pids, as after a crash `tack up` could not record.
    await tack.kill("llm");
    const { code, report } = await status();
    expect(code).toBe(1);
    expect(report.healthy).toBe(false);
    expect(report.services.find((s) => s.service === "llm")!.replicas.map((r) => [r.pid, r.alive, r.answered])).toEqual(pids.map((pid) => [pid, false, false]));
    expect(report.problems).toEqual([
      `llm (pid ${pids[0]}) is gone; see ${tack.logFile("llm")}`,
      `llm#2 (pid ${pids[1]}) is gone; see ${tack.logFile("llm", 2)}`,
    ]);
    expect(report.discovery.some((i) => i.service === "llm")).toBe(false);
    const table = await tackCli(["status"], project);
    expect(table.code).toBe(1);
    expect(table.stdout).toContain(`unhealthy:\n  - llm (pid ${pids[0]}) is gone`);

    // Restarting: up.json says so, and so does status.
    await tack.start("llm");
    await writeUpState(stateDir, upStateOf(tack, { apiKeyFile: null, pid: process.pid, localNats: true }));
    expect((await status()).report.healthy).toBe(true);
  });

  it("status - an up.json left by a `tack up` that ended says Tack is not running, exit 1", async () => {
    const elsewhere = join(scratch, "elsewhere", ".tack");
    mkdirSync(elsewhere, { recursive: true });
    const dead = await new Promise<number>((resolve) => {
      const child = execFile(process.execPath, ["-e", ""], () => resolve(child.pid!));
    });
    await writeUpState(elsewhere, { gatewayUrl: "http://127.0.0.1:9", apiKeyFile: null, pid: dead, namespace: "gone", natsUrl: tack.natsUrl });
    const stale = await status(join(scratch, "elsewhere"));
    expect(stale.code).toBe(1);
    expect(stale.report.tack.running).toBe(false);
    expect(stale.report.problems[0]).toBe(`Tack is not running: ${join(elsewhere, "up.json")} is left from pid ${dead}, which has ended; start it with \`tack up\``);
  });
});
