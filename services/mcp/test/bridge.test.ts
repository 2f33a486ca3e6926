// The bridge against the real reference servers (stdio), a fixture server written with the SDK
// and a Streamable HTTP server on 127.0.0.1.
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { waitFor } from "@tack/testkit";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { McpBridge, publicToolName, toolHash, DESCRIPTION_CAP } from "../src/index.js";
import { everything, filesystem, fixture, memory, startHttpServer, stdio } from "./support.js";

let dir: string;
const bridges: McpBridge[] = [];
async function start(...args: Parameters<typeof McpBridge.start>): Promise<McpBridge> {
  const bridge = await McpBridge.start(...args);
  bridges.push(bridge);
  return bridge;
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "tack-mcp-"));
});
afterEach(async () => {
  await Promise.all(bridges.splice(0).map((b) => b.close()));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("reference servers", () => {
  it("lists and calls everything, filesystem and memory over stdio", async () => {
    const files = join(dir, "files");
    await mkdir(join(files, "sub"), { recursive: true });
    await writeFile(join(files, "hello.txt"), "hi");
    const bridge = await start({ servers: { everything: everything(), files: filesystem(files), memory: memory(join(dir, "memory.jsonl")) } });
    expect(bridge.servers().map((s) => [s.name, s.state, s.error])).toEqual([["everything", "ready", ""], ["files", "ready", ""], ["memory", "ready", ""]]);
    const names = bridge.listTools().map((t) => t.publicName);
    expect(names).toEqual(expect.arrayContaining(["mcp__everything__echo", "mcp__everything__get-sum", "mcp__files__list_directory", "mcp__memory__create_entities", "mcp__memory__read_graph"]));
    const echo = bridge.listTools().find((t) => t.publicName === "mcp__everything__echo")!;
    expect(echo).toMatchObject({ server: "everything", tool: "echo", approval: "ask" });
    expect(echo.parameters).toMatchObject({ type: "object", properties: { message: { type: "string" } } });

    expect((await bridge.call("mcp__everything__echo", JSON.stringify({ message: "over the bridge" }))).content).toBe("Echo: over the bridge");
    const sum = await bridge.call("mcp__everything__get-sum", JSON.stringify({ a: 2, b: 40 }));
    expect(sum.isError).toBe(false);
    expect(sum.content).toContain("42");

    const listing = await bridge.call("mcp__files__list_directory", JSON.stringify({ path: files }));
    expect(listing.content.split("\n").sort()).toEqual(["[DIR] sub", "[FILE] hello.txt"]);

    const created = await bridge.call("mcp__memory__create_entities", JSON.stringify({ entities: [{ name: "Tack", entityType: "project", observations: ["speaks MCP"] }] }));
    expect(created.isError).toBe(false);
    const graph = await bridge.call("mcp__memory__read_graph", "{}");
    expect(JSON.parse(graph.content).entities).toEqual([{ name: "Tack", entityType: "project", observations: ["speaks MCP"] }]);
  });

  it("shows an image as a placeholder and keeps the whole result as JSON", async () => {
    const bridge = await start({ servers: { everything: everything() } });
    const result = await bridge.call("mcp__everything__get-tiny-image", "{}");
    expect(result.isError).toBe(false);
    expect(result.content).toMatch(/^\[image: image\/png, \d+ (B|KB)\]$/m);
    expect(result.content).not.toMatch(/[A-Za-z0-9+/]{200}/);
    const raw = JSON.parse(result.rawJson) as { content: Array<{ type: string; data?: string }> };
    const image = raw.content.find((c) => c.type === "image")!;
    expect(Buffer.from(image.data!, "base64").subarray(1, 4).toString()).toBe("PNG");
  });

  it("gives a stdio server only PATH, HOME, LANG and its own env", async () => {
    process.env.TACK_CANARY_API_KEY = "canary-secret-1";
    process.env.NATS_CANARY = "canary-secret-2";
    process.env.SOME_TOKEN = "canary-secret-3";
    try {
      const bridge = await start({ servers: { everything: everything({ env: { MINE: "configured" } }) } });
      const env = JSON.parse((await bridge.call("mcp__everything__get-env", "{}")).content) as Record<string, string>;
      expect(env.MINE).toBe("configured");
      expect(env.PATH).toBe(process.env.PATH);
      expect(JSON.stringify(env)).not.toContain("canary-secret");
      for (const key of Object.keys(env)) expect(key).not.toMatch(/_API_KEY$|_TOKEN$|_SECRET$|^NATS_|^TACK_|^VITEST/);
    } finally {
      delete process.env.TACK_CANARY_API_KEY;
      delete process.env.NATS_CANARY;
      delete process.env.SOME_TOKEN;
    }
  });

  it("filters tools and records their approval", async () => {
    const bridge = await start({
      servers: {
        only: everything({ enabled_tools: ["echo", "get-sum", "get-env"], disabled_tools: ["get-env"], approval: { echo: "never" } }),
        open: everything({ default_approval: "never", approval: { "get-sum": "ask" } }),
      },
    });
    const only = bridge.listTools().filter((t) => t.server === "only");
    expect(only.map((t) => [t.tool, t.approval])).toEqual([["echo", "never"], ["get-sum", "ask"]]);
    const open = bridge.listTools().filter((t) => t.server === "open");
    expect(open.find((t) => t.tool === "get-sum")!.approval).toBe("ask");
    expect(open.find((t) => t.tool === "echo")!.approval).toBe("never");
    await expect(bridge.call("mcp__only__get-env", "{}")).rejects.toMatchObject({ code: "mcp.unknown_tool" });
  });
});

describe("fixture server", () => {
  it("names long and odd tools with a hash, caps descriptions and calls them by public name", async () => {
    const bridge = await start({ servers: { fx: fixture() } });
    const tools = bridge.listTools();
    const long = "t".repeat(70);
    const weird = tools.find((t) => t.tool === "weird name!")!;
    expect(weird.publicName).toBe(`mcp__fx__weird_name___${toolHash("fx", "weird name!")}`);
    const longTool = tools.find((t) => t.tool === long)!;
    expect(longTool.publicName).toBe(`mcp__fx__${"t".repeat(41)}__${toolHash("fx", long)}`);
    expect(longTool.publicName).toHaveLength(64);
    for (const t of tools) expect(t.publicName).toMatch(/^[A-Za-z0-9_-]{1,64}$/);
    expect((await bridge.call(weird.publicName, "{}")).content).toBe("weird");
    expect((await bridge.call(longTool.publicName, "{}")).content).toBe("long");

    const verbose = tools.find((t) => t.tool === "verbose")!;
    expect(verbose.description).toHaveLength(DESCRIPTION_CAP);
    expect(verbose.description.endsWith("\n[description cut at 2 KB]")).toBe(true);
  });

  it("turns isError, bad arguments and a timeout into tool errors", async () => {
    const bridge = await start({ servers: { fx: fixture("main", { timeout_ms: 300 }) } });
    expect(await bridge.call("mcp__fx__fail", "{}")).toMatchObject({ content: "disk full", isError: true });
    const bad = await bridge.call("mcp__fx__sleep", "[1]");
    expect(bad).toMatchObject({ isError: true });
    expect(bad.content).toContain("must be a JSON object");
    const slow = await bridge.call("mcp__fx__sleep", JSON.stringify({ ms: 5_000 }));
    expect(slow.isError).toBe(true);
    expect(slow.content).toContain('sleep on MCP server "fx" did not answer within 300 ms');
    expect(slow.durationMs).toBeLessThan(3_000);
    // The server still answers after a timed-out call.
    expect((await bridge.call("mcp__fx__sleep", JSON.stringify({ ms: 1 }))).content).toBe("slept");
  });

  it("warns once when a server changes a pinned tool, after list_changed", async () => {
    const bridge = await start({ servers: { fx: fixture() } });
    expect(bridge.takeWarnings()).toEqual([]);
    await bridge.call("mcp__fx__change", "{}");
    const changed = await waitFor("the changed description", () => bridge.listTools().find((t) => t.tool === "reviewed" && t.description.includes("example.invalid")));
    expect(changed.publicName).toBe("mcp__fx__reviewed");
    const warnings = bridge.takeWarnings();
    expect(warnings).toEqual(['MCP server "fx" changed tool "reviewed" (its name, description or input schema differ from when it was first listed); review it before approving calls']);
    expect(bridge.servers()[0]!.warnings).toEqual(warnings);
  });

  it("rolls back a tool list whose public names collide and says which", async () => {
    const bridge = await start({ servers: { a: fixture("main"), a__b: fixture("a__b") } });
    expect(bridge.listTools().map((t) => t.publicName)).toContain("mcp__a__b__c");
    const before = bridge.servers().find((s) => s.name === "a")!.tools;
    await bridge.call("mcp__a__grow", "{}");
    const refused = await waitFor("the refused generation", () => bridge.servers().find((s) => s.name === "a" && s.error.includes("collide")));
    expect(refused.error).toContain('mcp__a__b__c (tool "b__c" and tool "c" of server "a__b")');
    expect(refused.tools).toEqual(before);
    expect(refused.state).toBe("ready");
    expect((await bridge.call("mcp__a__b__c", "{}")).content).toBe("c of a__b");
  });

  it("reconnects a killed server and lists its tools again", async () => {
    const bridge = await start({ servers: { fx: fixture(), other: everything() }, backoff: { initialMs: 50 } });
    const pid = bridge.pid("fx")!;
    expect(pid).toBeGreaterThan(0);
    process.kill(pid, "SIGKILL");
    await waitFor("the lost connection", () => bridge.servers()[0]!.state !== "ready" || bridge.pid("fx") !== pid);
    const back = await waitFor("fx ready in a new process", () => bridge.servers().find((s) => s.name === "fx" && s.state === "ready" && bridge.pid("fx") !== pid));
    expect(back.tools).toContain("mcp__fx__x");
    expect((await bridge.call("mcp__fx__x", "{}")).content).toBe("x");
  });

  it("withdraws the tools of a server whose reconnects are exhausted", async () => {
    const flag = join(dir, "allow-start");
    await writeFile(flag, "");
    // Starts only while the flag file exists: the first start works, every reconnect fails.
    const guarded = stdio("/bin/sh", ["-c", `test -e ${flag} && exec ${process.execPath} ${fixture().args[0]}`]);
    const bridge = await start({ servers: { fx: guarded }, backoff: { initialMs: 10, maxMs: 40, attempts: 3 } });
    expect(bridge.servers()[0]!.state).toBe("ready");
    await rm(flag);
    process.kill(bridge.pid("fx")!, "SIGKILL");
    const failed = await waitFor("fx given up", () => bridge.servers().find((s) => s.state === "failed"));
    expect(failed.error).toMatch(/^gave up after 3 reconnect attempts/);
    expect(failed.tools).toEqual([]);
    expect(bridge.listTools()).toEqual([]);
    expect(bridge.takeWarnings().some((w) => w.includes('MCP server "fx" gave up after 3 reconnect attempts'))).toBe(true);
    await expect(bridge.call("mcp__fx__x", "{}")).rejects.toMatchObject({ code: "mcp.unknown_tool" });
  });

  it("a server that crashes at start is one clear failed state; the others work", async () => {
    const crash = stdio(process.execPath, ["-e", "console.error('boom: OPENAI_API_KEY missing'); process.exit(3)"]);
    const bridge = await start({ servers: { broken: crash, everything: everything() } });
    const [broken, ok] = bridge.servers();
    expect(broken).toMatchObject({ name: "broken", state: "failed", tools: [] });
    expect(broken!.error).toContain('MCP server "broken" did not start');
    expect(broken!.error).toContain("boom: OPENAI_API_KEY missing");
    expect(ok).toMatchObject({ name: "everything", state: "ready" });
    expect((await bridge.call("mcp__everything__echo", JSON.stringify({ message: "still here" }))).content).toBe("Echo: still here");
  });
});

describe("Streamable HTTP", () => {
  it("lists and calls a server on 127.0.0.1 with the configured headers", async () => {
    const http = await startHttpServer();
    try {
      const bridge = await start({ servers: { remote: { url: http.url, headers: { "x-test": "from-config" } } } });
      expect(bridge.servers()[0]).toMatchObject({ state: "ready", tools: ["mcp__remote__add"] });
      expect(await bridge.call("mcp__remote__add", JSON.stringify({ a: 1, b: 2 }))).toMatchObject({ content: "3", isError: false });
      expect(http.headers.every((h) => h === "from-config")).toBe(true);
      expect(publicToolName("remote", "add")).toBe("mcp__remote__add");
    } finally {
      await http.close();
    }
  });
});
