import { MAX_BUS_PAYLOAD, TackError } from "@tack/bus";
import { WORKSPACE } from "@tack/config";
import type { ExecRequest, ExecResponse } from "@tack/proto";
import type { AgentChannel } from "./agent.js";

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

/** Checks an exec request against the service's limits, failing with `sandbox.bad_request`. */
export function checkExecRequest(request: ExecRequest): void {
  if (request.argv.length === 0 || !request.argv[0]) {
    throw new TackError("sandbox.bad_request", "exec needs a command: argv is empty (use [\"bash\", \"-lc\", script] to run a shell script)");
  }
  if (request.timeoutMs > MAX_TIMEOUT_MS) {
    throw new TackError("sandbox.bad_request", `timeout_ms ${request.timeoutMs} is over the ${MAX_TIMEOUT_MS} ms maximum; ask for at most ${MAX_TIMEOUT_MS}`);
  }
  if (request.cwd && !request.cwd.startsWith("/")) {
    throw new TackError("sandbox.bad_request", `cwd ${JSON.stringify(request.cwd)} is not an absolute path inside the sandbox; use e.g. ${WORKSPACE}/src`);
  }
}

/**
 * Runs one command through the container's exec agent. The agent starts it in its own
 * session (process group), SIGKILLs the whole group at the deadline (exit code 137,
 * `timed_out`) and sends at most the cap of each stream.
 */
export async function runExec(channel: AgentChannel, request: ExecRequest): Promise<ExecResponse> {
  const startedAt = performance.now();
  const result = await channel.run({
    argv: request.argv,
    cwd: request.cwd || WORKSPACE,
    timeoutMs: request.timeoutMs || DEFAULT_TIMEOUT_MS,
    cap: Math.min(request.maxOutputBytes || MAX_OUTPUT_BYTES, MAX_OUTPUT_BYTES),
    stdin: request.stdin,
  });
  return { ...result, durationMs: performance.now() - startedAt, replayed: false };
}
