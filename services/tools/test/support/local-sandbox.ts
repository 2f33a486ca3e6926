import { spawn } from "node:child_process";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import type { SandboxOutput, SandboxProcess, SandboxProcessExit, SandboxProcessRequest } from "@tack/bus";
import { WORKSPACE } from "@tack/config";
import type { EnsureSandboxRequest, ExecRequest, ExecResponse } from "@tack/proto";
import { cancelledError, type SandboxClient } from "../../src/sandbox.js";

/**
 * Unit-test SandboxClient: runs argv with child_process on this host, with `root` standing
 * in for the container's /workspace (as the working directory; argv is passed unchanged, so
 * tests use relative paths). It isolates nothing and ignores the mode, so tests fake what a mode
 * denies by printing its error, and it never leaves the test directory. `tmp`, when given, is the
 * commands' TMPDIR: where the tools keep their records in the container's /tmp (reads, jobs).
 */
export class LocalSandboxClient implements SandboxClient {
  /** Every ensure request received, for assertions. */
  readonly ensured: EnsureSandboxRequest[] = [];
  /** Every exec request received, for assertions. */
  readonly executed: ExecRequest[] = [];
  readonly #root: string;
  readonly #tmp: string | undefined;

  constructor(root: string, tmp?: string) {
    this.#root = root;
    this.#tmp = tmp;
  }

  async ensure(request: EnsureSandboxRequest): Promise<void> {
    this.ensured.push(request);
    await mkdir(this.#root, { recursive: true });
  }

  exec(request: ExecRequest, signal: AbortSignal): Promise<ExecResponse> {
    if (signal.aborted) return Promise.reject(cancelledError());
    this.executed.push(request);
    const started = performance.now();
    const cwd = request.cwd || WORKSPACE;
    const hostCwd = cwd === WORKSPACE ? this.#root : cwd.startsWith(`${WORKSPACE}/`) ? join(this.#root, cwd.slice(WORKSPACE.length)) : cwd;
    const maxBytes = request.maxOutputBytes || 1024 * 1024;
    return new Promise((resolve, reject) => {
      const [file, ...args] = request.argv;
      // detached: the child leads its own process group, so a kill reaches what it started too.
      // A bare environment, like the container's: none of the host's variables or login profile.
      const env = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: this.#root, ...(this.#tmp && { TMPDIR: this.#tmp }) };
      const child = spawn(file ?? "", args, { cwd: hostCwd, env, detached: true, stdio: "pipe" });
      const stdout = collect(maxBytes);
      const stderr = collect(maxBytes);
      let timedOut = false;
      const killGroup = () => {
        try {
          if (child.pid) process.kill(-child.pid, "SIGKILL");
        } catch {
          // already gone
        }
      };
      const timer = setTimeout(() => {
        timedOut = true;
        killGroup();
      }, request.timeoutMs || 60_000);
      const onAbort = () => {
        killGroup();
        reject(cancelledError());
      };
      signal.addEventListener("abort", onAbort, { once: true });
      const finish = (exitCode: number, message = "") => {
        clearTimeout(timer);
        signal.removeEventListener("abort", onAbort);
        resolve({
          exitCode,
          stdout: stdout.bytes(),
          stderr: Buffer.concat([stderr.bytes(), Buffer.from(message)]),
          timedOut,
          truncated: stdout.truncated || stderr.truncated,
          durationMs: performance.now() - started,
          replayed: false,
        });
      };
      child.stdout.on("data", stdout.add);
      child.stderr.on("data", stderr.add);
      // A command that exits without reading its input closes the pipe under us; that is fine.
      child.stdin.on("error", () => undefined);
      child.stdin.end(Buffer.from(request.stdin));
      child.on("error", (error) => finish(127, `${file}: ${error.message}\n`));
      child.on("close", (code, killedBy) => finish(code ?? 128 + (killedBy === "SIGKILL" ? 9 : 15)));
    });
  }

  /** Starts argv as a host child process in the test directory (a run_code program's runner), as exec does. */
  async spawn(request: SandboxProcessRequest, onOutput: SandboxOutput): Promise<SandboxProcess> {
    const [file, ...args] = request.argv;
    const env = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: this.#root, ...(this.#tmp && { TMPDIR: this.#tmp }), ...request.env };
    const child = spawn(file ?? "", args, { cwd: this.#root, env, detached: true, stdio: "pipe" });
    let reason = "";
    const exit = new Promise<SandboxProcessExit>((resolve) => {
      child.on("error", (error) => resolve({ code: 127, reason: error.message }));
      child.on("close", (code, killedBy) => resolve({ code: code ?? 128 + (killedBy === "SIGKILL" ? 9 : 15), reason }));
    });
    child.stdout.on("data", (chunk: Buffer) => onOutput(1, chunk));
    child.stderr.on("data", (chunk: Buffer) => onOutput(2, chunk));
    child.stdin.on("error", () => undefined);
    return {
      pid: child.pid ?? -1,
      exit,
      write: (data) => void child.stdin.write(data),
      endInput: () => void child.stdin.end(),
      kill: (why = "killed by its caller") => {
        reason = why;
        try {
          if (child.pid) process.kill(-child.pid, "SIGKILL");
        } catch {
          // already gone
        }
      },
    };
  }
}

function collect(maxBytes: number) {
  const chunks: Buffer[] = [];
  let size = 0;
  let truncated = false;
  return {
    add: (chunk: Buffer) => {
      const room = maxBytes - size;
      if (chunk.length > room) truncated = true;
      if (room > 0) {
        chunks.push(chunk.subarray(0, room));
        size += Math.min(room, chunk.length);
      }
    },
    bytes: () => Buffer.concat(chunks),
    get truncated() {
      return truncated;
    },
  };
}
