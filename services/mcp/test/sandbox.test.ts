// Stdio MCP servers inside the session's sandbox container: real NATS, a real sandbox service
// with Docker, and server-everything from npm bundled into the workspace (the container has node
// but no network). Also the configuration sources and HTTP servers through web_fetch's guard.
import { randomBytes } from "node:crypto";
import { chown, mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { Bus, McpRpc, SandboxRpc } from "@tack/bus";
import { draft, ensureLogStream, FORMAT_VERSION, SessionLogWriter } from "@tack/log";
import { CallMcpToolResponse, ExecRequest, ListMcpToolsResponse, SessionCreated } from "@tack/proto";
import { removeNamespace, waitFor } from "@tack/testkit";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSandboxService, type SandboxService } from "../../sandbox/src/index.js";
import { stdioSubjects } from "../../sandbox/src/stdio.js";
import { checkHttpServer, httpGuard, sandboxStdioSubjects, startMcpService, type McpService } from "../src/index.js";
import { startHttpServer } from "./support.js";

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const TENANT = "acme";
const MODE = "workspace-write";
const EVERYTHING = { command: "node", args: ["/workspace/.mcp/everything.mjs", "stdio"] };

let namespace: string;
let sandbox: SandboxService;
let mcp: McpService;
let bus: Bus;
let home: string;
let bundle: string;
let http: Awaited<ReturnType<typeof startHttpServer>>;
const dirs: string[] = [];

/** A workspace owned by the sandbox user with the bundled server and `servers` as its .mcp.json. */
async function workspace(servers: Record<string, unknown> | string | undefined): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "tack-mcp-ws-"));
  dirs.push(dir);
  await mkdir(join(dir, ".mcp"));
  await writeFile(join(dir, ".mcp", "everything.mjs"), bundle);
  if (servers !== undefined) await writeFile(join(dir, ".mcp.json"), typeof servers === "string" ? servers : JSON.stringify({ mcpServers: servers }));
  for (const path of [dir, join(dir, ".mcp"), join(dir, ".mcp", "everything.mjs")]) await chown(path, 1000, 1000);
  return dir;
}

/** Logs the session's opening event as the loop does (the sandbox checks ensure requests against it). */
async function session(id: string, dir: string): Promise<void> {
  await ensureLogStream(bus.nc, bus.names);
  const writer = await SessionLogWriter.open(bus.nc, bus.names, { tenant: TENANT, sessionId: id });
  if (writer.lastSeq === 0) await writer.append(draft("sessionCreated", SessionCreated.fromPartial({ sessionId: id, tenant: TENANT, workspace: dir, formatVersion: FORMAT_VERSION, mode: "standard" }), "test"));
}

function list(sessionId: string, dir: string): Promise<ListMcpToolsResponse> {
  return bus.request(McpRpc.ListTools, { tenant: TENANT, sessionId, workspace: dir, sandboxMode: sessionId ? MODE : "" }, { timeoutMs: 60_000 });
}

function call(sessionId: string, dir: string, publicName: string, args: unknown): Promise<CallMcpToolResponse> {
  return bus.request(McpRpc.CallTool, { publicName, argumentsJson: JSON.stringify(args), callId: "c", tenant: TENANT, sessionId, workspace: dir, sandboxMode: MODE }, { timeoutMs: 60_000 });
}

async function exec(sessionId: string, argv: string[]): Promise<string> {
  const reply = await bus.request(SandboxRpc.Exec, ExecRequest.fromPartial({ sessionId, argv, mode: MODE }), { timeoutMs: 30_000 });
  return Buffer.from(reply.stdout).toString();
}

async function serverProcesses(sessionId: string): Promise<number[]> {
  const listing = await bus.request(SandboxRpc.ListProcesses, { sessionId, mode: MODE }, { timeoutMs: 30_000 });
  return listing.processes.filter((p) => p.command.includes("/workspace/.mcp/everything.mjs")).map((p) => p.pid);
}

beforeAll(async () => {
  const cache = await mkdtemp(join(tmpdir(), "tack-mcp-bundle-"));
  dirs.push(cache);
  const entry = fileURLToPath(new URL("../../../node_modules/@modelcontextprotocol/server-everything/dist/index.js", import.meta.url));
  await build({
    entryPoints: [entry], bundle: true, platform: "node", format: "esm", target: "node18", outfile: join(cache, "everything.js"), logLevel: "error",
    banner: { js: "import { createRequire } from 'module'; const require = createRequire(import.meta.url);" },
  });
  bundle = await import("node:fs/promises").then((fs) => fs.readFile(join(cache, "everything.js"), "utf8"));
  home = await mkdtemp(join(tmpdir(), "tack-mcp-home-"));
  dirs.push(home);
  await mkdir(join(home, ".tack"));
  http = await startHttpServer();
  namespace = `t${randomBytes(5).toString("hex")}`;
  sandbox = await startSandboxService({ natsUrl: NATS_URL, namespace, poolSize: 0 });
  process.env.TACK_CANARY_API_KEY = "canary-secret-1";
  process.env.NATS_CANARY = "canary-secret-2";
  // Loopback is allowed for the test's HTTP server only, as an operator would allow an internal address.
  mcp = await startMcpService({ natsUrl: NATS_URL, namespace, servers: {}, home, httpAllow: "127.0.0.1/32", backoff: { initialMs: 100 } });
  bus = await Bus.connect({ url: NATS_URL, namespace, name: "mcp-sandbox-test" });
}, 120_000);

afterAll(async () => {
  delete process.env.TACK_CANARY_API_KEY;
  delete process.env.NATS_CANARY;
  await mcp?.stop();
  await sandbox?.stop({ removeContainers: true });
  await http?.close();
  if (bus) {
    await removeNamespace(bus.nc, namespace).catch(() => undefined);
    await bus.close();
  }
  await Promise.all(dirs.map((dir) => rm(dir, { recursive: true, force: true })));
}, 120_000);

describe("stdio servers in the session's sandbox", () => {
  let dir: string;
  beforeAll(async () => {
    dir = await workspace({ everything: { ...EVERYTHING, env: { MINE: "configured" } } });
    await session("s1", dir);
  });

  it("lists server-everything running in the container, calls echo and shows an image as a placeholder", async () => {
    const listed = await list("s1", dir);
    expect(listed.servers).toEqual([expect.objectContaining({ name: "everything", state: "ready", error: "", source: "workspace:.mcp.json", transport: "stdio" })]);
    expect(listed.tools.map((t) => t.publicName)).toEqual(expect.arrayContaining(["mcp__everything__echo", "mcp__everything__get-tiny-image"]));
    expect(await serverProcesses("s1")).toHaveLength(1);
    const echo = await call("s1", dir, "mcp__everything__echo", { message: "from the sandbox" });
    expect(echo).toMatchObject({ content: "Echo: from the sandbox", isError: false, server: "everything", tool: "echo" });
    const image = await call("s1", dir, "mcp__everything__get-tiny-image", {});
    expect(image.content).toMatch(/^\[image: image\/png, \d+ (B|KB)\]$/m);
    expect(JSON.parse(image.rawJson).content.some((c: { type: string }) => c.type === "image")).toBe(true);
  });

  it("gives the server only PATH, HOME, LANG and its own env: no secret of the services", async () => {
    const env = JSON.parse((await call("s1", dir, "mcp__everything__get-env", {})).content) as Record<string, string>;
    expect(env.MINE).toBe("configured");
    expect(Object.keys(env).sort()).toEqual(["HOME", "LANG", "MINE", "PATH"]);
    expect(JSON.stringify(env)).not.toContain("canary-secret");
  });

  it("reconnects a server killed inside the container", async () => {
    const bridge = () => mcp.sessions.bridge("s1", "everything")!;
    const pid = bridge().pid("everything")!;
    expect(await serverProcesses("s1")).toEqual([pid]);
    await exec("s1", ["kill", "-9", String(pid)]);
    await waitFor("everything ready in a new process", () => {
      const state = bridge().servers()[0]!;
      return state.state === "ready" && bridge().pid("everything") !== pid ? state : undefined;
    }, { timeoutMs: 30_000 });
    expect((await call("s1", dir, "mcp__everything__echo", { message: "back" })).content).toBe("Echo: back");
    expect(await serverProcesses("s1")).toEqual([bridge().pid("everything")]);
  });

  it("gives two sessions their own server processes in their own containers", async () => {
    const other = await workspace({ everything: EVERYTHING });
    await session("s2", other);
    await list("s2", other);
    const [one, two] = [await serverProcesses("s1"), await serverProcesses("s2")];
    expect(one).toHaveLength(1);
    expect(two).toHaveLength(1);
    expect(mcp.sessions.bridge("s2", "everything")).not.toBe(mcp.sessions.bridge("s1", "everything"));
    // A file only s2's workspace has: its server sees its own container's /workspace.
    await exec("s2", ["sh", "-c", "echo two > /workspace/only-here"]);
    expect(await exec("s1", ["sh", "-c", "test -e /workspace/only-here && echo yes || echo no"])).toBe("no\n");
    expect((await call("s2", other, "mcp__everything__echo", { message: "s2" })).content).toBe("Echo: s2");
  });

  it("stops the session's clients when its sandbox is released; the next list starts them in a new one", async () => {
    const other = await workspace({ everything: EVERYTHING });
    await session("s3", other);
    expect((await list("s3", other)).servers[0]!.state).toBe("ready");
    await bus.request(SandboxRpc.ReleaseSandbox, { sessionId: "s3", mode: "" }, { timeoutMs: 60_000 });
    await waitFor("s3's clients stopped", () => !mcp.sessions.sessions.includes("s3") || undefined, { timeoutMs: 30_000 });
    const again = await list("s3", other);
    expect(again.servers[0]!.state).toBe("ready");
    expect((await call("s3", other, "mcp__everything__echo", { message: "again" })).content).toBe("Echo: again");
  });
});

describe("configuration sources", () => {
  it("a broken entry and a server that crashes at start are failed with warnings; the others work", async () => {
    const dir = await workspace({
      everything: EVERYTHING,
      bad: { command: 5 },
      crash: { command: "node", args: ["-e", "console.error('boom: no API key'); process.exit(3)"] },
    });
    await session("c1", dir);
    const listed = await list("c1", dir);
    const byName = Object.fromEntries(listed.servers.map((s) => [s.name, s]));
    expect(byName.everything!.state).toBe("ready");
    expect(byName.bad).toMatchObject({ state: "failed", source: "workspace:.mcp.json" });
    expect(byName.bad!.warnings[0]).toContain('workspace:.mcp.json: mcp server "bad": command');
    expect(byName.crash).toMatchObject({ state: "failed", tools: [] });
    expect(byName.crash!.warnings[0]).toContain('MCP server "crash" did not start');
    expect(byName.crash!.warnings[0]).toContain("boom: no API key");
    expect((await call("c1", dir, "mcp__everything__echo", { message: "still" })).content).toBe("Echo: still");
  });

  it("a broken user file is a warning; the workspace's servers still work, and a fixed file counts at the next list", async () => {
    const dir = await workspace({ everything: EVERYTHING });
    await session("c2", dir);
    await writeFile(join(home, ".tack", "mcp.json"), "{ not json");
    try {
      const listed = await list("c2", dir);
      expect(listed.warnings).toEqual([expect.stringContaining("user:~/.tack/mcp.json: not valid JSON")]);
      expect(listed.servers.map((s) => [s.name, s.state])).toEqual([["everything", "ready"]]);
      await writeFile(join(home, ".tack", "mcp.json"), JSON.stringify({ mcpServers: { remote: { type: "http", url: http.url } } }));
      const fixed = await list("c2", dir);
      expect(fixed.warnings).toEqual([]);
      expect(fixed.servers.map((s) => [s.name, s.state, s.source, s.transport])).toEqual([["remote", "ready", "user:~/.tack/mcp.json", "http"], ["everything", "ready", "workspace:.mcp.json", "stdio"]]);
      expect(await call("c2", dir, "mcp__remote__add", { a: 2, b: 3 })).toMatchObject({ content: "5", isError: false, server: "remote" });
    } finally {
      await rm(join(home, ".tack", "mcp.json"), { force: true });
    }
  });

  it("refuses a .mcp.json symlinked out of the workspace and run: host outside the operator's configuration", async () => {
    const outside = join(home, "elsewhere.json");
    await writeFile(outside, JSON.stringify({ mcpServers: { everything: EVERYTHING } }));
    const linked = await workspace(undefined);
    await symlink(outside, join(linked, ".mcp.json"));
    const listed = await list("", linked);
    expect(listed.warnings).toEqual([expect.stringContaining(".mcp.json is a symlink leading out of the workspace")]);
    expect(listed.servers).toEqual([]);

    const host = await workspace({ local: { command: "node", args: ["x.js"], run: "host" } });
    const refused = await list("", host);
    expect(refused.servers).toEqual([expect.objectContaining({ name: "local", state: "failed" })]);
    expect(refused.servers[0]!.error).toContain('run "host" is honoured only in the operator\'s configuration');
  });

  it("without a session lists the configured servers without starting any", async () => {
    const dir = await workspace({ everything: EVERYTHING, remote: { url: http.url } });
    const before = mcp.sessions.sessions.length;
    const listed = await list("", dir);
    expect(listed.servers.map((s) => [s.name, s.state, s.transport])).toEqual([["everything", "configured", "stdio"], ["remote", "configured", "http"]]);
    expect(listed.tools).toEqual([]);
    expect(mcp.sessions.sessions).toHaveLength(before);
  });
});

describe("HTTP servers through web_fetch's guard", () => {
  it("a private address is refused before any connection, by the same guard as web_fetch", async () => {
    // Decided without sending a packet: the guard classifies the literal address and refuses.
    await expect(checkHttpServer("http://10.0.0.1/mcp", httpGuard("127.0.0.1/32"))).rejects.toMatchObject({ code: "mcp.http_refused", message: expect.stringContaining("rule address") });
    await expect(checkHttpServer("http://169.254.169.254/latest", httpGuard())).rejects.toMatchObject({ code: "mcp.http_refused" });
    await expect(checkHttpServer(http.url, httpGuard())).rejects.toMatchObject({ code: "mcp.http_refused", message: expect.stringContaining("TACK_MCP_HTTP_ALLOW") });
    await expect(checkHttpServer(http.url, httpGuard("127.0.0.1/32"))).resolves.toBeUndefined();

    const dir = await workspace({ private: { url: "http://10.0.0.1/mcp" }, everything: EVERYTHING });
    await session("h1", dir);
    const listed = await list("h1", dir);
    const byName = Object.fromEntries(listed.servers.map((s) => [s.name, s]));
    expect(byName.private).toMatchObject({ state: "failed", transport: "http" });
    expect(byName.private!.error).toContain("is refused (rule address)");
    expect(byName.everything!.state).toBe("ready");
  });

  it("the stream subjects are spelled alike by the sandbox and the MCP service", () => {
    const id = "0123456789abcdef0123456789abcdef";
    const { input, output } = sandboxStdioSubjects("ns", id);
    expect({ input, output }).toEqual(stdioSubjects("ns", id));
  });
});
