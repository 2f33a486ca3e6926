// A server's output schema is untrusted input the bridge checks: pattern ^(a+)+$ with structured
// content "aaaa…!" (issue 18's CPU bomb) must be checked in linear time. The MCP service runs as a
// child process (a regression blocks the child, not the test runner) with the hostile server as
// an operator `run: "host"` server; while the hostile call runs, mcp.list and another tool's
// call are answered within a second. With the SDK's default validator (Ajv, native RegExps) the
// service did not answer anything for as long as the match ran (hours).
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, expect, it } from "vitest";
import { Bus, discoverMicro, McpRpc } from "@tack/bus";
import { removeNamespace, waitFor } from "@tack/testkit";

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const REPO = fileURLToPath(new URL("../../../", import.meta.url));
const FIXTURE = fileURLToPath(new URL("./fixtures/hostile-schema.mjs", import.meta.url));
/** How long a probe may take: the service answers other calls meanwhile. */
const PROBE_LIMIT_MS = 1000;

const namespace = `m${randomBytes(5).toString("hex")}`;
const session = { tenant: "acme", sessionId: "h1", workspace: "", sandboxMode: "workspace-write" };
let dir: string;
let bus: Bus;
let child: ChildProcess;
let calls = 0;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "tack-mcp-budget-"));
  const config = join(dir, "mcp.json");
  await writeFile(config, JSON.stringify({ mcpServers: { hostile: { command: process.execPath, args: [FIXTURE], run: "host" } } }));
  bus = await Bus.connect({ url: NATS_URL, namespace, name: "mcp-budget-over-bus" });
  child = spawn(process.execPath, ["--import", "tsx", "services/mcp/src/main.ts"], {
    cwd: REPO,
    env: { PATH: process.env.PATH, HOME: dir, NATS_URL, TACK_NAMESPACE: namespace, TACK_MCP_CONFIG: config },
    stdio: ["ignore", "ignore", "inherit"],
  });
  await waitFor(`MCP service pid ${child.pid} to answer $SRV.PING`, async () =>
    (await discoverMicro(bus, { service: "mcp", waitMs: 300 })).some((found) => found.instance.pid === child.pid), { timeoutMs: 60_000 });
  // The session's first list starts the server.
  const listed = await list(30_000);
  expect(listed.servers.map((s) => [s.name, s.state, s.error])).toEqual([["hostile", "ready", ""]]);
});

afterAll(async () => {
  if (child && child.exitCode === null && child.signalCode === null) {
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGKILL");
    await exited;
  }
  if (bus) {
    await removeNamespace(bus.nc, namespace);
    await bus.close();
  }
  await rm(dir, { recursive: true, force: true });
});

const list = (timeoutMs: number) => bus.request(McpRpc.ListTools, session, { timeoutMs });
const call = (publicName: string, timeoutMs: number) =>
  bus.request(McpRpc.CallTool, { publicName, argumentsJson: "{}", callId: `c${calls++}`, ...session }, { timeoutMs });

/** Milliseconds `work` took, or Infinity when it failed (a probe that timed out). */
async function timed(work: () => Promise<unknown>): Promise<number> {
  const started = performance.now();
  try {
    await work();
    return performance.now() - started;
  } catch {
    return Infinity;
  }
}

it("budget over bus - an output schema with pattern ^(a+)+$ and structured content 'aaaa…!': a clear tool error at once, mcp.list and other calls answered meanwhile", async () => {
  const started = performance.now();
  let done = false;
  const hostile = call("mcp__hostile__spell", 30_000).finally(() => {
    done = true;
  });
  // Awaited below unless the service is stuck; then the test fails on the probes, not on this call.
  hostile.catch(() => undefined);
  const probes: number[] = [];
  do {
    const round = await Promise.all([
      timed(() => list(5_000)),
      timed(async () => {
        const pong = await call("mcp__hostile__ping", 5_000);
        if (pong.content !== "pong") throw new Error(`ping answered ${JSON.stringify(pong.content)}`);
      }),
    ]);
    probes.push(...round);
    if (round.some((ms) => ms === Infinity)) break;
    await new Promise((resolve) => setTimeout(resolve, 200));
  } while (!done);
  expect(Math.max(...probes), `the slowest of ${probes.length} probes sent while the hostile call ran (Infinity: not answered within 5 s)`).toBeLessThan(PROBE_LIMIT_MS);
  const result = await hostile;
  expect(performance.now() - started).toBeLessThan(PROBE_LIMIT_MS);
  expect(result).toMatchObject({
    isError: true, server: "hostile", tool: "spell",
    content: `spell on MCP server "hostile" failed: MCP error -32602: Structured content does not match the tool's output schema: word: Invalid string: must match pattern /^(a+)+$/`,
  });
  // The service is still whole: the next call is answered as usual.
  expect((await call("mcp__hostile__ping", 5_000)).content).toBe("pong");
});
