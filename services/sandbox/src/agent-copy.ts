import { createHash, randomBytes } from "node:crypto";
import { chmod, lstat, mkdir, readFile, realpath, rename, rm, writeFile } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { TackError } from "@tack/bus";

/** The exec agent's source in this checkout: read once when the service starts, never mounted into a container. */
export const AGENT_SOURCE = fileURLToPath(new URL("../agent/agent.py", import.meta.url));

/**
 * Where the service keeps its copies of the agent unless told otherwise: `/var/lib/tack/agent`
 * when it runs as root, else `agent` under Tack's state directory (`TACK_STATE_DIR`, default
 * `.tack`), which the operator configuration keeps out of every workspace.
 */
export function defaultAgentDir(env: NodeJS.ProcessEnv = process.env): string {
  return process.getuid?.() === 0 ? "/var/lib/tack/agent" : resolve(env.TACK_STATE_DIR || ".tack", "agent");
}

/** The agent as installed for containers: the directory mounted at /opt/tack, and the SHA-256 of the agent.py in it. */
export interface InstalledAgent {
  readonly dir: string;
  readonly sha256: string;
}

/**
 * Copies the agent's `source` to `<stateDir>/<sha256>/agent.py` (directory 0755, file 0444,
 * owned by the service's user, so root's when it runs as root), or checks the copy already
 * there. A copy is never changed once written: a container started or restarted later runs
 * exactly the agent it was created with, whatever happens to the checkout meanwhile, and
 * service versions side by side keep their own. Fails with `sandbox.agent_install_failed` when
 * the source cannot be read, or when the directory or one above it could be changed by
 * another user (then the copy could be too).
 */
export async function installAgent(source: string, stateDir: string): Promise<InstalledAgent> {
  const failed = (what: string, cause?: unknown) =>
    new TackError("sandbox.agent_install_failed", `cannot install the exec agent from ${source} under ${stateDir}: ${what}`, { cause });
  let content: Buffer;
  try {
    content = await readFile(source);
  } catch (error) {
    throw failed(`reading it failed (${(error as NodeJS.ErrnoException).code ?? (error as Error).message}); check that the service's agent/agent.py is there`, error);
  }
  const sha256 = createHash("sha256").update(content).digest("hex");
  const uid = process.getuid?.() ?? 0;
  let dir: string;
  try {
    // Explicit modes on what is created here: a restrictive umask must not keep the container's user from reading the agent.
    const created = await mkdir(stateDir, { recursive: true, mode: 0o755 });
    if (created) for (let path = resolve(stateDir); ; path = dirname(path)) {
      await chmod(path, 0o755);
      if (path === resolve(created) || path === dirname(path)) break;
    }
    dir = join(await realpath(stateDir), sha256);
    await mkdir(dir, { recursive: true, mode: 0o755 });
    if ((await lstat(dir)).uid === uid) await chmod(dir, 0o755);
  } catch (error) {
    throw failed(`creating the directory failed (${(error as Error).message})`, error);
  }
  const unsafe = await unsafeAncestor(dir, uid);
  if (unsafe) throw failed(`${unsafe}; make it owned by root or the service's user and not writable by others, or set agentDir to another directory`);
  const file = join(dir, "agent.py");
  if (await isIntactCopy(file, uid, sha256)) return { dir, sha256 };
  // Written beside it and renamed over it: a container starting meanwhile sees the old copy or the new one, never half of one.
  const temporary = join(dir, `.agent.py.${randomBytes(6).toString("hex")}`);
  try {
    await writeFile(temporary, content, { mode: 0o444, flag: "wx" });
    await chmod(temporary, 0o444);
    await rename(temporary, file);
  } catch (error) {
    await rm(temporary, { force: true }).catch(() => undefined);
    throw failed(`writing the copy failed (${(error as Error).message})`, error);
  }
  return { dir, sha256 };
}

// True when `file` is a regular file of `uid`, mode 0444, with the expected content.
async function isIntactCopy(file: string, uid: number, sha256: string): Promise<boolean> {
  try {
    const info = await lstat(file);
    if (!info.isFile() || info.uid !== uid || (info.mode & 0o7777) !== 0o444) return false;
    return createHash("sha256").update(await readFile(file)).digest("hex") === sha256;
  } catch {
    return false;
  }
}

// The first of `dir` and its ancestors that another user could change (owned by someone else, or writable by group or
// others without the sticky bit), described; undefined when there is none.
async function unsafeAncestor(dir: string, uid: number): Promise<string | undefined> {
  for (let path = dir; ; path = dirname(path)) {
    const info = await lstat(path);
    if (info.uid !== uid && info.uid !== 0) return `${path} is owned by uid ${info.uid}`;
    if ((info.mode & 0o022) !== 0 && (info.mode & 0o1000) === 0) return `${path} is writable by ${info.mode & 0o002 ? "every user" : "its group"} (mode ${(info.mode & 0o7777).toString(8)})`;
    if (path === dirname(path)) return undefined;
  }
}
