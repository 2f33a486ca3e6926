import { Writable } from "node:stream";
import type { Duplex } from "node:stream";
import type Docker from "dockerode";
import { MAX_BUS_PAYLOAD, TackError } from "@tack/bus";
import type { ExecRequest, ExecResponse } from "@tack/proto";
import { dockerFailure, statusOf } from "./docker.js";
import { WORKSPACE_MOUNT } from "./spec.js";

/** Timeout of a command whose request leaves `timeout_ms` at 0. */
export const DEFAULT_TIMEOUT_MS = 60_000;
/** Longest timeout a request may ask for. */
export const MAX_TIMEOUT_MS = 600_000;
/**
 * Per-stream output cap of a request that leaves `max_output_bytes` at 0, and the most any
 * request gets: 1 MiB was the intent, but stdout and stderr together must fit in one bus
 * reply, so each is held to just under half of the bus payload limit.
 */
export const MAX_OUTPUT_BYTES = Math.min(1024 * 1024, Math.floor((MAX_BUS_PAYLOAD - 4096) / 2));

// `timeout` gets the command this long after TERM before KILL.
const KILL_AFTER_S = 1;
// Should the stream outlive `timeout` (a detached child holding stdout open), give up on it this long after the deadline.
const STREAM_GRACE_MS = KILL_AFTER_S * 1000 + 4000;

/** The error thrown when the container of the exec is gone or stopped. */
export class ContainerGone extends Error {}

/** A sink that keeps the first `cap` bytes written to it and counts what it drops. */
class CappedBuffer extends Writable {
  readonly #cap: number;
  readonly #chunks: Buffer[] = [];
  #kept = 0;
  truncated = false;

  constructor(cap: number) {
    super();
    this.#cap = cap;
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    const room = this.#cap - this.#kept;
    if (chunk.length > room) this.truncated = true;
    if (room > 0) {
      const kept = chunk.length > room ? chunk.subarray(0, room) : chunk;
      this.#chunks.push(kept);
      this.#kept += kept.length;
    }
    // Keep draining past the cap: a command blocked on a full pipe would run into its timeout.
    callback();
  }

  bytes(): Buffer {
    return Buffer.concat(this.#chunks);
  }
}

/** Checks an exec request against the service's limits, failing with `sandbox.bad_request`. */
export function checkExecRequest(request: ExecRequest): void {
  if (request.argv.length === 0 || !request.argv[0]) {
    throw new TackError("sandbox.bad_request", "exec needs a command: argv is empty (use [\"bash\", \"-lc\", script] to run a shell script)");
  }
  if (request.timeoutMs > MAX_TIMEOUT_MS) {
    throw new TackError("sandbox.bad_request", `timeout_ms ${request.timeoutMs} is over the ${MAX_TIMEOUT_MS} ms maximum; ask for at most ${MAX_TIMEOUT_MS}`);
  }
  if (request.cwd && !request.cwd.startsWith("/")) {
    throw new TackError("sandbox.bad_request", `cwd ${JSON.stringify(request.cwd)} is not an absolute path inside the sandbox; use e.g. ${WORKSPACE_MOUNT}/src`);
  }
}

/**
 * Runs one command in `container` through `docker exec` and collects its result. The argv runs
 * under coreutils `timeout`, which puts it in its own process group and signals the whole group
 * at the deadline, so children die with the command. Throws {@link ContainerGone} when the
 * container no longer runs.
 */
export async function runExec(docker: Docker, container: Docker.Container, request: ExecRequest): Promise<ExecResponse> {
  const timeoutMs = request.timeoutMs || DEFAULT_TIMEOUT_MS;
  const cap = Math.min(request.maxOutputBytes || MAX_OUTPUT_BYTES, MAX_OUTPUT_BYTES);
  const startedAt = performance.now();
  let exec: Docker.Exec;
  let stream: Duplex;
  try {
    exec = await container.exec({
      Cmd: ["timeout", "-k", String(KILL_AFTER_S), `${timeoutMs / 1000}s`, ...request.argv],
      AttachStdin: true,
      AttachStdout: true,
      AttachStderr: true,
      Tty: false,
      WorkingDir: request.cwd || WORKSPACE_MOUNT,
    });
    stream = await exec.start({ hijack: true, stdin: true });
  } catch (error) {
    if (statusOf(error) === 404 || statusOf(error) === 409) throw new ContainerGone();
    throw dockerFailure(error, "start a command in the sandbox");
  }

  const stdout = new CappedBuffer(cap);
  const stderr = new CappedBuffer(cap);
  docker.modem.demuxStream(stream, stdout, stderr);
  let abandoned = false;
  await new Promise<void>((resolve) => {
    const backstop = setTimeout(() => {
      abandoned = true;
      stream.destroy();
    }, timeoutMs + STREAM_GRACE_MS);
    const finish = () => {
      clearTimeout(backstop);
      resolve();
    };
    stream.once("end", finish);
    stream.once("close", finish);
    stream.once("error", finish);
    // Closing our side of the connection is what closes the command's standard input.
    stream.end(Buffer.from(request.stdin));
  });

  const exitCode = abandoned ? -1 : await exitCodeOf(exec);
  const durationMs = performance.now() - startedAt;
  // `timeout` exits 124 after TERM and 137 after KILL; a command that exits so by itself before the deadline did not time out.
  const timedOut = abandoned || (durationMs >= timeoutMs && (exitCode === 124 || exitCode === 137));
  return {
    exitCode,
    stdout: stdout.bytes(),
    stderr: stderr.bytes(),
    timedOut,
    truncated: stdout.truncated || stderr.truncated,
    durationMs,
  };
}

/** The exit code of a finished exec; the engine may report it a moment after the stream ends. */
async function exitCodeOf(exec: Docker.Exec): Promise<number> {
  for (let attempt = 0; attempt < 100; attempt++) {
    let info: Docker.ExecInspectInfo;
    try {
      info = await exec.inspect();
    } catch (error) {
      // The container was removed while the command ran (a release, or reaping after a restart).
      if (statusOf(error) === 404) throw new ContainerGone();
      throw dockerFailure(error, "read the exit code of a sandbox command");
    }
    if (!info.Running && info.ExitCode !== null) return info.ExitCode;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new TackError("sandbox.exec_lost", "the sandbox command's output ended but Docker reported no exit code within 1 s; retry the command", { retryable: true });
}
