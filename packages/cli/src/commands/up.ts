// `tack up`: NATS and every service in the foreground, until Ctrl-C or `tack down`.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { homedir } from "node:os";
import { join, relative } from "node:path";
import { TackError } from "@tack/bus";
import type { Command } from "../args.js";
import { GatewayClient } from "../gateway.js";
import { launch, type Launched } from "../launcher.js";
import { examplesDir } from "../paths.js";
import { Spinner } from "../spinner.js";
import { ensureApiKey, ensureStateDir, processAlive, removeUpState, writeUpState } from "../state.js";
import { followTurn } from "./run.js";

type UpCommand = Extract<Command, { name: "up" }>;

/** The gateway port when neither --port nor TACK_GATEWAY_PORT says otherwise. */
export const DEFAULT_GATEWAY_PORT = 7700;

const DEMO_TASK = "Show me around this sandbox: what system is this and who am I? Then write a short note, read it back and search the workspace for the word \"sandbox\".";
const STOP_SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;

/** Runs `tack up` in `cwd` (state in `cwd/.tack`); resolves with the exit code once everything has stopped. */
export async function upCommand(command: UpCommand, cwd: string, env: NodeJS.ProcessEnv): Promise<number> {
  const port = command.port ?? envPort(env) ?? DEFAULT_GATEWAY_PORT;
  const stateDir = await ensureStateDir(join(cwd, ".tack"));
  await refuseSecondUp(stateDir);
  const envKey = env.TACK_API_KEY?.trim() || undefined;
  const { key: apiKey, file: apiKeyFile } = envKey ? { key: envKey, file: null } : await ensureApiKey(stateDir);

  // Ctrl-C (SIGINT, which also reaches the services), `tack down` (SIGTERM) or a closed terminal (SIGHUP):
  // stop everything once, whenever it comes.
  const stopRequested = new AbortController();
  const onSignal = () => {
    if (stopRequested.signal.aborted) {
      process.stderr.write("\nforced exit; services may still be stopping\n");
      process.exit(130);
    }
    stopRequested.abort();
  };
  for (const signal of STOP_SIGNALS) process.on(signal, onSignal);

  const spinner = new Spinner(process.stderr);
  let tack: Launched;
  try {
    tack = await launch({
      dataDir: stateDir,
      natsUrl: env.NATS_URL || undefined,
      // The launcher's own connection to a given NATS uses the operator's credentials, like the services
      // (the configuration package is loaded only here, so the CLI's other commands start faster).
      natsAuth: env.NATS_URL ? (await import("@tack/config")).busAuthFromEnv(env) : undefined,
      namespace: env.TACK_NAMESPACE || "tack",
      apiKey,
      gatewayPort: port,
      onProgress: (message) => spinner.update(message),
      onServiceExit: (service, description, logFile) => {
        process.stderr.write(`\n✗ ${service} ${description}; Tack keeps running without it. Its log: ${logFile}\n`);
      },
    });
  } catch (error) {
    spinner.fail(stopRequested.signal.aborted ? "start-up interrupted" : "Tack did not start");
    if (stopRequested.signal.aborted) return 130;
    throw error;
  }
  const upFile = await writeUpState(stateDir, { gatewayUrl: tack.gatewayUrl, apiKeyFile, pid: process.pid, namespace: tack.namespace, natsUrl: tack.natsUrl });
  spinner.done(`Tack is up at ${tack.gatewayUrl}`);
  // Paths under the current directory are shown relative to it; others in full.
  const shown = (path: string) => {
    const rel = relative(cwd, path);
    return rel === "" ? "." : rel.startsWith("..") ? path : rel;
  };
  const demo = command.demo && !deepseekKeyConfigured(env);
  process.stdout.write([
    `  gateway  ${tack.gatewayUrl}`,
    `  API key  ${apiKeyFile ? `${shown(apiKeyFile)} (send it as \`Authorization: Bearer <key>\`)` : "from TACK_API_KEY"}`,
    `  NATS     ${tack.natsUrl}${env.NATS_URL ? "" : ` (started here, data in ${shown(join(stateDir, "nats"))}, one user per service in ${shown(join(stateDir, "bus"))}/)`}`,
    `  logs     ${shown(join(stateDir, "logs"))}/`,
    `  try      tack run "list the files" --model scripted:${shown(join(examplesDir, "hello.json"))}   (in a project directory under your home)`,
    "  stop     Ctrl-C here, or `tack down` in another terminal",
    "",
  ].join("\n"));

  if (command.demo && !demo) {
    process.stdout.write("A DeepSeek key is configured, so no scripted demo runs: try `tack run \"explain this repository\"` in a project directory.\n");
  } else if (demo && !stopRequested.signal.aborted) {
    await runDemo(tack, stopRequested.signal).catch((error: unknown) => {
      process.stderr.write(`✗ the demo failed: ${TackError.from(error).message}\n`);
    });
  }

  if (!stopRequested.signal.aborted) await new Promise((resolve) => stopRequested.signal.addEventListener("abort", resolve, { once: true }));
  spinner.update("stopping Tack");
  await tack.stop();
  await removeUpState(upFile);
  spinner.done("Tack stopped");
  for (const signal of STOP_SIGNALS) process.off(signal, onSignal);
  return 0;
}

/**
 * Uploads `examples/demo-workspace` as a managed workspace (a tar archive, as an internal tool
 * would) and runs `examples/demo.json` on it with the scripted provider, printing the transcript.
 */
async function runDemo(tack: Launched, signal: AbortSignal): Promise<void> {
  const client = new GatewayClient({ url: tack.gatewayUrl, apiKey: tack.apiKey });
  const archive = execFileSync("tar", ["-c", "-C", join(examplesDir, "demo-workspace"), "."], { maxBuffer: 64 << 20 });
  const workspace = await client.createWorkspace(archive, "Tack demo");
  const model = `scripted:${join(examplesDir, "demo.json")}`;
  const { id } = await client.createSession({ workspace_id: workspace.id, model, title: "Tack demo" });
  process.stdout.write(`\nDemo: session ${id} · ${model} · managed workspace ${workspace.id}\n`);
  const { turn } = await client.postMessage(id, DEMO_TASK);
  await followTurn(client, id, turn, { json: false, signal });
}

/** True when the llm service will find a DeepSeek key (the same places it looks). */
function deepseekKeyConfigured(env: NodeJS.ProcessEnv): boolean {
  return Boolean(env.DEEPSEEK_API_KEY?.trim()) || existsSync(join(homedir(), ".tack", "credentials.yaml"));
}

function envPort(env: NodeJS.ProcessEnv): number | undefined {
  const value = env.TACK_GATEWAY_PORT;
  if (!value) return undefined;
  const port = Number(value);
  if (!/^\d+$/.test(value) || port < 1 || port > 65535) throw new TackError("cli.bad_env", `TACK_GATEWAY_PORT=${JSON.stringify(value)} is not a port number (1-65535)`);
  return port;
}

/** Two `tack up`s on one `.tack/` would fight over the NATS store and up.json. */
async function refuseSecondUp(stateDir: string): Promise<void> {
  const file = join(stateDir, "up.json");
  if (!existsSync(file)) return;
  const pid = (JSON.parse(await readFile(file, "utf8").catch(() => "{}")) as { pid?: unknown }).pid;
  if (typeof pid === "number" && pid !== process.pid && processAlive(pid)) {
    throw new TackError("cli.already_running", `Tack is already running here (pid ${pid}, see ${file}); stop it with \`tack down\` first`);
  }
}
