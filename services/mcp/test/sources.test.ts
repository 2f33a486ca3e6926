// The configuration sources on their own: merging, labels, re-reading, caps and refusals (no servers started).
import { mkdir, mkdtemp, rm, symlink, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { importMcpJsonLenient } from "@tack/mcp-config";
import { ConfigSources, MAX_CONFIG_BYTES } from "../src/index.js";

let root: string;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "tack-mcp-sources-"));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

async function dirWith(name: string, files: Record<string, string>): Promise<string> {
  const dir = join(root, name);
  await mkdir(dir, { recursive: true });
  for (const [file, text] of Object.entries(files)) {
    await mkdir(join(dir, file, ".."), { recursive: true });
    await writeFile(join(dir, file), text);
  }
  return dir;
}

const servers = (entries: Record<string, unknown>) => JSON.stringify({ mcpServers: entries });

describe("configuration sources", () => {
  it("merges operator, user and workspace servers, a later source winning by name", async () => {
    const home = await dirWith("home1", { ".tack/mcp.json": servers({ shared: { command: "user-cmd" }, mine: { url: "https://mcp.example.com/mcp" } }) });
    const ws = await dirWith("ws1", { ".mcp.json": servers({ shared: { command: "ws-cmd", args: ["a"] } }) });
    const sources = new ConfigSources({ shared: { command: "op", args: [], env: {} }, op: { command: "op2", args: [], env: {}, run: "host" } }, home);
    const merged = await sources.merged(ws);
    expect(merged.warnings).toEqual([]);
    expect(merged.servers.map((s) => [s.name, s.source])).toEqual([["op", "operator"], ["mine", "user:~/.tack/mcp.json"], ["shared", "workspace:.mcp.json"]]);
    expect(merged.servers.find((s) => s.name === "shared")!.config).toMatchObject({ command: "ws-cmd", args: ["a"] });
    // Without a workspace: operator and user only.
    expect((await sources.merged("")).servers.map((s) => s.name)).toEqual(["op", "shared", "mine"]);
  });

  it("re-reads a file when it changes and keeps a broken entry as a failed server beside the good ones", async () => {
    const ws = await dirWith("ws2", { ".mcp.json": servers({ a: { command: "x" } }) });
    const sources = new ConfigSources({}, undefined);
    expect((await sources.merged(ws)).servers.map((s) => s.name)).toEqual(["a"]);
    await writeFile(join(ws, ".mcp.json"), servers({ a: { command: "x" }, b: { command: "y", colour: "red" }, c: { type: "sse", url: "https://e.example/sse" } }));
    await utimes(join(ws, ".mcp.json"), new Date(), new Date(Date.now() + 5_000));
    const merged = await sources.merged(ws);
    expect(merged.servers.map((s) => [s.name, s.broken === undefined])).toEqual([["a", true], ["b", false], ["c", false]]);
    expect(merged.servers[1]!.broken).toContain('workspace:.mcp.json: mcp server "b"');
    expect(merged.servers[1]!.broken).toContain("colour");
    expect(merged.servers[2]!.broken).toContain('type "sse" is not supported');
  });

  it("warns about a file that is not JSON, too large or a symlink out of the workspace; the others still count", async () => {
    const home = await dirWith("home3", { ".tack/mcp.json": "{ nope" });
    const big = await dirWith("ws3", { ".mcp.json": servers({ a: { command: "x", args: ["y".repeat(MAX_CONFIG_BYTES)] } }) });
    const sources = new ConfigSources({ op: { command: "op", args: [], env: {} } }, home);
    const merged = await sources.merged(big);
    expect(merged.servers.map((s) => s.name)).toEqual(["op"]);
    expect(merged.warnings).toEqual([
      expect.stringMatching(/^user:~\/\.tack\/mcp\.json: not valid JSON: .*; the servers it holds are left out$/),
      expect.stringContaining(`over the ${MAX_CONFIG_BYTES}-byte limit; it was not read`),
    ]);

    const outside = await dirWith("outside", { "x.json": servers({ a: { command: "x" } }) });
    const linked = await dirWith("ws4", {});
    await symlink(join(outside, "x.json"), join(linked, ".mcp.json"));
    expect((await new ConfigSources({}).merged(linked)).warnings).toEqual([expect.stringContaining("symlink leading out of the workspace")]);
    // A symlink to a file inside the workspace is read.
    const inside = await dirWith("ws5", { "conf/servers.json": servers({ a: { command: "x" } }) });
    await symlink(join(inside, "conf/servers.json"), join(inside, ".mcp.json"));
    expect((await new ConfigSources({}).merged(inside)).servers.map((s) => s.name)).toEqual(["a"]);
  });

  it("refuses run: host outside the operator's configuration", async () => {
    const ws = await dirWith("ws6", { ".mcp.json": servers({ local: { command: "x", run: "host" }, fine: { command: "y", run: "sandbox" } }) });
    const merged = await new ConfigSources({}).merged(ws);
    expect(merged.servers.map((s) => [s.name, s.broken ?? "ok"])).toEqual([
      ["local", 'workspace:.mcp.json: mcp server "local": run "host" is honoured only in the operator\'s configuration (TACK_MCP_CONFIG); remove it to run the server in the session\'s sandbox'],
      ["fine", "ok"],
    ]);
  });

  it("importMcpJsonLenient still refuses a file that is not a servers file", () => {
    expect(() => importMcpJsonLenient("[]", "x.json")).toThrow('x.json: no "mcpServers" object');
    expect(() => importMcpJsonLenient('{"mcpServers": 3}', "x.json")).toThrow('"mcpServers" must be an object');
    expect(importMcpJsonLenient(servers({ ok: { command: "a" }, bad: 7 }), "x.json").broken).toEqual({ bad: expect.stringContaining('mcp server "bad"') });
  });
});
