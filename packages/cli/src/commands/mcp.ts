// `tack mcp add|remove|import|list`: the MCP servers of ~/.tack/mcp.json and ./.mcp.json, and their
// state as the running Tack's MCP service sees them.
import { resolve } from "node:path";
import { McpRpc, TackError } from "@tack/bus";
import type { McpCommand, Scope } from "../args.js";
import {
  configuredServers, describeServer, importSource, mcpConfigLocation, readImportSource, readMcpDocument, toMcpJsonEntry, userHome, validateServer, writeMcpDocument,
  type McpDocument,
} from "../mcp-config.js";
import { terminalSafe, terminalSafeJson } from "../sanitize.js";
import { existingWorkspace } from "../skill-install.js";
import { connectToTack, locateTack } from "../tack-bus.js";

/** How long `tack mcp list` waits for the MCP service (it may be connecting to its servers). */
const LIST_TIMEOUT_MS = 15_000;

/** Runs a `tack mcp` command in `cwd`; resolves with the exit code. */
export async function mcpCommand(command: McpCommand, cwd: string, env: NodeJS.ProcessEnv): Promise<number> {
  switch (command.action) {
    case "add":
      return add(command, cwd, env);
    case "remove":
      return remove(command, cwd, env);
    case "import":
      return importServers(command, cwd, env);
    case "list":
      return list(command, cwd, env);
  }
}

const shown = (doc: McpDocument) => (doc.location.scope === "user" ? "~/.tack/mcp.json" : doc.location.file);

async function add(command: Extract<McpCommand, { action: "add" }>, cwd: string, env: NodeJS.ProcessEnv): Promise<number> {
  const doc = await readMcpDocument(mcpConfigLocation(command.scope, userHome(env), cwd));
  const { target } = command;
  const raw: Record<string, unknown> = target.kind === "url"
    ? { url: target.url, ...(Object.keys(command.headers).length > 0 ? { headers: command.headers } : {}) }
    : {
      command: target.kind === "command" ? target.command : "npx",
      args: target.kind === "command" ? [...target.args] : ["-y", target.package],
      ...(Object.keys(command.env).length > 0 ? { env: command.env } : {}),
    };
  if (command.approval) raw.default_approval = command.approval;
  // The service's own parser: the name and every field are checked as the service will read them.
  const config = validateServer(command.server, raw, doc.location.file);
  const existing = doc.servers[command.server];
  if (existing !== undefined && !command.force) {
    throw new TackError("cli.mcp_exists", `${doc.location.file} already has an MCP server named "${command.server}"; pass --force to replace it, or choose another name (\`tack mcp remove ${command.server}\` removes it)`);
  }
  doc.servers[command.server] = toMcpJsonEntry(config);
  await writeMcpDocument(doc);
  process.stdout.write(`✓ ${existing === undefined ? "added" : "replaced"} MCP server "${command.server}" (${describeServer(config)}) in ${shown(doc)}\n`);
  if (target.kind === "package") {
    process.stdout.write(`  It runs as \`npx -y ${target.package}\` in the session's sandbox, which has no network unless the tenant's egress policy allows npm: the package runs only if npx can get it there.\n`);
  }
  process.stdout.write("  `tack mcp list` shows its state and tools.\n");
  return 0;
}

async function remove(command: Extract<McpCommand, { action: "remove" }>, cwd: string, env: NodeJS.ProcessEnv): Promise<number> {
  const home = userHome(env);
  const doc = await readMcpDocument(mcpConfigLocation(command.scope, home, cwd));
  if (!Object.hasOwn(doc.servers, command.server)) {
    const other: Scope = command.scope === "user" ? "workspace" : "user";
    const elsewhere = await readMcpDocument(mcpConfigLocation(other, home, cwd)).then((d) => Object.hasOwn(d.servers, command.server) ? d : undefined, () => undefined);
    const names = Object.keys(doc.servers);
    throw new TackError("cli.mcp_unknown", `${doc.location.file} has no MCP server named "${command.server}"${elsewhere ? `; it is in ${elsewhere.location.file}: add --scope ${other}` : names.length > 0 ? `; it has ${names.join(", ")}` : doc.exists ? "; it has none" : " (the file does not exist)"}`);
  }
  delete doc.servers[command.server];
  await writeMcpDocument(doc);
  process.stdout.write(`✓ removed MCP server "${command.server}" from ${shown(doc)}\n`);
  return 0;
}

async function importServers(command: Extract<McpCommand, { action: "import" }>, cwd: string, env: NodeJS.ProcessEnv): Promise<number> {
  const source = importSource(command.from, cwd, env);
  const servers = await readImportSource(source);
  const doc = await readMcpDocument(mcpConfigLocation(command.scope, userHome(env), cwd));
  let imported = 0;
  let invalid = 0;
  const lines: string[] = [];
  for (const server of servers) {
    if ("skipped" in server) {
      if (!server.skipped.startsWith("disabled")) invalid += 1;
      lines.push(`- skipped ${server.name}: ${server.skipped}`);
      continue;
    }
    if (Object.hasOwn(doc.servers, server.name) && !command.force) {
      lines.push(`- skipped ${server.name}: ${shown(doc)} already has a server of that name (--force replaces it)`);
      continue;
    }
    doc.servers[server.name] = toMcpJsonEntry(server.config);
    imported += 1;
    lines.push(`✓ imported ${server.name} (${describeServer(server.config)})`);
  }
  if (imported > 0) await writeMcpDocument(doc);
  const skipped = servers.length - imported;
  process.stdout.write(terminalSafe(`${lines.join("\n")}${lines.length > 0 ? "\n" : ""}${servers.length === 0 ? `${source.file} configures no MCP server\n` : `${imported} server(s) imported into ${shown(doc)}${skipped > 0 ? `, ${skipped} skipped` : ""}\n`}`));
  return invalid > 0 ? 1 : 0;
}

/** One server as `tack mcp list --json` prints it. */
export interface ListedServer {
  readonly name: string;
  /** The MCP service's state (`connecting`, `ready`, `reconnecting`, `failed`, `disabled`), or `not running`. */
  readonly state: string;
  readonly source: string;
  readonly transport: string;
  readonly tools: string[];
  readonly error: string;
  readonly warnings: string[];
  /** What it runs (only when read from the files: Tack not running). */
  readonly runs?: string;
}

/** What `tack mcp list --json` prints. */
export interface McpListReport {
  /** Whether the running Tack's MCP service answered. */
  readonly running: boolean;
  /** Why the servers come from the files instead (Tack or its MCP service not reachable). */
  readonly note: string | null;
  readonly workspace: string;
  readonly servers: ListedServer[];
  /** Configuration files that could not be read or parsed (their servers are missing). */
  readonly problems: string[];
}

async function list(command: Extract<McpCommand, { action: "list" }>, cwd: string, env: NodeJS.ProcessEnv): Promise<number> {
  const workspace = await existingWorkspace(resolve(cwd, command.workspace ?? "."));
  const report = await collectMcpList(workspace, cwd, env);
  process.stdout.write(command.json ? `${terminalSafeJson(report)}\n` : renderList(report));
  return report.problems.length > 0 ? 1 : 0;
}

/** Asks the running Tack (`<ns>.mcp.list`); without one, reads the configuration files. */
export async function collectMcpList(workspace: string, cwd: string, env: NodeJS.ProcessEnv): Promise<McpListReport> {
  const location = await locateTack(cwd, env);
  let note: string;
  if (location.running) {
    try {
      const bus = await connectToTack(location, "tack-mcp-list");
      try {
        const reply = await bus.request(McpRpc.ListTools, { tenant: env.TACK_TENANT || "local", sessionId: "", workspace, sandboxMode: "" }, { timeoutMs: LIST_TIMEOUT_MS });
        const servers = reply.servers.map((s): ListedServer => ({ name: s.name, state: s.state, source: s.source, transport: s.transport, tools: [...s.tools], error: s.error, warnings: [...s.warnings] }));
        // Problems of the configuration files themselves (unreadable, not JSON): their servers are missing.
        return { running: true, note: null, workspace, servers, problems: [...(reply.warnings ?? [])] };
      } finally {
        await bus.close().catch(() => undefined);
      }
    } catch (error) {
      const failure = TackError.from(error);
      note = failure.code === "bus.no_responders"
        ? `Tack (namespace ${location.namespace}) runs no MCP service (nothing answers ${location.namespace}.mcp.list; restart it with \`tack down\` and \`tack up\`)`
        : `the MCP service of Tack (namespace ${location.namespace}) did not answer: ${failure.message}`;
    }
  } else {
    note = location.reason;
  }
  const local = await configuredServers(userHome(env), workspace, env);
  return {
    running: false, note, workspace, problems: local.problems,
    servers: local.servers.map((s) => ({ name: s.name, state: "not running", source: s.source, transport: s.transport, tools: [], error: "", warnings: [], runs: s.runs })),
  };
}

function renderList(report: McpListReport): string {
  const lines: string[] = [];
  if (report.note) lines.push(`${report.note}; the configured servers:`, "");
  for (const server of report.servers) {
    lines.push(`${server.name}  ${server.state === "ready" ? "✓ " : ""}${server.state} · ${server.transport || "?"} · ${server.source || "?"}`);
    if (server.runs) lines.push(`  runs      ${server.runs}`);
    // Tools are known once a server is connected; a configured one that no session started yet has none listed.
    if (server.tools.length > 0) lines.push(`  tools     ${server.tools.length}: ${server.tools.join(", ")}`);
    else if (server.state === "ready") lines.push("  tools     none");
    if (server.error) lines.push(`  error     ${server.error.replace(/\n/g, "\n            ")}`);
    for (const warning of server.warnings) lines.push(`  warning   ${warning}`);
    lines.push("");
  }
  if (report.servers.length === 0) {
    lines.push(`No MCP server is configured for ${report.workspace}: add one with \`tack mcp add NAME -- COMMAND\`, \`tack mcp add NAME URL\` or \`tack mcp import claude-desktop\`.`);
  }
  for (const problem of report.problems) lines.push(`✗ ${problem}`);
  return terminalSafe(`${lines.join("\n").trimEnd()}\n`);
}
