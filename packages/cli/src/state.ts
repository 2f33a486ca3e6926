// The `.tack/` directory of a local Tack: its API key file and the `up.json` of a running `tack up`.
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { chmod, mkdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { TackError } from "@tack/bus";
import { repoRoot } from "./paths.js";

/** What `tack up` writes to `.tack/up.json` while it runs. */
export interface UpState {
  readonly gatewayUrl: string;
  /** Absolute path of the file holding the API key; null when the key came from TACK_API_KEY. */
  readonly apiKeyFile: string | null;
  readonly pid: number;
  readonly namespace: string;
  readonly natsUrl: string;
  /** True when `tack up` started nats-server itself: then `bus/admin.json` beside up.json holds the operator's credentials. */
  readonly localNats?: boolean;
  /** When `tack up` finished starting (ISO 8601). */
  readonly startedAt?: string;
  /** When this file was last written (ISO 8601); it is rewritten at every crash and restart. */
  readonly updatedAt?: string;
  /** Every process of every service as the supervisor last saw it. */
  readonly replicas?: readonly UpReplica[];
}

/** One process of a service in up.json. */
export interface UpReplica {
  readonly service: string;
  /** 1-based replica number. */
  readonly replica: number;
  /** `running`, `starting`, `restarting` (waiting out its backoff) or `stopped`. */
  readonly state: string;
  readonly pid: number | null;
  /** When the current process started (ISO 8601). */
  readonly startedAt: string | null;
  /** How often the supervisor started it again. */
  readonly restarts: number;
  /** How its last process ended, if one did on its own. */
  readonly lastExit: string | null;
  readonly logFile: string;
}

/** Creates the state directory (owner-only, since it holds the API key) and returns its path. */
export async function ensureStateDir(dir: string): Promise<string> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  return dir;
}

/**
 * Returns the API key stored in `<dir>/api-key`, generating a random one (mode 600) the
 * first time. Refuses a key file that other users can read, like the llm credentials file.
 */
export async function ensureApiKey(dir: string): Promise<{ key: string; file: string }> {
  const file = join(dir, "api-key");
  const key = `tack_${randomBytes(24).toString("base64url")}`;
  try {
    // `wx` fails when the file exists, so two concurrent `tack up`s never overwrite each other's key.
    await writeFile(file, `${key}\n`, { mode: 0o600, flag: "wx" });
    await chmod(file, 0o600); // the umask can only narrow the mode, but be explicit
    return { key, file };
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") {
      throw new TackError("cli.api_key_unwritable", `cannot write the API key file ${file} (${(error as Error).message}); check that ${dir} is writable`, { cause: error });
    }
  }
  return { key: await readApiKey(file), file };
}

/** Reads an API key file, refusing one that other users can read or that is empty. */
export async function readApiKey(file: string): Promise<string> {
  let mode: number;
  let text: string;
  try {
    mode = (await stat(file)).mode;
    text = await readFile(file, "utf8");
  } catch (error) {
    throw new TackError("cli.api_key_unreadable", `cannot read the API key file ${file} (${(error as NodeJS.ErrnoException).code ?? (error as Error).message}); restart Tack with \`tack up\` to create it`, { cause: error });
  }
  if ((mode & 0o077) !== 0) {
    throw new TackError("cli.api_key_insecure", `${file} is readable by other users (mode ${(mode & 0o777).toString(8)}); restrict it with \`chmod 600 ${file}\``);
  }
  const key = text.trim();
  if (!key) throw new TackError("cli.api_key_unreadable", `${file} is empty; delete it and run \`tack up\` again to generate a new key`);
  return key;
}

/** Writes `<dir>/up.json` (mode 600) whole: through a temporary file and a rename, so a reader never sees half of it. */
export async function writeUpState(dir: string, state: UpState): Promise<string> {
  const file = join(dir, "up.json");
  const temporary = `${file}.${process.pid}.tmp`;
  await writeFile(temporary, `${JSON.stringify(state, null, 2)}\n`, { mode: 0o600 });
  await rename(temporary, file);
  return file;
}

/** Removes `up.json` if it exists. */
export async function removeUpState(file: string): Promise<void> {
  await rm(file, { force: true });
}

/** An `up.json` that was found, with where it was found and whether its process still runs. */
export interface FoundUpState {
  readonly file: string;
  readonly state: UpState;
  readonly alive: boolean;
}

/**
 * Where to look for `.tack/up.json`, in order: `cwd` and its parents (like git finds `.git`),
 * then the Tack checkout itself, where `make up` writes it.
 */
export function upStateDirs(cwd: string): string[] {
  return [...ancestors(resolve(cwd)), repoRoot];
}

/**
 * Finds the first `<dir>/.tack/up.json` of `dirs`. Returns undefined when there is none; a
 * stale file (its process is gone) is returned with `alive: false`.
 */
export async function findUpState(dirs: readonly string[]): Promise<FoundUpState | undefined> {
  for (const dir of dirs) {
    const file = join(dir, ".tack", "up.json");
    if (!existsSync(file)) continue;
    let state: UpState;
    try {
      // Its schema (and zod) loads only when there is a file to check: `tack run` starts ~100 ms sooner without.
      const { UpStateSchema } = await import("./up-state-schema.js");
      state = UpStateSchema.parse(JSON.parse(await readFile(file, "utf8")));
    } catch (error) {
      throw new TackError("cli.bad_up_state", `${file} is not a valid up.json (${(error as Error).message.split("\n")[0]}); delete it and start Tack again with \`tack up\``, { cause: error });
    }
    return { file, state, alive: processAlive(state.pid) };
  }
  return undefined;
}

/** True when a process with this pid exists (signal 0 checks without sending anything). */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: it exists but belongs to someone else.
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

function ancestors(dir: string): string[] {
  const out = [dir];
  for (let parent = dirname(dir); parent !== out[out.length - 1]; parent = dirname(parent)) out.push(parent);
  return out;
}
