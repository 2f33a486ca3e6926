// The service's one long-lived mount helper (mount-workspace.py --serve): a Python start costs
// about as much as a whole warm pool claim, so the helper is started once per process, on first
// need, and takes one request at a time over its stdin.
import { spawn, type ChildProcessByStdio } from "node:child_process";
import { createInterface } from "node:readline";
import type { Readable, Writable } from "node:stream";
import { fileURLToPath } from "node:url";

const MOUNT_HELPER = fileURLToPath(new URL("./mount-workspace.py", import.meta.url));
/** The system's Python, never one found on PATH: the helper runs as root (and a version manager's shim adds ~250 ms). */
export const SYSTEM_PYTHON = "/usr/bin/python3";
// A mount takes milliseconds; one this slow is wedged (e.g. on a hung network file system) and the helper is replaced.
const ANSWER_TIMEOUT_MS = 30_000;

/** What the helper answered: the device and inode it mounted, or a failure with its exit code (3: not the directory that was checked). */
export type HelperAnswer = { readonly dev: string; readonly ino: string } | { readonly code: number; readonly message: string };

interface Waiting {
  readonly resolve: (answer: HelperAnswer) => void;
  readonly reject: (error: Error) => void;
  readonly timer: NodeJS.Timeout;
}

let current: { child: ChildProcessByStdio<Writable, Readable, null>; waiting: Waiting[] } | undefined;

/**
 * Asks the helper to mount: `args` are its eight arguments (root, relative path, target, owner
 * uid and gid, sandbox uid and gid, read-only). Rejects (plain Error) when the helper cannot be
 * started, dies or does not answer in time; the next call starts a new one.
 */
export function askMountHelper(args: readonly string[]): Promise<HelperAnswer> {
  const helper = current ?? start();
  return new Promise<HelperAnswer>((resolve, reject) => {
    const timer = setTimeout(() => {
      helper.child.kill("SIGKILL");
      fail(helper, new Error(`the mount helper gave no answer within ${ANSWER_TIMEOUT_MS / 1000} s`));
    }, ANSWER_TIMEOUT_MS);
    helper.waiting.push({ resolve, reject, timer });
    helper.child.stdin.write(`${JSON.stringify(args)}\n`);
  });
}

/** Starts the helper now unless it runs, so that the first mount (a warm pool claim) does not wait for Python to start. */
export function warmMountHelper(): void {
  current ??= start();
}

function start(): NonNullable<typeof current> {
  const child = spawn(SYSTEM_PYTHON, ["-I", "-S", MOUNT_HELPER, "--serve"], { stdio: ["pipe", "pipe", "inherit"] });
  const helper = { child, waiting: [] as Waiting[] };
  current = helper;
  // It must not keep the service's process alive: it ends when its input closes with the process.
  child.unref();
  (child.stdout as Readable & { unref?: () => void }).unref?.();
  (child.stdin as Writable & { unref?: () => void }).unref?.();
  child.stdin.on("error", (error) => fail(helper, error));
  child.on("error", (error) => fail(helper, error));
  child.on("exit", (code, signal) => fail(helper, new Error(`the mount helper ${SYSTEM_PYTHON} ${MOUNT_HELPER} ended (${signal ?? `exit code ${code}`})`)));
  createInterface({ input: child.stdout }).on("line", (line) => {
    const next = helper.waiting.shift();
    if (!next) return;
    clearTimeout(next.timer);
    try {
      next.resolve(JSON.parse(line) as HelperAnswer);
    } catch (error) {
      next.reject(new Error(`the mount helper answered something that is not JSON: ${line.slice(0, 200)}`, { cause: error }));
    }
  });
  return helper;
}

// Fails every request waiting on `helper` and forgets it, so the next request starts another.
function fail(helper: NonNullable<typeof current>, error: Error): void {
  if (current === helper) current = undefined;
  for (const waiting of helper.waiting.splice(0)) {
    clearTimeout(waiting.timer);
    waiting.reject(error);
  }
}
