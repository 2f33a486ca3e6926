// Command-line parsing: argv → a typed command, or a usage error that says what was wrong.
import { parseArgs } from "node:util";
import { TackError } from "@tack/bus";
import { MAX_REPLICAS, SERVICES, type ServiceName } from "./services.js";

/** A parsed command line. */
export type Command =
  | { readonly name: "help"; readonly text: string }
  | { readonly name: "up"; readonly demo: boolean; readonly port: number | undefined; readonly replicas: Partial<Record<ServiceName, number>> }
  | { readonly name: "down" }
  | { readonly name: "status"; readonly json: boolean }
  | { readonly name: "run"; readonly task: string; readonly model: string | undefined; readonly workspace: string | undefined; readonly json: boolean }
  | { readonly name: "events"; readonly session: string; readonly json: boolean; readonly follow: boolean }
  | { readonly name: "chat"; readonly resume: string | undefined; readonly model: string | undefined; readonly workspace: string | undefined; readonly mode: string | undefined }
  | McpCommand
  | SkillsCommand;

/** Which configuration file a `tack mcp` or `tack skills` change goes to: the user's (`~/.tack/`) or the current directory's. */
export type Scope = "user" | "workspace";

/** What `tack mcp add` runs: a command after `--`, a Streamable HTTP URL, or an npm package (run with `npx -y`). */
export type McpTarget =
  | { readonly kind: "command"; readonly command: string; readonly args: readonly string[] }
  | { readonly kind: "url"; readonly url: string }
  | { readonly kind: "package"; readonly package: string };

/** `tack mcp <add|remove|import|list>`. */
export type McpCommand =
  | {
    readonly name: "mcp"; readonly action: "add"; readonly server: string; readonly target: McpTarget;
    readonly env: Readonly<Record<string, string>>; readonly headers: Readonly<Record<string, string>>;
    readonly scope: Scope; readonly approval: "ask" | "never" | undefined; readonly force: boolean;
  }
  | { readonly name: "mcp"; readonly action: "remove"; readonly server: string; readonly scope: Scope }
  | { readonly name: "mcp"; readonly action: "import"; readonly from: string; readonly scope: Scope; readonly force: boolean }
  | { readonly name: "mcp"; readonly action: "list"; readonly workspace: string | undefined; readonly json: boolean };

/** `tack skills <list|add>`. */
export type SkillsCommand =
  | { readonly name: "skills"; readonly action: "list"; readonly workspace: string | undefined; readonly json: boolean }
  | { readonly name: "skills"; readonly action: "add"; readonly source: string; readonly scope: Scope; readonly skill: string | undefined; readonly force: boolean };

/** The model `tack run` uses when `--model` is not given. */
export const DEFAULT_MODEL = "deepseek:deepseek-chat";

const USAGE: Record<Exclude<Command["name"], "help">, string> = {
  up: `Usage: tack up [--demo] [--port N] [--replicas SERVICE=N,...]

Starts NATS (unless NATS_URL is set) and every Tack service, prints the gateway URL and
stays in the foreground until Ctrl-C. State, logs and the API key live in ./.tack/.
A service process that dies is restarted (250 ms doubling to 10 s between tries); each
restart is printed. \`tack status\` shows what runs.

Options:
  --demo           run the bundled scripted demo once everything is up (only when no DeepSeek key is configured)
  --port N         gateway port (default TACK_GATEWAY_PORT or 7700)
  --replicas LIST  processes per service, e.g. tools=3,loop=2,sandbox=2,llm=2 (default 1 each; the gateway runs once)
  -h, --help       show this help`,
  down: `Usage: tack down

Stops the Tack that \`tack up\` started (found through .tack/up.json).`,
  status: `Usage: tack status [--json]

Shows the Tack that \`tack up\` started (found through .tack/up.json): each service's
processes (pid, up since, restarts), NATS (reachable, JetStream, server version), Docker
(engine, runtimes), the gateway, and which service instances answered micro-service
discovery ($SRV.PING). Without an up.json but with NATS_URL set, it checks that NATS
(namespace TACK_NAMESPACE) instead.

Options:
  --json       print one JSON object instead of a table
  -h, --help   show this help

Exit code 1 when something is unhealthy or Tack is not running.`,
  run: `Usage: tack run "<task>" [--model PROVIDER:MODEL] [--workspace DIR] [--json]

Creates a session, sends the task and prints the run until the turn ends.

Options:
  --model M        deepseek:MODEL or scripted:FILE (default ${DEFAULT_MODEL})
  --workspace DIR  directory the agent works in (default: the current directory)
  --json           print every event as one JSON line instead of a transcript
  -h, --help       show this help

The gateway comes from TACK_GATEWAY_URL and TACK_API_KEY, else from .tack/up.json.
Exit code 1 when the turn ended with an error.`,
  chat: `Usage: tack chat [--model PROVIDER:MODEL] [--workspace DIR] [--mode MODE] | tack chat --resume <session>

An interactive session: type messages, watch each reply stream in, answer approvals (y/n)
and questions inline. \`tack\` alone on a terminal starts it too. In the chat, /help lists
the commands: /cost, /context, /mode, /compact, /export, /fork, /details N, /exit.
Ctrl-C cancels the running turn (twice: stops following it); Ctrl-C twice at the prompt
or Ctrl-D leaves. The session stays in Tack.

Options:
  --model M        deepseek:MODEL or scripted:FILE (default ${DEFAULT_MODEL})
  --workspace DIR  directory the agent works in (default: the current directory)
  --mode MODE      the session's tools: standard (default), code, minimal, creator
  --resume ID      continue session ID: prints its recent history, then the prompt
  -h, --help       show this help

The gateway comes from TACK_GATEWAY_URL and TACK_API_KEY, else from .tack/up.json.`,
  events: `Usage: tack events <session> [--json] [--follow]

Prints the events of a session, one line each: seq, type and a summary.

Options:
  --json       print every event as one JSON line
  --follow     keep printing new events until Ctrl-C
  -h, --help   show this help`,
  mcp: `Usage: tack mcp <add|remove|import|list> ...

Configures the MCP servers whose tools Tack offers, in the Claude Code \`.mcp.json\` format
({"mcpServers": {...}}): the user's ~/.tack/mcp.json (--scope user, the default) or the
current directory's .mcp.json (--scope workspace).

Commands:
  add NAME -- COMMAND [ARGS...]   a stdio server run with that command
  add NAME URL                    a Streamable HTTP server (http:// or https://)
  add NAME NPM-PACKAGE            a stdio server run with \`npx -y NPM-PACKAGE\`
  remove NAME                     remove a server
  import SOURCE                   copy the servers of claude-desktop, codex or a FILE
  list                            each server's state and tools (from the running Tack)

Run \`tack mcp <command> --help\` for its options.`,
  skills: `Usage: tack skills <list|add> ...

Commands:
  list          the skills Tack offers in a workspace (from the running Tack)
  add SOURCE    install skills from a git URL, an npm package or a local folder

Run \`tack skills <command> --help\` for its options.`,
};

/** Help of the subcommands of \`tack mcp\` and \`tack skills\`, keyed "<command> <subcommand>". */
const SUBCOMMAND_USAGE: Record<string, string> = {
  "mcp add": `Usage: tack mcp add NAME [options] -- COMMAND [ARGS...]
       tack mcp add NAME [options] URL
       tack mcp add NAME [options] NPM-PACKAGE

Adds MCP server NAME (1-64 letters, digits, '_', '.' or '-'): a stdio server run with COMMAND,
a Streamable HTTP server at URL (http:// or https://), or an npm package run as
\`npx -y NPM-PACKAGE\`. Stdio servers run in the session's sandbox, which has no network unless
the tenant's egress policy allows it: a package runs only if npx can get it there.

Options:
  --env K=V               environment variable of a stdio server (repeatable)
  --header "NAME: VALUE"  HTTP header sent to a URL server, e.g. an Authorization (repeatable)
  --scope user|workspace  ~/.tack/mcp.json (default) or ./.mcp.json of the current directory
  --approval ask|never    ask the user before each call of its tools (default ask) or never
  --force                 replace a server of that name
  -h, --help              show this help`,
  "mcp remove": `Usage: tack mcp remove NAME [--scope user|workspace]

Removes MCP server NAME from ~/.tack/mcp.json (--scope user, the default) or ./.mcp.json.

Options:
  --scope user|workspace  which file (default user)
  -h, --help              show this help`,
  "mcp import": `Usage: tack mcp import claude-desktop|codex|FILE [--scope user|workspace] [--force]

Copies MCP servers from Claude Desktop (~/.config/Claude/claude_desktop_config.json), Codex
(the [mcp_servers] of ~/.codex/config.toml) or FILE (a .mcp.json, claude_desktop_config.json
or config.toml) into ~/.tack/mcp.json or ./.mcp.json, printing each server imported or skipped.

Options:
  --scope user|workspace  where to write (default user)
  --force                 replace servers that already exist there (default: skip them)
  -h, --help              show this help`,
  "mcp list": `Usage: tack mcp list [--workspace DIR] [--json]

Asks the running Tack's MCP service for each server of the user's ~/.tack/mcp.json and the
workspace's .mcp.json: its state, transport, where it is configured, its tools, errors and
warnings. When Tack is not running, it lists what those files configure.

Options:
  --workspace DIR  the workspace whose .mcp.json counts (default: the current directory)
  --json           print one JSON object
  -h, --help       show this help`,
  "skills list": `Usage: tack skills list [--workspace DIR] [--json]

Asks the running Tack's skills service for the skills of a workspace: each one's name, where it
comes from, who may invoke it and its description, plus warnings about skill files it refused.

Options:
  --workspace DIR  the workspace (default: the current directory)
  --json           print one JSON object
  -h, --help       show this help`,
  "skills add": `Usage: tack skills add SOURCE [--scope user|workspace] [--name NAME] [--force]

Installs skills into ~/.tack/skills/<name>/ (--scope user, the default) or
./.tack/skills/<name>/. SOURCE is a git URL (cloned with --depth 1), an npm package or a .tgz
from \`npm pack\`, or a local folder (./path or /path). The source holds SKILL.md at its root (one
skill) or skill folders skills/<name>/SKILL.md; each SKILL.md must be valid, else nothing is
installed. The operator may forbid installs or some kinds of source (skills.install in the
operator configuration).

Options:
  --scope user|workspace  where to install (default user)
  --name NAME             the skill to install from a source with several; for a root SKILL.md
                          without a name field, the name to install it under
  --force                 replace an installed skill of the same name
  -h, --help              show this help`,
};

/** Usage of the whole CLI. */
export const MAIN_USAGE = `Usage: tack <command> [options]

Commands:
  up       start Tack locally (NATS and every service) in the foreground
  down     stop the Tack started by \`tack up\`
  status   show the services, their processes, NATS, Docker and discovery
  chat     an interactive session in the current directory (also \`tack\` alone on a terminal)
  run      run one task in a new session and print the transcript
  events   print the events of a session
  mcp      add, remove, import and list MCP servers
  skills   list skills and install them from git, npm or a folder

Run \`tack <command> --help\` for a command's options.`;

/**
 * Parses `argv` (without node and script); throws a TackError `cli.usage` for a bad command line.
 * With `interactive` (stdin and stdout are a terminal), no arguments at all mean `tack chat`.
 */
export function parseCommand(argv: readonly string[], options: { interactive?: boolean } = {}): Command {
  const [name, ...rest] = argv;
  if (name === undefined && options.interactive) return { name: "chat", resume: undefined, model: undefined, workspace: undefined, mode: undefined };
  if (name === undefined || name === "--help" || name === "-h") return { name: "help", text: MAIN_USAGE };
  if (name === "help") {
    const topic = rest[0];
    if (topic === undefined) return { name: "help", text: MAIN_USAGE };
    if (!isCommandName(topic)) throw usageError(`unknown command ${JSON.stringify(topic)}`);
    const sub = rest[1] === undefined ? undefined : SUBCOMMAND_USAGE[`${topic} ${rest[1]}`];
    return { name: "help", text: sub ?? USAGE[topic] };
  }
  if (!isCommandName(name)) {
    throw usageError(name.startsWith("-") ? `unknown option ${name}; options go after the command` : `unknown command ${JSON.stringify(name)}`);
  }
  const usage = USAGE[name];
  switch (name) {
    case "up": {
      const { values } = parse(name, rest, { demo: { type: "boolean" }, port: { type: "string" }, replicas: { type: "string" } }, 0);
      if (values.help) return { name: "help", text: usage };
      return {
        name, demo: values.demo === true, port: values.port === undefined ? undefined : parsePort(values.port),
        replicas: values.replicas === undefined ? {} : parseReplicas(values.replicas),
      };
    }
    case "status": {
      const { values } = parse(name, rest, { json: { type: "boolean" } }, 0);
      return values.help ? { name: "help", text: usage } : { name, json: values.json === true };
    }
    case "down": {
      const { values } = parse(name, rest, {}, 0);
      return values.help ? { name: "help", text: usage } : { name };
    }
    case "run": {
      const { values, positionals } = parse(name, rest, { model: { type: "string" }, workspace: { type: "string" }, json: { type: "boolean" } }, 1);
      if (values.help) return { name: "help", text: usage };
      const task = positionals[0];
      if (task === undefined || task.trim() === "") throw usageError('missing the task: tack run "<task>"', name);
      if (values.model !== undefined && !/^[a-z][a-z0-9-]*:.+$/.test(values.model)) {
        throw usageError(`--model ${JSON.stringify(values.model)} is not PROVIDER:MODEL, e.g. ${DEFAULT_MODEL} or scripted:examples/hello.json`, name);
      }
      return { name, task, model: values.model, workspace: values.workspace, json: values.json === true };
    }
    case "chat": {
      const { values } = parse(name, rest, { resume: { type: "string" }, model: { type: "string" }, workspace: { type: "string" }, mode: { type: "string" } }, 0);
      if (values.help) return { name: "help", text: usage };
      if (values.resume !== undefined) {
        if (values.resume.trim() === "") throw usageError("--resume needs the id of a session (tack events and the web UI show them)", name);
        const given = (["model", "workspace", "mode"] as const).filter((option) => values[option] !== undefined);
        if (given.length > 0) throw usageError(`--resume continues a session as it was created; ${given.map((o) => `--${o}`).join(" and ")} apply to new sessions only`, name);
      }
      if (values.model !== undefined && !/^[a-z][a-z0-9-]*:.+$/.test(values.model)) {
        throw usageError(`--model ${JSON.stringify(values.model)} is not PROVIDER:MODEL, e.g. ${DEFAULT_MODEL} or scripted:examples/hello.json`, name);
      }
      if (values.mode !== undefined && !/^[a-z][a-z0-9_-]*$/.test(values.mode)) {
        throw usageError(`--mode ${JSON.stringify(values.mode)} is not a mode name such as standard, code, minimal or creator`, name);
      }
      return { name, resume: values.resume, model: values.model, workspace: values.workspace, mode: values.mode };
    }
    case "events": {
      const { values, positionals } = parse(name, rest, { json: { type: "boolean" }, follow: { type: "boolean" } }, 1);
      if (values.help) return { name: "help", text: usage };
      const session = positionals[0];
      if (session === undefined || session === "") throw usageError("missing the session id: tack events <session>", name);
      return { name, session, json: values.json === true, follow: values.follow === true };
    }
    case "mcp":
      return parseMcp(rest);
    case "skills":
      return parseSkills(rest);
  }
}

/** The subcommand of `tack mcp` or `tack skills`, or help when there is none. */
function subcommand(command: "mcp" | "skills", rest: readonly string[], known: readonly string[]): { action: string; args: string[] } | { help: string } {
  const [action, ...args] = rest;
  if (action === undefined || action === "--help" || action === "-h" || action === "help") return { help: USAGE[command] };
  if (!known.includes(action)) {
    throw usageError(action.startsWith("-") ? `tack ${command} needs a command first (${known.join(", ")}), then options` : `unknown command "${command} ${action}"; tack ${command} has ${known.join(", ")}`, command);
  }
  return { action, args };
}

function parseMcp(rest: readonly string[]): Command {
  const sub = subcommand("mcp", rest, ["add", "remove", "import", "list"]);
  if ("help" in sub) return { name: "help", text: sub.help };
  const key = `mcp ${sub.action}`;
  const help = (): Command => ({ name: "help", text: SUBCOMMAND_USAGE[key]! });
  switch (sub.action) {
    case "add": {
      // Everything after `--` is the server's command line, options included.
      const dash = sub.args.indexOf("--");
      const before = dash < 0 ? sub.args : sub.args.slice(0, dash);
      const commandLine = dash < 0 ? undefined : sub.args.slice(dash + 1);
      const { values, positionals } = parse(key, before, {
        env: { type: "string", multiple: true }, header: { type: "string", multiple: true }, scope: { type: "string" }, approval: { type: "string" }, force: { type: "boolean" },
      }, commandLine ? 1 : 2);
      if (values.help) return help();
      const server = positionals[0];
      if (server === undefined) throw usageError("missing the server's name: tack mcp add NAME -- COMMAND [ARGS...] (or NAME URL, or NAME NPM-PACKAGE)", key);
      let target: McpTarget;
      if (commandLine) {
        if (commandLine.length === 0 || commandLine[0] === "") throw usageError(`missing the command after --: tack mcp add ${server} -- COMMAND [ARGS...]`, key);
        target = { kind: "command", command: commandLine[0]!, args: commandLine.slice(1) };
      } else {
        const what = positionals[1];
        if (what === undefined) throw usageError(`missing what server ${server} is: a command after -- (tack mcp add ${server} -- npx -y some-server), a URL, or an npm package name`, key);
        target = mcpTarget(what, server, key);
      }
      const env = keyValues(values.env ?? [], "--env", /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/s, "K=V with K a variable name, e.g. --env API_URL=http://127.0.0.1:9", key);
      const headers = keyValues(values.header ?? [], "--header", /^([!#$%&'*+.^_`|~0-9A-Za-z-]+):\s*(.*)$/s, `"NAME: VALUE", e.g. --header "Authorization: Bearer xyz"`, key);
      if (target.kind === "url" && Object.keys(env).length > 0) throw usageError("--env sets the environment of a stdio server; an HTTP server (a URL) gets --header instead", key);
      if (target.kind !== "url" && Object.keys(headers).length > 0) throw usageError("--header is sent to an HTTP server (a URL); a stdio server gets --env instead", key);
      return {
        name: "mcp", action: "add", server, target, env, headers, scope: parseScope(values.scope, key),
        approval: parseChoice(values.approval, "--approval", ["ask", "never"] as const, key), force: values.force === true,
      };
    }
    case "remove": {
      const { values, positionals } = parse(key, sub.args, { scope: { type: "string" } }, 1);
      if (values.help) return help();
      const server = positionals[0];
      if (server === undefined) throw usageError("missing the server's name: tack mcp remove NAME", key);
      return { name: "mcp", action: "remove", server, scope: parseScope(values.scope, key) };
    }
    case "import": {
      const { values, positionals } = parse(key, sub.args, { scope: { type: "string" }, force: { type: "boolean" } }, 1);
      if (values.help) return help();
      const from = positionals[0];
      if (from === undefined || from === "") throw usageError("missing what to import: claude-desktop, codex or a FILE (.mcp.json, claude_desktop_config.json, config.toml)", key);
      return { name: "mcp", action: "import", from, scope: parseScope(values.scope, key), force: values.force === true };
    }
    default: {
      const { values } = parse(key, sub.args, { workspace: { type: "string" }, json: { type: "boolean" } }, 0);
      if (values.help) return help();
      return { name: "mcp", action: "list", workspace: values.workspace, json: values.json === true };
    }
  }
}

function parseSkills(rest: readonly string[]): Command {
  const sub = subcommand("skills", rest, ["list", "add"]);
  if ("help" in sub) return { name: "help", text: sub.help };
  const key = `skills ${sub.action}`;
  if (sub.action === "list") {
    const { values } = parse(key, sub.args, { workspace: { type: "string" }, json: { type: "boolean" } }, 0);
    if (values.help) return { name: "help", text: SUBCOMMAND_USAGE[key]! };
    return { name: "skills", action: "list", workspace: values.workspace, json: values.json === true };
  }
  const { values, positionals } = parse(key, sub.args, { scope: { type: "string" }, name: { type: "string" }, force: { type: "boolean" } }, 1);
  if (values.help) return { name: "help", text: SUBCOMMAND_USAGE[key]! };
  const source = positionals[0];
  if (source === undefined || source.trim() === "") throw usageError("missing the source: tack skills add GIT-URL | NPM-PACKAGE | ./FOLDER", key);
  if (values.name !== undefined && !/^[a-z0-9]+(?:-[a-z0-9]+)*$/.test(values.name)) {
    throw usageError(`--name ${JSON.stringify(values.name)} is not a skill name: 1-64 lowercase letters, digits or single hyphens between them (e.g. pdf-forms)`, key);
  }
  return { name: "skills", action: "add", source, scope: parseScope(values.scope, key), skill: values.name, force: values.force === true };
}

/** An npm package name (optionally scoped, optionally with @version or @tag), as `npx` takes it. */
const NPM_PACKAGE = /^(?:@[a-z0-9][a-z0-9._~-]*\/)?[a-z0-9][a-z0-9._~-]*(?:@[A-Za-z0-9._~^<>=|* -]+)?$/;

/** What a server's second argument names: a URL (http:// or https://) or an npm package. */
function mcpTarget(what: string, server: string, key: string): McpTarget {
  if (/^https?:\/\//i.test(what)) {
    try {
      new URL(what);
    } catch {
      throw usageError(`${JSON.stringify(what)} is not a valid URL`, key);
    }
    return { kind: "url", url: what };
  }
  if (NPM_PACKAGE.test(what) && what.length <= 214) return { kind: "package", package: what };
  throw usageError(`${JSON.stringify(what)} is neither a URL (http:// or https://) nor an npm package name; to run a command, put it after --: tack mcp add ${server} -- COMMAND [ARGS...]`, key);
}

/** Repeated `--env K=V` / `--header "K: V"` values as a record; a key given twice is refused. */
function keyValues(items: readonly string[], option: string, pattern: RegExp, expected: string, key: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const item of items) {
    const match = pattern.exec(item);
    if (!match) throw usageError(`${option} ${JSON.stringify(item)} is not ${expected}`, key);
    const [, name, value] = match as unknown as [string, string, string];
    if (Object.hasOwn(out, name)) throw usageError(`${option} ${name} is given twice`, key);
    out[name] = value;
  }
  return out;
}

function parseScope(value: string | undefined, key: string): Scope {
  return parseChoice(value, "--scope", ["user", "workspace"] as const, key) ?? "user";
}

function parseChoice<T extends string>(value: string | undefined, option: string, choices: readonly T[], key: string): T | undefined {
  if (value === undefined) return undefined;
  if (!(choices as readonly string[]).includes(value)) throw usageError(`${option} ${JSON.stringify(value)} is not one of ${choices.join(", ")}`, key);
  return value as T;
}


type OptionSpec = Record<string, { type: "string" | "boolean"; multiple?: boolean }>;
type Values<O extends OptionSpec> = { [K in keyof O]?: O[K]["type"] extends "string" ? (O[K]["multiple"] extends true ? string[] : string) : boolean } & { help?: boolean };

function parse<O extends OptionSpec>(command: string, args: string[], options: O, maxPositionals: number): { values: Values<O>; positionals: string[] } {
  let parsed: { values: Values<O>; positionals: string[] };
  try {
    parsed = parseArgs({ args, options: { ...options, help: { type: "boolean", short: "h" } }, allowPositionals: true, strict: true }) as { values: Values<O>; positionals: string[] };
  } catch (error) {
    throw usageError(describeParseError(command, error as Error & { code?: string }), command);
  }
  if (!parsed.values.help && parsed.positionals.length > maxPositionals) {
    const extra = parsed.positionals.slice(maxPositionals).map((p) => JSON.stringify(p)).join(" ");
    const hint = command === "run" ? " (quote the task as one argument)" : command === "mcp add" ? " (a server's command line goes after --)" : "";
    throw usageError(`tack ${command} got unexpected arguments: ${extra}${hint}`, command);
  }
  return parsed;
}

/** Rewrites node:util's parse errors (which mention `parseArgs` details) into one plain line. */
function describeParseError(command: string, error: Error & { code?: string }): string {
  const option = /'(-[^' ]*)/.exec(error.message)?.[1];
  switch (error.code) {
    case "ERR_PARSE_ARGS_UNKNOWN_OPTION":
      return `unknown option ${option ?? ""} for tack ${command}`;
    case "ERR_PARSE_ARGS_INVALID_OPTION_VALUE":
      return /argument missing/.test(error.message)
        ? `option ${option ?? ""} of tack ${command} needs a value`
        : `option ${option ?? ""} of tack ${command} takes no value`;
    default:
      return error.message;
  }
}

function parsePort(value: string): number {
  const port = Number(value);
  if (!/^\d+$/.test(value) || port < 1 || port > 65535) throw usageError(`--port ${JSON.stringify(value)} is not a port number (1-65535)`, "up");
  return port;
}

/**
 * Parses `--replicas tools=3,loop=2`: each known service at most once, a whole number from 1 to
 * MAX_REPLICAS, the gateway only once (it listens on one port).
 */
export function parseReplicas(value: string): Partial<Record<ServiceName, number>> {
  const bad = (message: string) => usageError(`--replicas ${JSON.stringify(value)}: ${message}`, "up");
  const replicas: Partial<Record<ServiceName, number>> = {};
  if (value.trim() === "") throw bad("name at least one SERVICE=N, e.g. tools=3,loop=2");
  for (const entry of value.split(",")) {
    const match = /^\s*([^=\s]*)\s*=\s*(.*?)\s*$/.exec(entry);
    if (!match || match[1] === "") throw bad(`${JSON.stringify(entry)} is not SERVICE=N; write e.g. tools=3,loop=2`);
    const [, service, count] = match as unknown as [string, string, string];
    if (!(SERVICES as readonly string[]).includes(service)) throw bad(`unknown service ${JSON.stringify(service)}; services: ${SERVICES.join(", ")}`);
    const name = service as ServiceName;
    if (replicas[name] !== undefined) throw bad(`${service} is given twice`);
    if (!/^\d+$/.test(count)) throw bad(`${service}=${count} is not a whole number of processes`);
    const n = Number(count);
    if (n < 1) throw bad(`${service}=${count}: a service needs at least 1 process`);
    if (n > MAX_REPLICAS) throw bad(`${service}=${count}: at most ${MAX_REPLICAS} processes per service`);
    if (name === "gateway" && n > 1) throw bad("the gateway runs once (it listens on one port, --port); run more Tacks behind a load balancer to scale it");
    replicas[name] = n;
  }
  return replicas;
}

function isCommandName(name: string): name is keyof typeof USAGE {
  return Object.hasOwn(USAGE, name);
}

/**
 * A bad command line (exit code 2). `details.usage` holds what to print after the message:
 * the command's usage line and where its help is, or the list of commands.
 */
export function usageError(message: string, command?: string): TackError {
  const text = command === undefined ? undefined : isCommandName(command) ? USAGE[command] : SUBCOMMAND_USAGE[command];
  const usage = command !== undefined && text !== undefined
    ? `${text.split("\n")[0]}\nRun \`tack ${command} --help\` for its options.`
    : MAIN_USAGE;
  return new TackError("cli.usage", message, { details: { usage } });
}
