// Configuration of the MCP bridge: which servers to run and how their tools are offered, plus
// imports of the files other harnesses keep them in (.mcp.json, Claude Desktop, Codex).
import { readFile } from "node:fs/promises";
import { basename } from "node:path";
import { TackError } from "@tack/bus";
import { parse as parseToml } from "smol-toml";
import { z } from "zod";

/** Whether the loop asks the user before a call. */
export const Approval = z.enum(["ask", "never"]);
export type Approval = z.infer<typeof Approval>;

const toolFilters = {
  enabled_tools: z.array(z.string().min(1)).optional().describe("only these tools are offered (default: all)"),
  disabled_tools: z.array(z.string().min(1)).optional().describe("these tools are never offered (applied after enabled_tools)"),
  approval: z.record(z.string(), Approval).optional().describe("per tool: ask (default) or never"),
  default_approval: Approval.optional().describe("approval of tools not named in approval (default ask)"),
  timeout_ms: z.number().int().positive().optional().describe("call timeout of this server's tools (default: the bridge's, 60 s)"),
};

export const StdioServerConfig = z.strictObject({
  command: z.string().min(1),
  args: z.array(z.string()).default([]),
  env: z.record(z.string(), z.string()).default({}),
  cwd: z.string().min(1).optional(),
  /** Where the process runs: the session's sandbox container (default), or, for the operator's own servers only, a host child process. */
  run: z.enum(["sandbox", "host"]).optional().describe("sandbox (default): in the session's sandbox container; host: a child process of the MCP service (operator configuration only)"),
  ...toolFilters,
});
export type StdioServerConfig = z.infer<typeof StdioServerConfig>;

export const HttpServerConfig = z.strictObject({
  url: z.url({ protocol: /^https?$/ }),
  headers: z.record(z.string(), z.string()).default({}),
  ...toolFilters,
});
export type HttpServerConfig = z.infer<typeof HttpServerConfig>;

/** One MCP server: a command run over stdio, or a Streamable HTTP endpoint. */
export type McpServerConfig = StdioServerConfig | HttpServerConfig;

/** Server names become part of tool names and log lines: keep them short and printable. */
const SERVER_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

function issues(error: z.ZodError): string {
  return error.issues.map((issue) => `${issue.path.length ? issue.path.join(".") : "(server)"}: ${issue.message}`).join("; ");
}

/**
 * Validates a map of server name → configuration. Errors name the server and the field, e.g.
 * `mcp server "files": args.1: expected string`.
 */
export function parseServers(input: unknown, source = "mcp configuration"): Record<string, McpServerConfig> {
  if (typeof input !== "object" || input === null || Array.isArray(input)) {
    throw new TackError("mcp.invalid_config", `${source}: servers must be an object of name → {command, args, env, cwd} or {url, headers}`);
  }
  const out: Record<string, McpServerConfig> = {};
  for (const [name, raw] of Object.entries(input)) {
    if (!SERVER_NAME.test(name)) {
      throw new TackError("mcp.invalid_config", `${source}: mcp server ${JSON.stringify(name)}: name must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit`);
    }
    const isObject = typeof raw === "object" && raw !== null && !Array.isArray(raw);
    const hasCommand = isObject && "command" in raw;
    const hasUrl = isObject && "url" in raw;
    if (hasCommand === hasUrl) {
      throw new TackError("mcp.invalid_config", `${source}: mcp server "${name}": set either command (a stdio server) or url (a Streamable HTTP server), not ${hasCommand ? "both" : "neither"}`);
    }
    const parsed = (hasCommand ? StdioServerConfig : HttpServerConfig).safeParse(raw);
    if (!parsed.success) throw new TackError("mcp.invalid_config", `${source}: mcp server "${name}": ${issues(parsed.error)}`);
    out[name] = parsed.data;
  }
  return out;
}

/** Servers that validated, and a message for each one that did not (it is left out). */
export interface LenientServers {
  readonly servers: Record<string, McpServerConfig>;
  /** Server name → what is wrong with its entry. */
  readonly broken: Record<string, string>;
}

/**
 * Like `parseServers`, but one broken entry does not spoil the others: each entry is checked on
 * its own and a bad one is reported in `broken` (the whole input not being an object still throws).
 */
export function parseServersLenient(input: unknown, source: string): LenientServers {
  if (typeof input !== "object" || input === null || Array.isArray(input)) parseServers(input, source);
  const servers: Record<string, McpServerConfig> = {};
  const broken: Record<string, string> = {};
  for (const [name, raw] of Object.entries(input as Record<string, unknown>)) {
    try {
      Object.assign(servers, parseServers({ [name]: raw }, source));
    } catch (error) {
      broken[name] = (error as Error).message;
    }
  }
  return { servers, broken };
}

/** The configuration file formats `importMcpConfig` reads. */
export type McpConfigFormat = "mcp.json" | "claude_desktop" | "codex";

/** Claude Code's .mcp.json and Claude Desktop's file: `{"mcpServers": {name: {command, args, env} | {type, url, headers}}}`. */
function fromMcpServers(document: unknown, source: string): Record<string, unknown> {
  if (typeof document !== "object" || document === null || !("mcpServers" in document)) {
    throw new TackError("mcp.invalid_config", `${source}: no "mcpServers" object; expected {"mcpServers": {"<name>": {"command": ..., "args": [...]}}}`);
  }
  const servers = (document as { mcpServers: unknown }).mcpServers;
  if (typeof servers !== "object" || servers === null || Array.isArray(servers)) throw new TackError("mcp.invalid_config", `${source}: "mcpServers" must be an object of server name → configuration`);
  const out: Record<string, unknown> = {};
  for (const [name, raw] of Object.entries(servers)) {
    if (typeof raw !== "object" || raw === null) {
      out[name] = raw;
      continue;
    }
    // `type` says which transport; the fields tell us too. Only SSE, which we do not speak, needs a word.
    const { type, ...rest } = raw as Record<string, unknown>;
    if (type === "sse") throw new TackError("mcp.invalid_config", `${source}: mcp server "${name}": type "sse" is not supported; use the server's Streamable HTTP endpoint (type "http")`);
    if (type !== undefined && type !== "stdio" && type !== "http") throw new TackError("mcp.invalid_config", `${source}: mcp server "${name}": type: expected "stdio" or "http", got ${JSON.stringify(type)}`);
    out[name] = rest;
  }
  return out;
}

/** Codex's config.toml: `[mcp_servers.<name>]` with command, args, env, cwd, url, http_headers, enabled_tools, disabled_tools, tool_timeout_sec, enabled. */
function fromCodex(document: Record<string, unknown>, source: string): Record<string, unknown> {
  const servers = document.mcp_servers ?? {};
  if (typeof servers !== "object" || servers === null || Array.isArray(servers)) throw new TackError("mcp.invalid_config", `${source}: mcp_servers must be a table of [mcp_servers.<name>] tables`);
  const out: Record<string, unknown> = {};
  for (const [name, raw] of Object.entries(servers)) {
    if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
      out[name] = raw;
      continue;
    }
    const { enabled, http_headers, tool_timeout_sec, ...rest } = raw as Record<string, unknown>;
    if (enabled === false) continue;
    // No equivalent here: start-up timeouts are ours, and passing the parent's variables by name
    // (env_vars, bearer_token_env_var) is what the scrubbed environment refuses.
    for (const key of ["startup_timeout_sec", "startup_timeout_ms", "bearer_token_env_var", "env_vars"]) delete rest[key];
    const server: Record<string, unknown> = { ...rest };
    if (http_headers !== undefined) server.headers = http_headers;
    if (tool_timeout_sec !== undefined) {
      if (typeof tool_timeout_sec !== "number" || !(tool_timeout_sec > 0)) throw new TackError("mcp.invalid_config", `${source}: mcp server "${name}": tool_timeout_sec: expected a positive number of seconds`);
      server.timeout_ms = Math.round(tool_timeout_sec * 1000);
    }
    out[name] = server;
  }
  return out;
}

/** Parses the text of another harness's configuration file into validated servers. */
export function importMcpConfig(text: string, format: McpConfigFormat, source: string = format): Record<string, McpServerConfig> {
  if (format === "codex") {
    let document: Record<string, unknown>;
    try {
      document = parseToml(text) as Record<string, unknown>;
    } catch (error) {
      throw new TackError("mcp.invalid_config", `${source}: not valid TOML: ${(error as Error).message.split("\n")[0]}`, { cause: error });
    }
    return parseServers(fromCodex(document, source), source);
  }
  let document: unknown;
  try {
    document = JSON.parse(text);
  } catch (error) {
    throw new TackError("mcp.invalid_config", `${source}: not valid JSON: ${(error as Error).message}`, { cause: error });
  }
  return parseServers(fromMcpServers(document, source), source);
}

/**
 * Parses a `.mcp.json`-format text (`{"mcpServers": {...}}`) entry by entry: a file that is not
 * JSON or has no `mcpServers` object throws; a bad entry is reported in `broken`, the rest kept.
 */
export function importMcpJsonLenient(text: string, source: string): LenientServers {
  let document: unknown;
  try {
    document = JSON.parse(text);
  } catch (error) {
    throw new TackError("mcp.invalid_config", `${source}: not valid JSON: ${(error as Error).message}`, { cause: error });
  }
  if (typeof document !== "object" || document === null || !("mcpServers" in document)) fromMcpServers(document, source);
  const entries = (document as { mcpServers: unknown }).mcpServers;
  if (typeof entries !== "object" || entries === null || Array.isArray(entries)) fromMcpServers(document, source);
  const servers: Record<string, McpServerConfig> = {};
  const broken: Record<string, string> = {};
  for (const [name, raw] of Object.entries(entries as Record<string, unknown>)) {
    try {
      Object.assign(servers, parseServers(fromMcpServers({ mcpServers: { [name]: raw } }, source), source));
    } catch (error) {
      broken[name] = (error as Error).message;
    }
  }
  return { servers, broken };
}

/** Reads `.mcp.json`, `claude_desktop_config.json` or Codex's `config.toml`, the format told by the file name. */
export async function loadMcpConfigFile(path: string): Promise<Record<string, McpServerConfig>> {
  const file = basename(path);
  const format: McpConfigFormat | undefined = file.endsWith(".toml") ? "codex" : file === "claude_desktop_config.json" ? "claude_desktop" : file.endsWith(".json") ? "mcp.json" : undefined;
  if (!format) throw new TackError("mcp.invalid_config", `${path}: unknown configuration format; give a .mcp.json, claude_desktop_config.json or Codex config.toml`);
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    throw new TackError("mcp.invalid_config", `cannot read ${path}: ${(error as Error).message}`, { cause: error });
  }
  return importMcpConfig(text, format, path);
}
