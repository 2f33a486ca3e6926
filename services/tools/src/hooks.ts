// Hooks for the loop: the workspace's hooks files and the hook commands, both inside the session's sandbox
// (the workspace may exist only there, and a hook is the workspace's code like any command the model runs).
import { TackError } from "@tack/bus";
import { WORKSPACE } from "@tack/config";
import {
  ExecRequest, type HooksFileRead, type ReadHooksConfigRequest, type ReadHooksConfigResponse, type RunHookRequest, type RunHookResponse,
} from "@tack/proto";
import { parseSandboxMode } from "./permissions.js";
import type { SandboxClient } from "./sandbox.js";
import { MAX_STREAM_BYTES } from "./tools/exec.js";

/** The workspace's hooks files, relative to /workspace, in the order they are listed (Claude Code's, then Tack's own). */
export const HOOKS_FILES = [".claude/settings.json", ".claude/settings.local.json", ".tack/hooks.json"] as const;
/** A hooks file larger than this is reported instead of read. */
export const HOOKS_FILE_MAX_BYTES = 256 * 1024;
/** Each of a hook's stdout and stderr is cut here. */
export const HOOK_OUTPUT_BYTES = 64 * 1024;
/** A hook's timeout may not exceed the longest command the sandbox runs. */
export const HOOK_MAX_TIMEOUT_MS = 600_000;
const READ_TIMEOUT_MS = 30_000;

// One line per file that exists: `<path> F <base64 content>` or `<path> E <reason>` (the paths are fixed, plain words).
const SCRIPT = `for p in "$@"; do
  [ -e "$p" ] || [ -L "$p" ] || continue
  printf '%s ' "$p"
  if [ ! -e "$p" ]; then echo "E is a broken symbolic link"; continue; fi
  if [ ! -f "$p" ]; then echo "E is not a regular file"; continue; fi
  size=$(stat -c %s -- "$p")
  if [ "$size" -gt ${HOOKS_FILE_MAX_BYTES} ]; then echo "E is $size bytes, more than the ${HOOKS_FILE_MAX_BYTES} a hooks file may have"; continue; fi
  data=$(base64 -w0 < "$p" 2>/dev/null) || { echo "E could not be read (permission denied?)"; continue; }
  echo "F $data"
done`;

/** `tools.hook_config`: the workspace's hooks files that exist, read with one exec in the session's sandbox. */
export async function readHooksConfig(request: ReadHooksConfigRequest, sandbox: SandboxClient, signal: AbortSignal): Promise<ReadHooksConfigResponse> {
  const mode = parseSandboxMode(request.sandboxMode);
  await sandbox.ensure({ sessionId: request.sessionId, tenant: request.tenant, workspace: request.workspace, mode });
  const response = await sandbox.exec(ExecRequest.fromPartial({
    sessionId: request.sessionId, argv: ["bash", "-c", SCRIPT, "hooks", ...HOOKS_FILES], cwd: WORKSPACE, timeoutMs: READ_TIMEOUT_MS,
    maxOutputBytes: MAX_STREAM_BYTES, mode,
  }), signal);
  if (response.exitCode !== 0 || response.timedOut || response.truncated) {
    const why = response.timedOut ? "timed out" : response.truncated ? "gave more output than expected" : `exited with ${response.exitCode}: ${Buffer.from(response.stderr).toString("utf8").trim()}`;
    throw new TackError("tools.hooks_unreadable", `reading the hooks files in session ${request.sessionId}'s sandbox ${why}; check that the sandbox image has bash and coreutils`);
  }
  const files = Buffer.from(response.stdout).toString("latin1").split("\n").filter((line) => line !== "").map((line): HooksFileRead => {
    const [path = "", kind, ...rest] = line.split(" ");
    if (kind === "F") return { path, content: Buffer.from(rest[0] ?? "", "base64"), error: "" };
    return { path, content: Buffer.alloc(0), error: rest.join(" ") || "could not be read" };
  });
  return { files };
}

/**
 * `tools.hook_run`: `bash -c <command>` in the session's sandbox, in /workspace, with
 * CLAUDE_PROJECT_DIR=/workspace and the input on stdin; the sandbox kills it (and what it
 * started) at `timeoutMs`. A hook is not keyed for replay: it decides, it is not an effect the model asked for.
 */
export async function runHook(request: RunHookRequest, sandbox: SandboxClient, signal: AbortSignal): Promise<RunHookResponse> {
  if (!request.command.trim()) {
    throw new TackError("tools.invalid_request", `hook ${request.invocationId} has an empty command; send the shell command the hooks file gives`);
  }
  if (request.timeoutMs < 1 || request.timeoutMs > HOOK_MAX_TIMEOUT_MS) {
    throw new TackError("tools.invalid_request", `hook ${request.invocationId} has timeout_ms ${request.timeoutMs}; send 1 to ${HOOK_MAX_TIMEOUT_MS}`);
  }
  const mode = parseSandboxMode(request.sandboxMode);
  await sandbox.ensure({ sessionId: request.sessionId, tenant: request.tenant, workspace: request.workspace, mode });
  const response = await sandbox.exec(ExecRequest.fromPartial({
    sessionId: request.sessionId, argv: ["env", `CLAUDE_PROJECT_DIR=${WORKSPACE}`, "bash", "-c", request.command],
    stdin: Buffer.from(request.input, "utf8"), cwd: WORKSPACE, timeoutMs: request.timeoutMs, maxOutputBytes: HOOK_OUTPUT_BYTES, mode,
  }), signal);
  return {
    exitCode: response.exitCode, stdout: Buffer.from(response.stdout).toString("utf8"), stderr: Buffer.from(response.stderr).toString("utf8"),
    timedOut: response.timedOut, durationMs: response.durationMs,
  };
}
