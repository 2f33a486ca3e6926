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
  | { readonly name: "events"; readonly session: string; readonly json: boolean; readonly follow: boolean };

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
  events: `Usage: tack events <session> [--json] [--follow]

Prints the events of a session, one line each: seq, type and a summary.

Options:
  --json       print every event as one JSON line
  --follow     keep printing new events until Ctrl-C
  -h, --help   show this help`,
};

/** Usage of the whole CLI. */
export const MAIN_USAGE = `Usage: tack <command> [options]

Commands:
  up       start Tack locally (NATS and every service) in the foreground
  down     stop the Tack started by \`tack up\`
  status   show the services, their processes, NATS, Docker and discovery
  run      run one task in a new session and print the transcript
  events   print the events of a session

Run \`tack <command> --help\` for a command's options.`;

/** Parses `argv` (without node and script); throws a TackError `cli.usage` for a bad command line. */
export function parseCommand(argv: readonly string[]): Command {
  const [name, ...rest] = argv;
  if (name === undefined || name === "--help" || name === "-h") return { name: "help", text: MAIN_USAGE };
  if (name === "help") {
    const topic = rest[0];
    if (topic === undefined) return { name: "help", text: MAIN_USAGE };
    if (!isCommandName(topic)) throw usageError(`unknown command ${JSON.stringify(topic)}`);
    return { name: "help", text: USAGE[topic] };
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
    case "events": {
      const { values, positionals } = parse(name, rest, { json: { type: "boolean" }, follow: { type: "boolean" } }, 1);
      if (values.help) return { name: "help", text: usage };
      const session = positionals[0];
      if (session === undefined || session === "") throw usageError("missing the session id: tack events <session>", name);
      return { name, session, json: values.json === true, follow: values.follow === true };
    }
  }
}


type OptionSpec = Record<string, { type: "string" | "boolean" }>;
type Values<O extends OptionSpec> = { [K in keyof O]?: O[K]["type"] extends "string" ? string : boolean } & { help?: boolean };

function parse<O extends OptionSpec>(command: string, args: string[], options: O, maxPositionals: number): { values: Values<O>; positionals: string[] } {
  let parsed: { values: Values<O>; positionals: string[] };
  try {
    parsed = parseArgs({ args, options: { ...options, help: { type: "boolean", short: "h" } }, allowPositionals: true, strict: true }) as { values: Values<O>; positionals: string[] };
  } catch (error) {
    throw usageError(describeParseError(command, error as Error & { code?: string }), command);
  }
  if (!parsed.values.help && parsed.positionals.length > maxPositionals) {
    const extra = parsed.positionals.slice(maxPositionals).map((p) => JSON.stringify(p)).join(" ");
    const hint = command === "run" ? " (quote the task as one argument)" : "";
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
  const usage = command !== undefined && isCommandName(command)
    ? `${USAGE[command].split("\n")[0]}\nRun \`tack ${command} --help\` for its options.`
    : MAIN_USAGE;
  return new TackError("cli.usage", message, { details: { usage } });
}
