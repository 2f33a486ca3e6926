// One child process of the launcher, with its output appended to a log file.
import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, fstatSync, openSync, writeSync } from "node:fs";
import { open } from "node:fs/promises";

/** How a child ended: an exit code, a signal, or a spawn error such as ENOENT. */
export interface ChildExit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly error?: NodeJS.ErrnoException;
}

/** A running (or ended) child whose stdout and stderr go to `logFile`. */
export interface Child {
  readonly name: string;
  readonly process: ChildProcess;
  readonly logFile: string;
  /** Resolves once when the child has ended, however it ended. */
  readonly exited: Promise<ChildExit>;
  /** The exit, once `exited` has resolved. */
  exit(): ChildExit | undefined;
  /** The last `lines` non-empty lines this child wrote (not earlier runs in the same log). */
  tail(lines: number): Promise<string>;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves when the child is gone. */
  stop(graceMs: number): Promise<void>;
}

/**
 * Starts `command` with stdin closed and stdout/stderr appended to `logFile`. `detached`
 * puts it in its own process group, so a Ctrl-C in the terminal does not reach it.
 */
export function spawnChild(
  name: string,
  command: string,
  args: string[],
  options: { cwd: string; env: NodeJS.ProcessEnv; logFile: string; detached?: boolean },
): Child {
  // The child writes to the file directly, so its output survives the launcher and never blocks on a pipe.
  const fd = openSync(options.logFile, "a", 0o600);
  let child: ChildProcess;
  let offset: number;
  try {
    writeSync(fd, `--- ${new Date().toISOString()} starting ${name}: ${command} ${args.join(" ")}\n`);
    offset = fstatSync(fd).size;
    child = spawn(command, args, { cwd: options.cwd, env: options.env, stdio: ["ignore", fd, fd], detached: options.detached });
  } finally {
    closeSync(fd);
  }
  let ended: ChildExit | undefined;
  const exited = new Promise<ChildExit>((resolve) => {
    child.once("error", (error: NodeJS.ErrnoException) => {
      // `error` without `exit` means the process never started.
      if (child.pid === undefined) resolve((ended = { code: null, signal: null, error }));
    });
    child.once("exit", (code, signal) => resolve((ended = { code, signal })));
  });
  return {
    name,
    process: child,
    logFile: options.logFile,
    exited,
    exit: () => ended,
    tail: async (lines) => {
      const handle = await open(options.logFile, "r");
      try {
        const { size } = await handle.stat();
        const buffer = Buffer.alloc(Math.max(0, size - offset));
        await handle.read(buffer, 0, buffer.length, offset);
        return buffer.toString("utf8").split("\n").filter((line) => line.trim() !== "").slice(-lines).join("\n");
      } finally {
        await handle.close();
      }
    },
    stop: async (graceMs) => {
      if (ended) return;
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** Describes an exit for a message, e.g. `exited with code 1` or `was killed by SIGKILL`. */
export function describeExit(exit: ChildExit): string {
  if (exit.error) return `could not start (${exit.error.code ?? exit.error.message})`;
  if (exit.signal) return `was killed by ${exit.signal}`;
  return `exited with code ${exit.code}`;
}
