import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Bus, discoverMicro, SandboxRpc, ToolsRpc } from "@tack/bus";
import { CallToolRequest, CallToolResponse, type DefinedTool } from "@tack/proto";
import { removeNamespace, waitFor } from "@tack/testkit";

// The CPU bombs of issue 18 sent to the real tools service over the bus, with the service as a
// child process: a regression blocks the child (and fails the probes), not the test runner.
// While each hostile call runs, tools.list and a cheap tools.call must be answered within a
// second, and the hostile call must end on its own with its result or a clear error. On the code
// before the budgets the <pre> took minutes, the nested <div>s blocked the event loop for their
// whole parse and the pattern ^(a+)+$ never ended: the probes timed out.
// Every packet stays on loopback: the hostile pages are served on 127.0.0.1, which the child is
// allowed to fetch through TACK_WEB_FETCH_ALLOW.

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const REPO = fileURLToPath(new URL("../../../", import.meta.url));
/** How long a probe may take: the service answers other calls meanwhile. */
const PROBE_LIMIT_MS = 1000;

const namespace = `b${randomBytes(5).toString("hex")}`;
let root: string;
let bus: Bus;
let sandboxResponder: Bus;
let child: ChildProcess;
let pages: Server;
let base: string;
let calls = 0;

const PRE = `<html><body><pre>a${" ".repeat(1_000_000)}b</pre></body></html>`;
const NESTED = `<html><body>${"<div>".repeat(200_000)}deep</body></html>`;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "tack-budget-bus-"));
  pages = createServer((request, response) => {
    const body = request.url === "/pre" ? PRE : request.url === "/nested" ? NESTED : "<p>small</p>";
    response.writeHead(200, { "content-type": "text/html; charset=utf-8" }).end(body);
  });
  await new Promise<void>((resolve) => pages.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(pages.address() as AddressInfo).port}`;

  bus = await Bus.connect({ url: NATS_URL, namespace, name: "budget-over-bus" });
  // Test-only stand-in for the sandbox service: every call ensures its session's sandbox first,
  // and none of these runs anything in it (web_fetch fetches from the service, define_tool and
  // a refused call run nothing).
  sandboxResponder = await Bus.connect({ url: NATS_URL, namespace, name: "budget-over-bus-sandbox" });
  sandboxResponder.serve(SandboxRpc.EnsureSandbox, async (request) =>
    ({ containerId: `local-${request.sessionId}`, created: false, runtime: "local" }));
  await sandboxResponder.nc.flush();

  child = spawn(process.execPath, ["--import", "tsx", "services/tools/src/main.ts"], {
    cwd: REPO,
    env: { PATH: process.env.PATH, HOME: root, NATS_URL, TACK_NAMESPACE: namespace, TACK_WEB_FETCH_ALLOW: "127.0.0.1/32" },
    stdio: ["ignore", "ignore", "inherit"],
  });
  await waitFor(`tools service pid ${child.pid} to answer $SRV.PING`, async () =>
    (await discoverMicro(bus, { service: "tools", waitMs: 300 })).some((found) => found.instance.pid === child.pid), { timeoutMs: 60_000 });
});

afterAll(async () => {
  if (child && child.exitCode === null && child.signalCode === null) {
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGKILL");
    await exited;
  }
  await sandboxResponder?.close();
  if (bus) {
    await removeNamespace(bus.nc, namespace);
    await bus.close();
  }
  await new Promise<void>((resolve) => (pages ? pages.close(() => resolve()) : resolve()));
  await rm(root, { recursive: true, force: true });
});

/** tools.call of `name` in a session of mode `sessionMode` (a fresh call id each time). */
function call(name: string, args: unknown, fields: Partial<CallToolRequest> = {}, timeoutMs = 60_000): Promise<CallToolResponse> {
  return bus.request(ToolsRpc.CallTool, CallToolRequest.fromPartial({
    sessionId: "s1", tenant: "t1", callId: `call_${calls++}`, name, arguments: JSON.stringify(args), workspace: root,
    sandboxMode: "workspace-write", attempt: 1, firstAttemptAtMs: Date.now(), ...fields,
  }), { timeoutMs });
}

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

/**
 * Runs `hostile` and, from the moment it is sent until it ends, probes the service every 200 ms
 * with a tools.list and a cheap tools.call (web_fetch of a small page), each timed. A probe
 * waits at most 5 s, so a service that is stuck fails here, on the probes, rather than on the
 * test's timeout.
 */
async function meanwhile(hostile: () => Promise<CallToolResponse>): Promise<{ result: CallToolResponse; ms: number; probes: number[] }> {
  const started = performance.now();
  let done = false;
  const running = hostile().finally(() => {
    done = true;
  });
  // Awaited below unless the service is stuck; then the test fails on the probes, not on this call.
  running.catch(() => undefined);
  const probes: number[] = [];
  do {
    const round = await Promise.all([
      timed(() => bus.request(ToolsRpc.ListTools, { mode: "standard" }, { timeoutMs: 5_000 })),
      timed(async () => {
        const small = await call("web_fetch", { url: `${base}/small` }, {}, 5_000);
        if (!small.content.includes("untrusted=\"true\">\nsmall\n</web_content>")) throw new Error(`the probe web_fetch answered ${JSON.stringify(small.content)}`);
      }),
    ]);
    probes.push(...round);
    if (round.some((ms) => ms === Infinity)) break;
    await new Promise((resolve) => setTimeout(resolve, 200));
  } while (!done);
  expect(Math.max(...probes), `the slowest of ${probes.length} probes sent while the hostile call ran (Infinity: not answered within 5 s)`).toBeLessThan(PROBE_LIMIT_MS);
  const result = await running;
  return { result, ms: performance.now() - started, probes };
}

describe("budgets over the bus", () => {
  it("budget over bus - web_fetch of a <pre> of a million spaces between two letters: answered in seconds, other calls meanwhile within 1 s", async () => {
    const { result, ms, probes } = await meanwhile(() => call("web_fetch", { url: `${base}/pre` }));
    expect(Math.max(...probes)).toBeLessThan(PROBE_LIMIT_MS);
    expect(result.isError).toBe(false);
    expect(result.content).toContain(`<web_content url="${base}/pre" untrusted="true">\n\`\`\`\na${" ".repeat(1000)}`);
    expect(result.content).toContain("(the text was cut at 100000 of 1000010 characters)");
    expect(ms).toBeLessThan(10_000);
  });

  it("budget over bus - web_fetch of 200,000 nested <div>s: Markdown or a clear error within the 10 s parse limit, other calls meanwhile within 1 s", async () => {
    const { result, ms, probes } = await meanwhile(() => call("web_fetch", { url: `${base}/nested` }));
    expect(Math.max(...probes)).toBeLessThan(PROBE_LIMIT_MS);
    // Whether the parse fits in its 10 s depends on the machine; either way the call ends, and says why.
    if (result.isError) {
      expect(result.content).toMatch(new RegExp(`^web_fetch gave up converting ${base}/nested to Markdown: the HTML could not be parsed within 10 s \\(\\d+% read\\): it is nested too deeply or is too large; fetch it again with format "raw" to get the source$`));
    } else {
      expect(result.content).toContain(`untrusted="true">\ndeep\n</web_content>`);
    }
    expect(ms).toBeLessThan(20_000);
    expect(probes.length).toBeGreaterThanOrEqual(10);
  });

  it("budget over bus - a defined tool with pattern ^(a+)+$ called with 'aaaa…!' is refused at once, other calls meanwhile within 1 s", async () => {
    const creator = { sessionMode: "creator" };
    const definition = {
      name: "echo_word", description: "Echo a word", language: "bash", code: "cat",
      parameters: { type: "object", properties: { word: { type: "string", pattern: "^(a+)+$" } }, required: ["word"] },
    };
    const defining = await meanwhile(() => call("define_tool", definition, creator));
    expect(defining.result).toMatchObject({ isError: false, content: "Defined tool echo_word (bash); call it from your next step." });
    const defined: DefinedTool = defining.result.defined!;
    const evil = "a".repeat(39) + "!";
    const { result, ms, probes } = await meanwhile(() => call("echo_word", { word: evil }, { ...creator, defined: { tools: [defined] } }));
    expect(Math.max(...defining.probes, ...probes)).toBeLessThan(PROBE_LIMIT_MS);
    expect(result).toMatchObject({ isError: true, content: "Invalid arguments for echo_word: word: Invalid string: must match pattern /^(a+)+$/" });
    expect(ms).toBeLessThan(PROBE_LIMIT_MS);
  });
});
