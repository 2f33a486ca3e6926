// `tack run`: one task in a new session, printed as a transcript (or JSON lines) until the turn ends.
import { stat } from "node:fs/promises";
import { resolve } from "node:path";
import { TackError } from "@tack/bus";
import { DEFAULT_MODEL, usageError, type Command } from "../args.js";
import { cliError, connect, receiveEvents, resolveGateway, type Gateway } from "../api.js";
import { terminalSafe, terminalSafeError, terminalSafeJson } from "../sanitize.js";
import { upStateDirs } from "../state.js";
import { TranscriptRenderer } from "../transcript.js";

type RunCommand = Extract<Command, { name: "run" }>;

/** Runs `tack run`; resolves with the exit code (1 when the turn ended with an error, 130 on Ctrl-C). */
export async function runCommand(command: RunCommand, cwd: string, env: NodeJS.ProcessEnv): Promise<number> {
  try {
    return await run(command, cwd, env);
  } catch (error) {
    // Messages from the gateway carry remote text; main prints them to the terminal.
    throw terminalSafeError(error);
  }
}

async function run(command: RunCommand, cwd: string, env: NodeJS.ProcessEnv): Promise<number> {
  // Arguments are checked before the gateway is looked for, so a typo is reported as such even when Tack is down.
  const given = command.model ?? DEFAULT_MODEL;
  const model = await resolveModel(given, cwd);
  const workspace = await resolveWorkspace(command.workspace ?? cwd, cwd);
  const gateway = connect(await resolveGateway(env, upStateDirs(cwd)));
  const { id } = await gateway.client.createSession({ workspace, model }).catch((error: unknown) => {
    throw explainModelRefusal(cliError(error), given);
  });
  process.stderr.write(terminalSafe(`session ${id} · ${model} · ${workspace}\n`));
  const { turn } = await gateway.client.postMessage(id, command.task).catch((error: unknown) => {
    throw cliError(error);
  });
  const abort = new AbortController();
  const onInterrupt = () => abort.abort();
  process.once("SIGINT", onInterrupt);
  try {
    const reason = await followTurn(gateway, id, turn, { json: command.json, signal: abort.signal });
    if (reason === undefined) {
      process.stderr.write(`stopped following session ${id}; the turn goes on in Tack: tack events ${id} --follow\n`);
      return 130;
    }
    return reason === "error" ? 1 : 0;
  } finally {
    process.off("SIGINT", onInterrupt);
  }
}

/**
 * Prints a session's events until turn `turn` ends, as a transcript or as JSON lines; resolves
 * with the turn's end reason, or undefined when `signal` stopped the following (the turn goes on).
 */
export async function followTurn(
  gateway: Gateway,
  sessionId: string,
  turn: number,
  options: { json: boolean; signal: AbortSignal },
): Promise<string | undefined> {
  const renderer = new TranscriptRenderer({ color: process.stdout.isTTY === true && !process.env.NO_COLOR });
  try {
    for await (const { event, json } of receiveEvents(gateway, sessionId, { follow: true, signal: options.signal })) {
      // Both forms are terminal-safe: the renderer makes controls visible, JSON escapes what JSON.stringify leaves raw.
      process.stdout.write(options.json ? `${terminalSafeJson(json)}\n` : renderer.render(event));
      if (event.payload?.$case === "turnEnd" && event.payload.value.turn === turn) {
        const reason = event.payload.value.reason;
        process.stderr.write(terminalSafe(`session ${sessionId}: turn ${turn} ${reason} · every event: tack events ${sessionId} --json\n`));
        return reason;
      }
    }
    // Ctrl-C ends the stream without an error.
    if (options.signal.aborted) {
      if (!options.json) process.stdout.write(renderer.finish());
      return undefined;
    }
    throw new TackError("cli.stream_dropped", `the event stream of session ${sessionId} ended before turn ${turn} did; see it with \`tack events ${sessionId} --follow\``);
  } catch (error) {
    if (!options.signal.aborted) throw error;
    if (!options.json) process.stdout.write(renderer.finish());
    return undefined;
  }
}

/** Model providers whose model is a file, and what the file is called in messages. */
const FILE_MODELS = [{ prefix: "scripted:", noun: "script" }, { prefix: "replay:", noun: "recording" }] as const;

/**
 * `scripted:FILE` and `replay:FILE` become the absolute path of an existing file, FILE
 * relative to the current directory; other models pass as they are. Whether the llm service
 * may read the file (it must be inside its script directories) only the service knows.
 */
export async function resolveModel(model: string, cwd: string, command: "run" | "chat" = "run"): Promise<string> {
  const kind = FILE_MODELS.find((candidate) => model.startsWith(candidate.prefix));
  if (!kind) return model;
  const file = resolve(cwd, model.slice(kind.prefix.length));
  const found = await stat(file).catch(() => undefined);
  if (!found?.isFile()) throw usageError(`the ${kind.noun} ${file} of --model ${model} does not exist (relative paths start at the current directory)`, command);
  return `${kind.prefix}${file}`;
}

/**
 * A refused script or recording (`llm.bad_script`: outside the llm service's script
 * directories, not a regular file, too large, not valid) said in terms of the --model flag
 * the user typed; the service's message names the file, the problem and the directories.
 */
function explainModelRefusal(error: unknown, given: string): unknown {
  if (!(error instanceof TackError) || error.code !== "llm.bad_script") return error;
  return new TackError(error.code, `Tack refused --model ${given}: ${error.message}`, { details: { ...error.details }, cause: error });
}

/** `dir` (relative to `cwd`) as an absolute path of an existing directory, else a usage error. */
export async function resolveWorkspace(dir: string, cwd: string, command: "run" | "chat" = "run"): Promise<string> {
  const workspace = resolve(cwd, dir);
  const found = await stat(workspace).catch(() => undefined);
  if (!found?.isDirectory()) throw usageError(`the workspace ${workspace} is not an existing directory`, command);
  return workspace;
}
