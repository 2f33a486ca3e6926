// The MCP configuration files `tack mcp` edits: the user's ~/.tack/mcp.json and a workspace's
// .mcp.json, both in Claude Code's format {"mcpServers": {name: {...}}}. Servers are validated
// with the MCP service's own parser (@tack/mcp-config), so what is written here is
// exactly what the service accepts.
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { chmod, mkdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { basename, dirname, join, resolve } from "node:path";
import { TackError } from "@tack/bus";
import { importMcpConfig, loadMcpConfigFile, parseServers, type McpConfigFormat, type McpServerConfig } from "@tack/mcp-config";
import { parse as parseToml, stringify as stringifyToml } from "smol-toml";
import type { Scope } from "./args.js";

/** The user's home directory: HOME when set (so tests and `sudo -E` runs can point elsewhere), else the account's. */
export function userHome(env: NodeJS.ProcessEnv): string {
  return env.HOME || homedir();
}

/** One MCP configuration file of a scope. */
export interface McpConfigLocation {
  readonly scope: Scope;
  /** Absolute path. */
  readonly file: string;
  /** How it is shown and how the MCP service names the source: `user:~/.tack/mcp.json`, `workspace:.mcp.json`. */
  readonly label: string;
}

/** Where scope `scope` keeps its servers: `~/.tack/mcp.json` or `<workspace>/.mcp.json`. */
export function mcpConfigLocation(scope: Scope, home: string, workspace: string): McpConfigLocation {
  return scope === "user"
    ? { scope, file: join(home, ".tack", "mcp.json"), label: "user:~/.tack/mcp.json" }
    : { scope, file: join(workspace, ".mcp.json"), label: "workspace:.mcp.json" };
}

/** A configuration file as read: the whole document (other top-level keys are kept) and its servers as written. */
export interface McpDocument {
  readonly location: McpConfigLocation;
  readonly exists: boolean;
  /** The file's mode when it exists. */
  readonly mode: number | undefined;
  readonly document: Record<string, unknown>;
  /** `document.mcpServers`, created empty when absent. */
  readonly servers: Record<string, unknown>;
}

/** Reads a configuration file (a missing one is empty); refuses one that is not JSON or whose `mcpServers` is not an object. */
export async function readMcpDocument(location: McpConfigLocation): Promise<McpDocument> {
  let text: string;
  let mode: number;
  try {
    [text, mode] = await Promise.all([readFile(location.file, "utf8"), stat(location.file).then((s) => s.mode & 0o777)]);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") {
      const servers = {};
      return { location, exists: false, mode: undefined, document: { mcpServers: servers }, servers };
    }
    throw new TackError("cli.mcp_config_unreadable", `cannot read ${location.file} (${(error as NodeJS.ErrnoException).code ?? (error as Error).message}); check its permissions`, { cause: error });
  }
  let document: unknown;
  try {
    document = text.trim() === "" ? {} : JSON.parse(text);
  } catch (error) {
    throw new TackError("cli.mcp_config_invalid", `${location.file} is not valid JSON (${(error as Error).message}); fix it or move it away, then try again`, { cause: error });
  }
  if (typeof document !== "object" || document === null || Array.isArray(document)) {
    throw new TackError("cli.mcp_config_invalid", `${location.file} is not a JSON object; it should look like {"mcpServers": {"<name>": {"command": "...", "args": []}}}`);
  }
  const record = document as Record<string, unknown>;
  record.mcpServers ??= {};
  const servers = record.mcpServers;
  if (typeof servers !== "object" || servers === null || Array.isArray(servers)) {
    throw new TackError("cli.mcp_config_invalid", `${location.file}: "mcpServers" is not an object of server name → configuration; fix it or move the file away`);
  }
  return { location, exists: true, mode, document: record, servers: servers as Record<string, unknown> };
}

/**
 * Writes the document back whole (a temporary file, then a rename, so a reader never sees half of
 * it), keeping an existing file's mode; a new user file is 600 (it may hold tokens in `env`) in a
 * 700 `~/.tack`, a new workspace file 644.
 */
export async function writeMcpDocument(doc: McpDocument): Promise<void> {
  const { file, scope } = doc.location;
  const dir = dirname(file);
  await mkdir(dir, { recursive: true, mode: scope === "user" ? 0o700 : 0o755 });
  const mode = doc.mode ?? (scope === "user" ? 0o600 : 0o644);
  const temporary = join(dir, `.${basename(file)}.${process.pid}.${randomBytes(4).toString("hex")}.tmp`);
  try {
    await writeFile(temporary, `${JSON.stringify(doc.document, null, 2)}\n`, { mode });
    await chmod(temporary, mode);
    await rename(temporary, file);
  } catch (error) {
    await rm(temporary, { force: true });
    throw new TackError("cli.mcp_config_unwritable", `cannot write ${file} (${(error as NodeJS.ErrnoException).code ?? (error as Error).message}); check that ${dir} is writable`, { cause: error });
  }
}

/**
 * Validates one server with the MCP service's parser; the error names the file, the server and
 * the field (`~/.tack/mcp.json: mcp server "x": env.A: expected string`).
 */
export function validateServer(name: string, entry: unknown, source: string): McpServerConfig {
  return parseServers({ [name]: entry }, source)[name]!;
}

/** A validated server as an `.mcp.json` entry: Claude Code's fields (`type: "http"` for URLs), empty defaults left out. */
export function toMcpJsonEntry(config: McpServerConfig): Record<string, unknown> {
  const entry: Record<string, unknown> = "url" in config ? { type: "http", url: config.url } : { command: config.command, args: config.args };
  for (const [key, value] of Object.entries(config)) {
    if (key === "command" || key === "args" || key === "url" || value === undefined) continue;
    if (typeof value === "object" && value !== null && !Array.isArray(value) && Object.keys(value).length === 0) continue;
    entry[key] = value;
  }
  return entry;
}

/** One line saying what a server runs: `stdio: npx -y pkg` or `http: https://…`. */
export function describeServer(config: McpServerConfig): string {
  return "url" in config ? `http: ${config.url}` : `stdio: ${[config.command, ...config.args].map(shellWord).join(" ")}`;
}

function shellWord(word: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, "'\\''")}'`;
}

/** What `tack mcp import` reads: another harness's file and its format. */
export interface ImportSource {
  readonly file: string;
  readonly format: McpConfigFormat;
}

/** `claude-desktop` (this platform's path), `codex` (CODEX_HOME or ~/.codex) or a file whose name tells its format. */
export function importSource(from: string, cwd: string, env: NodeJS.ProcessEnv): ImportSource {
  const home = userHome(env);
  if (from === "claude-desktop") {
    const file = process.platform === "darwin"
      ? join(home, "Library", "Application Support", "Claude", "claude_desktop_config.json")
      : join(env.XDG_CONFIG_HOME || join(home, ".config"), "Claude", "claude_desktop_config.json");
    return { file, format: "claude_desktop" };
  }
  if (from === "codex") return { file: join(env.CODEX_HOME || join(home, ".codex"), "config.toml"), format: "codex" };
  const file = resolve(cwd, from);
  const name = basename(file);
  const format: McpConfigFormat | undefined = name.endsWith(".toml") ? "codex" : name === "claude_desktop_config.json" ? "claude_desktop" : name.endsWith(".json") ? "mcp.json" : undefined;
  if (!format) {
    throw new TackError("cli.mcp_import_source", `cannot tell the format of ${file}: give claude-desktop, codex, or a file named *.json (.mcp.json or claude_desktop_config.json format) or *.toml (Codex config.toml)`);
  }
  return { file, format };
}

/** One server of an imported file: validated, or left out with the reason. */
export type ImportedServer =
  | { readonly name: string; readonly config: McpServerConfig }
  | { readonly name: string; readonly skipped: string };

/**
 * Reads `source` and validates each of its servers on its own with the MCP service's importer, so
 * one broken server is reported and the others still come through. A file that cannot be read or
 * parsed at all is an error naming it.
 */
export async function readImportSource(source: ImportSource): Promise<ImportedServer[]> {
  let text: string;
  try {
    text = await readFile(source.file, "utf8");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
    const hint = source.format === "claude_desktop" ? "; is Claude Desktop set up for this user? Give the file's path instead: tack mcp import PATH"
      : source.format === "codex" ? "; is Codex set up for this user (CODEX_HOME)? Give the file's path instead: tack mcp import PATH" : "";
    throw new TackError("cli.mcp_import_source", `cannot read ${source.file} (${code})${hint}`, { cause: error });
  }
  const names = serverNames(text, source);
  const out: ImportedServer[] = [];
  for (const name of names) {
    try {
      const imported = importMcpConfig(singleServerText(text, source.format, name), source.format, source.file);
      const config = imported[name];
      out.push(config ? { name, config } : { name, skipped: "disabled in the source (enabled = false)" });
    } catch (error) {
      out.push({ name, skipped: TackError.from(error).message });
    }
  }
  return out;
}

/** The server names of a file, in its order; a file that does not parse gets the importer's own error. */
function serverNames(text: string, source: ImportSource): string[] {
  const table = rawServers(text, source.format);
  if (table === undefined) {
    // Not parseable or no servers table: the importer says exactly what is wrong.
    importMcpConfig(text, source.format, source.file);
    return [];
  }
  return Object.keys(table);
}

function rawServers(text: string, format: McpConfigFormat): Record<string, unknown> | undefined {
  try {
    const document = format === "codex" ? (parseToml(text) as Record<string, unknown>) : (JSON.parse(text) as unknown);
    if (typeof document !== "object" || document === null) return undefined;
    const servers = format === "codex" ? ((document as Record<string, unknown>).mcp_servers ?? {}) : (document as Record<string, unknown>).mcpServers;
    return typeof servers === "object" && servers !== null && !Array.isArray(servers) ? (servers as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** The file reduced to one server, in its own format, for the importer. */
function singleServerText(text: string, format: McpConfigFormat, name: string): string {
  const servers = rawServers(text, format)!;
  if (format === "codex") return stringifyToml({ mcp_servers: { [name]: servers[name] as Record<string, unknown> } });
  return JSON.stringify({ mcpServers: { [name]: servers[name] } });
}

/** A server as configured in the files (Tack not running). */
export interface ConfiguredServer {
  readonly name: string;
  readonly source: string;
  readonly transport: "stdio" | "http";
  /** What it runs (`stdio: …`, `http: …`). */
  readonly runs: string;
}

/** What the configuration files of `home` and `workspace` (and TACK_MCP_CONFIG, the operator's) configure, and each file's problem. */
export async function configuredServers(home: string, workspace: string, env: NodeJS.ProcessEnv): Promise<{ servers: ConfiguredServer[]; problems: string[] }> {
  const servers: ConfiguredServer[] = [];
  const problems: string[] = [];
  const add = (source: string, configs: Record<string, McpServerConfig>) => {
    for (const [name, config] of Object.entries(configs)) servers.push({ name, source, transport: "url" in config ? "http" : "stdio", runs: describeServer(config) });
  };
  if (env.TACK_MCP_CONFIG) {
    try {
      add("operator", await loadMcpConfigFile(env.TACK_MCP_CONFIG));
    } catch (error) {
      problems.push(TackError.from(error).message);
    }
  }
  for (const location of [mcpConfigLocation("user", home, workspace), mcpConfigLocation("workspace", home, workspace)]) {
    if (!existsSync(location.file)) continue;
    // Entry by entry, as the MCP service reads them: a broken server is a problem, the others still count.
    try {
      for (const server of await readImportSource({ file: location.file, format: "mcp.json" })) {
        if ("config" in server) add(location.label, { [server.name]: server.config });
        else problems.push(server.skipped);
      }
    } catch (error) {
      problems.push(TackError.from(error).message);
    }
  }
  return { servers, problems };
}
