// `tack up`: NATS and every service in the foreground, until Ctrl-C or `tack down`.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { homedir } from "node:os";
import { join, relative } from "node:path";
import { TackError } from "@tack/bus";
import type { Command } from "../args.js";
import { cliError, connect } from "../api.js";
import { launch, type Launched, type ReplicaStatus } from "../launcher.js";
import { examplesDir } from "../paths.js";
import { Spinner } from "../spinner.js";
import { ensureApiKey, ensureStateDir, processAlive, removeUpState, writeUpState, type UpReplica, type UpState } from "../state.js";
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
  // up.json follows every crash and restart (for `tack status`); set once Tack is up.
  let saveState: () => void = () => undefined;
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
      replicas: command.replicas,
      onProgress: (message) => spinner.update(message),
      onServiceExit: (service, description, logFile, replica) => {
        process.stderr.write(`✗ ${replicaLabel(service, replica)} ${description}; restarting it. Its log: ${logFile}\n`);
        saveState();
      },
      onRestart: (event) => {
        process.stderr.write(`↻ ${replicaLabel(event.service, event.replica)} restarted after ${event.delayMs} ms: pid ${event.pid} (was ${event.previousPid ?? "?"}, ${event.reason}), restart ${event.restarts}\n`);
        saveState();
      },
    });
  } catch (error) {
    spinner.fail(stopRequested.signal.aborted ? "start-up interrupted" : "Tack did not start");
    if (stopRequested.signal.aborted) return 130;
    throw error;
  }
  const base = { apiKeyFile, pid: process.pid, localNats: !env.NATS_URL, startedAt: new Date().toISOString() };
  const upFile = await writeUpState(stateDir, upStateOf(tack, base));
  // Writes one at a time, the last one winning; a failed write is reported and the next one tries again.
  let saving = Promise.resolve();
  saveState = () => {
    const launched = tack;
    saving = saving.then(() => writeUpState(stateDir, upStateOf(launched, base))).then(() => undefined, (error: unknown) => {
      process.stderr.write(`✗ cannot update ${upFile}: ${(error as Error).message}\n`);
    });
  };
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
    `  services ${describeReplicas(tack.replicas())}`,
    "  status   `tack status` (or `tack status --json`)",
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
  saveState = () => undefined;
  await tack.stop();
  await saving;
  await removeUpState(upFile);
  spinner.done("Tack stopped");
  for (const signal of STOP_SIGNALS) process.off(signal, onSignal);
  return 0;
}

/** What `tack up` writes to up.json: where Tack is and every replica of every service as the supervisor sees it now. */
export function upStateOf(tack: Launched, base: Pick<UpState, "apiKeyFile" | "pid" | "localNats" | "startedAt">): UpState {
  return {
    gatewayUrl: tack.gatewayUrl,
    namespace: tack.namespace,
    natsUrl: tack.natsUrl,
    ...base,
    updatedAt: new Date().toISOString(),
    replicas: tack.replicas().map((r): UpReplica => ({
      service: r.service, replica: r.replica, state: r.state, pid: r.pid ?? null, startedAt: r.startedAt ?? null,
      restarts: r.restarts, lastExit: r.lastExit ?? null, logFile: r.logFile,
    })),
  };
}

/** `tools` for the first replica, `tools#2` for another. */
function replicaLabel(service: string, replica: number): string {
  return replica === 1 ? service : `${service}#${replica}`;
}

/** E.g. `llm 1, tools 3, loop 2` with the pids. */
function describeReplicas(replicas: readonly ReplicaStatus[]): string {
  const byService = new Map<string, number[]>();
  for (const r of replicas) byService.set(r.service, [...(byService.get(r.service) ?? []), ...(r.pid === undefined ? [] : [r.pid])]);
  return [...byService].map(([service, pids]) => `${service} ${pids.length} (pid ${pids.join(", ")})`).join(" · ");
}

/**
 * Uploads `examples/demo-workspace` as a managed workspace (a tar archive, as an internal tool
 * would) and runs `examples/demo.json` on it with the scripted provider, printing the transcript.
 */
async function runDemo(tack: Launched, signal: AbortSignal): Promise<void> {
  const gateway = connect({ url: tack.gatewayUrl, apiKey: tack.apiKey });
  const { client } = gateway;
  const archive = execFileSync("tar", ["-c", "-C", join(examplesDir, "demo-workspace"), "."], { maxBuffer: 64 << 20 });
  try {
    const workspace = await client.createWorkspace({ archive: new Uint8Array(archive), title: "Tack demo" });
    const model = `scripted:${join(examplesDir, "demo.json")}`;
    const { id } = await client.createSession({ workspace_id: workspace.id, model, title: "Tack demo" });
    process.stdout.write(`\nDemo: session ${id} · ${model} · managed workspace ${workspace.id}\n`);
    const { turn } = await client.postMessage(id, DEMO_TASK);
    await followTurn(gateway, id, turn, { json: false, signal });
  } catch (error) {
    throw cliError(error);
  }
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
