// `tack mcp add|remove|import|list` on real files (a temporary HOME and project), parsed from the
// command line as the executable does; list without a running Tack reads the files.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { parseCommand, type McpCommand } from "../src/args.js";
import { mcpCommand, type McpListReport } from "../src/commands/mcp.js";

const scratch = mkdtempSync(join(tmpdir(), "tack-mcp-command-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

let home: string;
let project: string;
let env: NodeJS.ProcessEnv;
let stdout: string;

beforeEach(() => {
  const dir = mkdtempSync(join(scratch, "case-"));
  home = join(dir, "home");
  project = join(dir, "project");
  mkdirSync(home, { recursive: true });
  mkdirSync(project, { recursive: true });
  // Only what the commands read: no NATS_URL, so no running Tack is looked for on a bus.
  env = { HOME: home, PATH: process.env.PATH };
  stdout = "";
  vi.spyOn(process.stdout, "write").mockImplementation((chunk: string | Uint8Array) => {
    stdout += String(chunk);
    return true;
  });
});
afterEach(() => vi.restoreAllMocks());

/** Runs `tack mcp ...` in the project; resolves with the exit code, or rejects with the command's error. */
async function tackMcp(...argv: string[]): Promise<number> {
  return mcpCommand(parseCommand(["mcp", ...argv]) as McpCommand, project, env);
}

const userFile = () => join(home, ".tack", "mcp.json");
const workspaceFile = () => join(project, ".mcp.json");
const read = (file: string) => JSON.parse(readFileSync(file, "utf8")) as { mcpServers: Record<string, unknown> } & Record<string, unknown>;

describe("tack mcp add and remove", () => {
  it("mcp-command - add writes the .mcp.json format: a command after --, a URL, an npm package; user file 600 in a 700 ~/.tack", async () => {
    expect(await tackMcp("add", "files", "--env", "ROOT=/srv", "--env", "MODE=ro", "--", "node", "server.js", "--port", "0")).toBe(0);
    expect(stdout).toContain('✓ added MCP server "files" (stdio: node server.js --port 0) in ~/.tack/mcp.json');
    expect(await tackMcp("add", "memory", "@modelcontextprotocol/server-memory@1.2.3", "--approval", "never")).toBe(0);
    expect(stdout).toContain("which has no network unless the tenant's egress policy allows npm");
    expect(read(userFile()).mcpServers).toEqual({
      files: { command: "node", args: ["server.js", "--port", "0"], env: { ROOT: "/srv", MODE: "ro" } },
      memory: { command: "npx", args: ["-y", "@modelcontextprotocol/server-memory@1.2.3"], default_approval: "never" },
    });
    expect(statSync(userFile()).mode & 0o777).toBe(0o600);
    expect(statSync(join(home, ".tack")).mode & 0o777).toBe(0o700);

    expect(await tackMcp("add", "remote", "https://mcp.example.com/v1", "--header", "Authorization: Bearer abc", "--scope", "workspace")).toBe(0);
    expect(stdout).toContain(`✓ added MCP server "remote" (http: https://mcp.example.com/v1) in ${workspaceFile()}`);
    expect(read(workspaceFile())).toEqual({ mcpServers: { remote: { type: "http", url: "https://mcp.example.com/v1", headers: { Authorization: "Bearer abc" } } } });
  });

  it("mcp-command - add keeps the other servers and keys of an existing file and its mode, refuses a taken name without --force", async () => {
    mkdirSync(join(home, ".tack"), { recursive: true });
    writeFileSync(userFile(), JSON.stringify({ mcpServers: { kept: { command: "a" } }, other: { x: 1 } }), { mode: 0o640 });
    await tackMcp("add", "new", "--", "b");
    expect(read(userFile())).toEqual({ mcpServers: { kept: { command: "a" }, new: { command: "b", args: [] } }, other: { x: 1 } });
    expect(statSync(userFile()).mode & 0o777).toBe(0o640);
    await expect(tackMcp("add", "kept", "--", "c")).rejects.toMatchObject({
      code: "cli.mcp_exists",
      message: `${userFile()} already has an MCP server named "kept"; pass --force to replace it, or choose another name (\`tack mcp remove kept\` removes it)`,
    });
    expect(await tackMcp("add", "kept", "--force", "--", "c")).toBe(0);
    expect(stdout).toContain('✓ replaced MCP server "kept" (stdio: c)');
    expect(read(userFile()).mcpServers.kept).toEqual({ command: "c", args: [] });
  });

  it("mcp-command - the MCP service's parser refuses a bad name or field, naming the file and the server; nothing is written", async () => {
    await expect(tackMcp("add", "bad name", "--", "x")).rejects.toMatchObject({
      code: "mcp.invalid_config",
      message: `${userFile()}: mcp server "bad name": name must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit`,
    });
    await expect(tackMcp("add", "-x", "--", "x")).rejects.toMatchObject({ code: "cli.usage" });
    writeFileSync(workspaceFile(), "{ not json");
    await expect(tackMcp("add", "ok", "--scope", "workspace", "--", "x")).rejects.toMatchObject({ code: "cli.mcp_config_invalid", message: expect.stringMatching(new RegExp(`^${workspaceFile()} is not valid JSON \\(.*\\); fix it or move it away, then try again$`)) });
    expect(readFileSync(workspaceFile(), "utf8")).toBe("{ not json");
    expect(() => statSync(userFile())).toThrow();
  });

  it("mcp-command - remove deletes one server; a name that is not there says where it is instead", async () => {
    await tackMcp("add", "a", "--", "x");
    await tackMcp("add", "b", "--", "y");
    await tackMcp("add", "w", "--scope", "workspace", "--", "z");
    expect(await tackMcp("remove", "a")).toBe(0);
    expect(stdout).toContain('✓ removed MCP server "a" from ~/.tack/mcp.json');
    expect(Object.keys(read(userFile()).mcpServers)).toEqual(["b"]);
    await expect(tackMcp("remove", "w")).rejects.toMatchObject({ code: "cli.mcp_unknown", message: `${userFile()} has no MCP server named "w"; it is in ${workspaceFile()}: add --scope workspace` });
    await expect(tackMcp("remove", "zz")).rejects.toMatchObject({ message: `${userFile()} has no MCP server named "zz"; it has b` });
    expect(await tackMcp("remove", "w", "--scope", "workspace")).toBe(0);
    expect(read(workspaceFile()).mcpServers).toEqual({});
  });
});

describe("tack mcp import", () => {
  it("mcp-command - import claude-desktop copies each valid server, skips an SSE one and a taken name, reports each (exit 1: one was invalid)", async () => {
    const desktop = join(home, ".config", "Claude", "claude_desktop_config.json");
    mkdirSync(join(home, ".config", "Claude"), { recursive: true });
    writeFileSync(desktop, JSON.stringify({
      mcpServers: {
        memory: { command: "npx", args: ["-y", "@modelcontextprotocol/server-memory"] },
        old: { type: "sse", url: "https://sse.example.com/sse" },
        git: { command: "uvx", args: ["mcp-server-git"], env: { GIT_DIR: "/r" } },
        taken: { command: "other" },
      },
      globalShortcut: "Ctrl+Space",
    }));
    await tackMcp("add", "taken", "--", "mine");
    stdout = "";
    expect(await tackMcp("import", "claude-desktop")).toBe(1);
    expect(stdout).toBe([
      "✓ imported memory (stdio: npx -y @modelcontextprotocol/server-memory)",
      `- skipped old: ${desktop}: mcp server "old": type "sse" is not supported; use the server's Streamable HTTP endpoint (type "http")`,
      "✓ imported git (stdio: uvx mcp-server-git)",
      "- skipped taken: ~/.tack/mcp.json already has a server of that name (--force replaces it)",
      "2 server(s) imported into ~/.tack/mcp.json, 2 skipped",
      "",
    ].join("\n"));
    expect(read(userFile()).mcpServers).toEqual({
      taken: { command: "mine", args: [] },
      memory: { command: "npx", args: ["-y", "@modelcontextprotocol/server-memory"] },
      git: { command: "uvx", args: ["mcp-server-git"], env: { GIT_DIR: "/r" } },
    });
    stdout = "";
    expect(await tackMcp("import", desktop, "--force")).toBe(1);
    expect(stdout).toContain("3 server(s) imported into ~/.tack/mcp.json, 1 skipped");
    expect(read(userFile()).mcpServers.taken).toEqual({ command: "other", args: [] });
  });

  it("mcp-command - import codex reads [mcp_servers] of CODEX_HOME/config.toml into the workspace's .mcp.json; a disabled server is skipped", async () => {
    const codexHome = join(home, "codex");
    mkdirSync(codexHome);
    writeFileSync(join(codexHome, "config.toml"), [
      'model = "o3"',
      "[mcp_servers.docs]", 'command = "npx"', 'args = ["-y", "docs-mcp"]', "startup_timeout_sec = 20", "tool_timeout_sec = 30",
      "[mcp_servers.off]", 'command = "x"', "enabled = false",
      "[mcp_servers.web]", 'url = "https://api.example.com/mcp"', 'http_headers = { "X-Key" = "abc" }',
      "",
    ].join("\n"));
    env.CODEX_HOME = codexHome;
    expect(await tackMcp("import", "codex", "--scope", "workspace")).toBe(0);
    expect(stdout).toBe([
      "✓ imported docs (stdio: npx -y docs-mcp)",
      "- skipped off: disabled in the source (enabled = false)",
      "✓ imported web (http: https://api.example.com/mcp)",
      `2 server(s) imported into ${workspaceFile()}, 1 skipped`,
      "",
    ].join("\n"));
    expect(read(workspaceFile()).mcpServers).toEqual({
      docs: { command: "npx", args: ["-y", "docs-mcp"], timeout_ms: 30_000 },
      web: { type: "http", url: "https://api.example.com/mcp", headers: { "X-Key": "abc" } },
    });
  });

  it("mcp-command - import of a missing, unparseable or unknown-format file fails naming it", async () => {
    await expect(tackMcp("import", "claude-desktop")).rejects.toMatchObject({
      code: "cli.mcp_import_source",
      message: `cannot read ${join(home, ".config", "Claude", "claude_desktop_config.json")} (ENOENT); is Claude Desktop set up for this user? Give the file's path instead: tack mcp import PATH`,
    });
    writeFileSync(join(project, "servers.json"), '{"servers": {}}');
    await expect(tackMcp("import", "servers.json")).rejects.toMatchObject({ code: "mcp.invalid_config", message: expect.stringContaining(`${join(project, "servers.json")}: no "mcpServers" object`) });
    await expect(tackMcp("import", "servers.yaml")).rejects.toMatchObject({ code: "cli.mcp_import_source", message: expect.stringContaining(`cannot tell the format of ${join(project, "servers.yaml")}`) });
  });
});

describe("tack mcp list without a running Tack", () => {
  it("mcp-command - list says Tack is not running and shows what the user's and the workspace's files configure", async () => {
    await tackMcp("add", "memory", "@modelcontextprotocol/server-memory");
    await tackMcp("add", "remote", "http://127.0.0.1:9/mcp", "--scope", "workspace");
    stdout = "";
    expect(await tackMcp("list")).toBe(0);
    expect(stdout).toMatch(/^Tack is not running \(.*\); the configured servers:\n\n/);
    expect(stdout).toContain([
      "memory  not running · stdio · user:~/.tack/mcp.json",
      "  runs      stdio: npx -y @modelcontextprotocol/server-memory",
      "",
      "remote  not running · http · workspace:.mcp.json",
      "  runs      http: http://127.0.0.1:9/mcp",
      "",
    ].join("\n"));
    stdout = "";
    expect(await tackMcp("list", "--json")).toBe(0);
    const report = JSON.parse(stdout) as McpListReport;
    expect(report).toMatchObject({ running: false, workspace: project, problems: [] });
    expect(report.servers.map((s) => [s.name, s.state, s.transport, s.source])).toEqual([
      ["memory", "not running", "stdio", "user:~/.tack/mcp.json"],
      ["remote", "not running", "http", "workspace:.mcp.json"],
    ]);
  });

  it("mcp-command - list --workspace reads that workspace's .mcp.json; a broken file is reported (exit 1) and the others still count", async () => {
    const other = join(project, "other");
    mkdirSync(other);
    writeFileSync(join(other, ".mcp.json"), JSON.stringify({ mcpServers: { bad: { command: 7 }, good: { url: "http://127.0.0.1:9/mcp" } } }));
    await tackMcp("add", "memory", "@modelcontextprotocol/server-memory");
    stdout = "";
    expect(await tackMcp("list", "--workspace", "other")).toBe(1);
    expect(stdout).toContain("memory  not running · stdio · user:~/.tack/mcp.json");
    expect(stdout).toContain("good  not running · http · workspace:.mcp.json");
    expect(stdout).toContain(`✗ ${join(other, ".mcp.json")}: mcp server "bad": command: `);
    await expect(tackMcp("list", "--workspace", "missing")).rejects.toMatchObject({
      code: "cli.bad_workspace", message: `the workspace ${join(project, "missing")} is not an existing directory; pass --workspace DIR with a project directory (default: the current directory)`,
    });
  });
});
