// The one place an MCP server's transport is made. Stdio servers run arbitrary code: by default
// they run inside the session's sandbox container (`sandboxSpawn`, over the sandbox service's
// stdio streams, decision 0016); only an operator's `run: "host"` server is a host child process
// (`spawnOnHost`). HTTP servers are reached from this service's host through web_fetch's guard.
import type { Stream } from "node:stream";
import { StdioClientTransport, type StdioServerParameters } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { FetchLike, Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import type { McpServerConfig } from "@tack/mcp-config";
import { guardedFetch, type HttpGuard } from "./http-guard.js";

/** A started-or-not stdio transport plus what the bridge reads of it. */
export interface SpawnedTransport {
  readonly transport: Transport;
  /** The server process, once started (for state and tests): a host pid, or the pid inside the sandbox container. */
  pid(): number | undefined;
  /** The server's stderr, for the error message when it fails to start. */
  readonly stderr?: Stream;
}

/**
 * Starts a stdio MCP server. `params.env` is the server's configured `env` only; each Spawn adds
 * what its place needs (the host's PATH, HOME, LANG; the container's).
 */
export type Spawn = (server: string, params: StdioServerParameters) => SpawnedTransport;

/** Host child process over the SDK's stdio transport (an operator's `run: "host"` servers only). */
export const spawnOnHost: Spawn = (_server, params) => {
  const transport = new StdioClientTransport({ ...params, env: serverEnv(params.env ?? {}), stderr: "pipe" });
  return { transport, pid: () => transport.pid ?? undefined, stderr: transport.stderr ?? undefined };
};

/** What the parent may pass on: nothing else of its environment reaches a server (no keys, tokens, NATS_* or TACK_*). */
export const PASSED_ENV = ["PATH", "HOME", "LANG"] as const;

/**
 * The environment of a host stdio server: PATH, HOME and LANG of the parent plus the server's own
 * `env`. (The SDK's transport adds its short list of login variables, HOME, LOGNAME, PATH,
 * SHELL, TERM and USER, to whatever it is given; none of them carries a secret.)
 */
export function serverEnv(configured: Readonly<Record<string, string>>): Record<string, string> {
  const env: Record<string, string> = {};
  for (const key of PASSED_ENV) {
    const value = process.env[key];
    if (value !== undefined) env[key] = value;
  }
  return { ...env, ...configured };
}

/** How HTTP servers are reached: through `guard` (web_fetch's rules) unless a test passes another fetch. */
export interface HttpOptions {
  readonly guard?: HttpGuard;
  readonly fetch?: FetchLike;
}

/** The transport of one configured server. */
export function createTransport(name: string, config: McpServerConfig, spawn: Spawn = spawnOnHost, http: HttpOptions = {}): SpawnedTransport {
  if ("command" in config) {
    return spawn(name, { command: config.command, args: config.args, env: config.env, cwd: config.cwd });
  }
  const fetch = http.fetch ?? (http.guard ? guardedFetch(http.guard, config.url) : undefined);
  const transport = new StreamableHTTPClientTransport(new URL(config.url), { requestInit: { headers: config.headers }, ...(fetch ? { fetch } : {}) });
  return { transport, pid: () => undefined };
}

/** Keeps the last `limit` characters of a stream, for error messages. */
export function tail(stream: Stream | undefined, limit = 2048): () => string {
  let text = "";
  if (stream) {
    stream.on("data", (chunk: Buffer | string) => {
      text = (text + chunk.toString()).slice(-limit);
    });
    stream.on("error", () => undefined);
  }
  return () => text.trim();
}
