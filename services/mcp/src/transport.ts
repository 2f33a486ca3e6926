// The one place an MCP server's transport is made. Stdio servers run arbitrary code: today
// they are host child processes with a scrubbed environment; running them inside the session's
// sandbox container (a `spawn` that execs there) is the one step left before untrusted
// configurations are safe.
import type { Stream } from "node:stream";
import { StdioClientTransport, type StdioServerParameters } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import type { McpServerConfig } from "./config.js";

/** A started-or-not stdio transport plus what the bridge reads of it. */
export interface SpawnedTransport {
  readonly transport: Transport;
  /** The server process, once started (for state and tests). */
  pid(): number | undefined;
  /** The server's stderr, for the error message when it fails to start. */
  readonly stderr?: Stream;
}

/** Starts a stdio MCP server: on the host by default; the sandbox variant execs it in the session's container. */
export type Spawn = (server: string, params: StdioServerParameters) => SpawnedTransport;

/** Host child process over the SDK's stdio transport. */
export const spawnOnHost: Spawn = (_server, params) => {
  const transport = new StdioClientTransport({ ...params, stderr: "pipe" });
  return { transport, pid: () => transport.pid ?? undefined, stderr: transport.stderr ?? undefined };
};

/** What the parent may pass on: nothing else of its environment reaches a server (no keys, tokens, NATS_* or TACK_*). */
export const PASSED_ENV = ["PATH", "HOME", "LANG"] as const;

/**
 * The environment of a stdio server: PATH, HOME and LANG of the parent plus the server's own
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

/** The transport of one configured server. */
export function createTransport(name: string, config: McpServerConfig, spawn: Spawn = spawnOnHost): SpawnedTransport {
  if ("command" in config) {
    return spawn(name, { command: config.command, args: config.args, env: serverEnv(config.env), cwd: config.cwd });
  }
  const transport = new StreamableHTTPClientTransport(new URL(config.url), { requestInit: { headers: config.headers } });
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
