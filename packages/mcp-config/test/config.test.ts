// Configuration: validation that names the server and field, and imports of the three formats.
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { importMcpConfig, loadMcpConfigFile, parseServers } from "../src/index.js";

describe("parseServers", () => {
  it("fills defaults for stdio and HTTP servers", () => {
    expect(parseServers({ fs: { command: "npx", args: ["-y", "x"] }, web: { url: "https://example.invalid/mcp" } })).toEqual({
      fs: { command: "npx", args: ["-y", "x"], env: {} },
      web: { url: "https://example.invalid/mcp", headers: {} },
    });
  });

  it("names the server and the field that is wrong", () => {
    expect(() => parseServers({ fs: { command: "npx", args: ["ok", 3] } })).toThrow('mcp configuration: mcp server "fs": args.1:');
    expect(() => parseServers({ fs: { command: "npx", approval: { write: "sometimes" } } })).toThrow(/mcp server "fs": approval\.write: .*"ask"/);
    expect(() => parseServers({ fs: { command: "npx", timeout_ms: -1 } })).toThrow('mcp server "fs": timeout_ms:');
    expect(() => parseServers({ fs: { command: "npx", commnd: "typo" } })).toThrow(/mcp server "fs": .*commnd/);
    expect(() => parseServers({ web: { url: "ftp://example.invalid" } })).toThrow('mcp server "web": url:');
    expect(() => parseServers({ both: { command: "x", url: "http://127.0.0.1/" } })).toThrow('mcp server "both": set either command (a stdio server) or url (a Streamable HTTP server), not both');
    expect(() => parseServers({ none: { args: [] } })).toThrow("not neither");
    expect(() => parseServers({ "bad name!": { command: "x" } })).toThrow('mcp server "bad name!": name must be');
    expect(() => parseServers([])).toThrow("servers must be an object");
  });
});

describe("imports", () => {
  it("reads .mcp.json with stdio and http servers", () => {
    const servers = importMcpConfig(JSON.stringify({
      mcpServers: {
        files: { command: "npx", args: ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"], env: { DEBUG: "1" } },
        remote: { type: "http", url: "https://example.invalid/mcp", headers: { Authorization: "Bearer x" } },
      },
    }), "mcp.json");
    expect(servers).toEqual({
      files: { command: "npx", args: ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"], env: { DEBUG: "1" } },
      remote: { url: "https://example.invalid/mcp", headers: { Authorization: "Bearer x" } },
    });
  });

  it("reads Claude Desktop's file and refuses SSE, bad JSON and a missing mcpServers", () => {
    expect(importMcpConfig('{"mcpServers":{"memory":{"command":"npx","args":["-y","@modelcontextprotocol/server-memory"]}},"globalShortcut":"x"}', "claude_desktop"))
      .toEqual({ memory: { command: "npx", args: ["-y", "@modelcontextprotocol/server-memory"], env: {} } });
    expect(() => importMcpConfig('{"mcpServers":{"old":{"type":"sse","url":"http://127.0.0.1/sse"}}}', "claude_desktop", "claude_desktop_config.json"))
      .toThrow('claude_desktop_config.json: mcp server "old": type "sse" is not supported');
    expect(() => importMcpConfig("{", "mcp.json", ".mcp.json")).toThrow(".mcp.json: not valid JSON");
    expect(() => importMcpConfig("{}", "mcp.json", ".mcp.json")).toThrow('.mcp.json: no "mcpServers" object');
    expect(() => importMcpConfig('{"mcpServers":{"x":{"command":"npx","env":{"A":1}}}}', "mcp.json", ".mcp.json")).toThrow('.mcp.json: mcp server "x": env.A:');
  });

  it("reads Codex's config.toml [mcp_servers.<name>] tables", () => {
    const toml = `
model = "o3"

[mcp_servers.docs]
command = "docs-server"
args = ["--port", "0"]
env = { API_KEY = "k" }
enabled_tools = ["search"]
tool_timeout_sec = 2.5
startup_timeout_sec = 20

[mcp_servers.remote]
url = "https://example.invalid/mcp"
http_headers = { "X-Team" = "a" }

[mcp_servers.off]
command = "nothing"
enabled = false
`;
    expect(importMcpConfig(toml, "codex")).toEqual({
      docs: { command: "docs-server", args: ["--port", "0"], env: { API_KEY: "k" }, enabled_tools: ["search"], timeout_ms: 2500 },
      remote: { url: "https://example.invalid/mcp", headers: { "X-Team": "a" } },
    });
    expect(() => importMcpConfig("[mcp_servers.docs]\ncommand = 3\n", "codex", "config.toml")).toThrow('config.toml: mcp server "docs": command:');
    expect(() => importMcpConfig("[mcp_servers.docs]\ncommand = \"x\"\ntool_timeout_sec = \"soon\"\n", "codex", "config.toml")).toThrow('config.toml: mcp server "docs": tool_timeout_sec: expected a positive number of seconds');
    expect(() => importMcpConfig("[mcp_servers\n", "codex", "config.toml")).toThrow("config.toml: not valid TOML");
  });

  it("loads a file by its name", async () => {
    const dir = await mkdtemp(join(tmpdir(), "tack-mcp-config-"));
    try {
      await writeFile(join(dir, "config.toml"), '[mcp_servers.a]\ncommand = "a"\n');
      await writeFile(join(dir, "claude_desktop_config.json"), '{"mcpServers":{"b":{"command":"b"}}}');
      await writeFile(join(dir, ".mcp.json"), '{"mcpServers":{"c":{"url":"http://127.0.0.1:1/mcp"}}}');
      expect(Object.keys(await loadMcpConfigFile(join(dir, "config.toml")))).toEqual(["a"]);
      expect(Object.keys(await loadMcpConfigFile(join(dir, "claude_desktop_config.json")))).toEqual(["b"]);
      expect(Object.keys(await loadMcpConfigFile(join(dir, ".mcp.json")))).toEqual(["c"]);
      await expect(loadMcpConfigFile(join(dir, "servers.yaml"))).rejects.toThrow("unknown configuration format");
      await expect(loadMcpConfigFile(join(dir, "missing.json"))).rejects.toThrow(`cannot read ${join(dir, "missing.json")}`);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
