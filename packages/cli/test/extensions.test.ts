// The skills and MCP services under the launcher (real processes on a nats-server the launcher
// starts, so their bus users and permissions are in force), and `tack skills list` / `tack mcp list`
// through the real `tack` executable against them, found through .tack/up.json as `tack up` writes it.
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Bus, discoverMicro, McpRpc } from "@tack/bus";
import type { McpListReport } from "../src/commands/mcp.js";
import type { SkillsListReport } from "../src/commands/skills.js";
import { upStateOf } from "../src/commands/up.js";
import { launch, type Launched, type RestartEvent } from "../src/launcher.js";
import { removeUpState, writeUpState } from "../src/state.js";

const BIN = fileURLToPath(new URL("../bin/tack.js", import.meta.url));
const FIXTURE = fileURLToPath(new URL("./fixtures/mcp-server.mjs", import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), "tack-extensions-"));
const home = join(scratch, "home");
const project = join(scratch, "project");
const stateDir = join(project, ".tack");
const restarts: RestartEvent[] = [];
let tack: Launched;
let bus: Bus;

/** Runs the real `tack` in `cwd` with HOME = the test's home and none of Tack's variables from this environment. */
function tackCli(args: string[], cwd = project, env: Record<string, string> = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const base = Object.fromEntries(Object.entries(process.env).filter(([key]) => !key.startsWith("TACK_") && key !== "NATS_URL"));
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { cwd, env: { ...base, HOME: home, ...env }, encoding: "utf8", timeout: 60_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === "number" ? error.code : null) : 0, stdout, stderr });
    });
  });
}

function skill(dir: string, text: string): void {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "SKILL.md"), text);
}

beforeAll(async () => {
  mkdirSync(stateDir, { recursive: true, mode: 0o700 });
  skill(join(home, ".tack", "skills", "user-notes"), "---\ndescription: Keeps notes for the user.\n---\nWrite notes.\n");
  skill(join(project, ".tack", "skills", "deploy"), "---\ndescription: Deploys this project.\ndisable-model-invocation: true\n---\nRun make deploy.\n");
  skill(join(project, ".tack", "skills", "broken"), "---\nname: Broken_Name\ndescription: x\n---\n");
  // The user's MCP servers: the fixture over stdio. TACK_MCP_CONFIG points the service at the same file.
  const mcpJson = join(home, ".tack", "mcp.json");
  writeFileSync(mcpJson, JSON.stringify({ mcpServers: { fixture: { command: process.execPath, args: [FIXTURE] } } }));
  tack = await launch({
    dataDir: stateDir,
    namespace: `t${randomBytes(5).toString("hex")}`,
    services: ["skills", "mcp"],
    replicas: { skills: 2 },
    readyTimeoutMs: 90_000,
    restart: { initialDelayMs: 100, maxDelayMs: 1_000 },
    env: { HOME: home, TACK_MCP_CONFIG: mcpJson },
    onRestart: (event) => restarts.push(event),
  });
  await writeUpState(stateDir, upStateOf(tack, { apiKeyFile: null, pid: process.pid, localNats: true, startedAt: new Date().toISOString() }));
  bus = await Bus.connect({ url: tack.natsUrl, namespace: tack.namespace, name: "extensions-test", ...tack.natsAuth });
}, 180_000);

afterAll(async () => {
  await bus?.close();
  await tack?.stop();
  rmSync(scratch, { recursive: true, force: true });
});

describe("skills and mcp under the launcher", () => {
  it("extensions - the skills service (two replicas) and the mcp service run as their own bus users and answer discovery", async () => {
    expect(tack.services).toEqual(["skills", "mcp"]);
    expect(tack.replicas().map((r) => [r.service, r.replica, r.state])).toEqual([["skills", 1, "running"], ["skills", 2, "running"], ["mcp", 1, "running"]]);
    const found = await discoverMicro(bus, { waitMs: 3_000, stallMs: 300 });
    const pids = (service: string) => found.filter((f) => f.instance.service === service).map((f) => f.instance.pid).sort();
    expect(pids("skills")).toEqual([...tack.pids("skills")].sort());
    expect(pids("mcp")).toEqual(tack.pids("mcp"));
  });

  it("extensions - tack skills list shows the workspace's, the user's and the bundled skills, and the warning of a broken one", async () => {
    const result = await tackCli(["skills", "list", "--json"]);
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    const report = JSON.parse(result.stdout) as SkillsListReport;
    expect(report.workspace).toBe(project);
    const byName = Object.fromEntries(report.skills.map((s) => [s.name, s]));
    expect(byName.deploy).toMatchObject({ root: "workspace:.tack/skills", description: "Deploys this project.", modelInvocable: false, userInvocable: true });
    expect(byName["user-notes"]).toMatchObject({ root: "user:.tack/skills", modelInvocable: true });
    expect(byName["write-skill"]).toMatchObject({ root: "bundled" });
    expect(report.warnings.some((w) => w.includes(join(project, ".tack", "skills", "broken", "SKILL.md")) && w.includes('field "name"'))).toBe(true);
    expect(report.digest).toMatch(/^[0-9a-f]{64}$/);

    const table = await tackCli(["skills", "list"]);
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(/^deploy +workspace:\.tack\/skills · \/name only$/m);
    expect(table.stdout).toMatch(/^ +Deploys this project\.$/m);
    expect(table.stdout).toMatch(/^⚠ .*broken\/SKILL\.md: field "name"/m);
  });

  it("extensions - tack mcp list prints what the running MCP service says about each server", async () => {
    const expected = await bus.request(McpRpc.ListTools, { tenant: "local", sessionId: "", workspace: project, sandboxMode: "" }, { timeoutMs: 15_000 });
    const fixture = expected.servers.find((s) => s.name === "fixture");
    expect(fixture, JSON.stringify(expected.servers)).toBeDefined();

    const result = await tackCli(["mcp", "list", "--json"]);
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    const report = JSON.parse(result.stdout) as McpListReport;
    expect(report).toMatchObject({ running: true, note: null, workspace: project, problems: expected.warnings });
    expect(report.servers).toEqual(expected.servers.map((s) => ({ name: s.name, state: s.state, source: s.source, transport: s.transport, tools: s.tools, error: s.error, warnings: s.warnings })));

    const table = await tackCli(["mcp", "list"]);
    expect(table.code).toBe(0);
    expect(table.stdout).toContain(`fixture  ${fixture!.state === "ready" ? "✓ " : ""}${fixture!.state} · ${fixture!.transport || "?"} · ${fixture!.source || "?"}`);
    if (fixture!.tools.length > 0) expect(table.stdout).toContain(`  tools     ${fixture!.tools.length}: ${fixture!.tools.join(", ")}`);
  });

  it("extensions - a crashed mcp or skills process is restarted by the supervisor and answers again", async () => {
    const killed = await tack.crash("mcp");
    await tack.whenRunning("mcp", 90_000);
    expect(tack.pid("mcp")).not.toBe(killed);
    expect(restarts.some((r) => r.service === "mcp" && r.previousPid === killed)).toBe(true);
    const killedSkills = await tack.crash("skills", 2);
    await tack.whenRunning("skills", 90_000);
    expect(tack.pids("skills")).not.toContain(killedSkills);
    const found = await discoverMicro(bus, { service: "mcp", waitMs: 3_000, stallMs: 300 });
    expect(found.map((f) => f.instance.pid)).toEqual([tack.pid("mcp")]);
  });

  it("extensions - once Tack stopped, tack mcp list says so and lists the configured servers as not running; tack skills list fails", async () => {
    await tack.stop();
    await removeUpState(join(stateDir, "up.json"));
    const result = await tackCli(["mcp", "list"]);
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(/^Tack is not running \(.*\); the configured servers:$/m);
    expect(result.stdout).toContain(`fixture  not running · stdio · user:~/.tack/mcp.json\n  runs      stdio: ${process.execPath} ${FIXTURE}\n`);
    const skills = await tackCli(["skills", "list"]);
    expect(skills.code).toBe(1);
    expect(skills.stderr).toMatch(/^tack: Tack is not running \(.*\); the skills service lists the skills\n$/);
  });
});
