import { posix } from "node:path";
import { z } from "zod";
import { denialLines, denies } from "../permissions.js";
import { ToolError, type ToolContext } from "../tool.js";
import { exec, MAX_STREAM_BYTES, WORKSPACE, type ExecResult } from "./exec.js";

/**
 * A string parameter that ends up in the sandbox's argv: non-empty and without NUL, which
 * execve cannot carry. Containment is the sandbox's job, not this schema's.
 */
export function argvString(description: string) {
  return z.string().min(1).refine((value) => !value.includes("\0"), "must not contain NUL characters").describe(description);
}

/**
 * The form of a path the tools pass to the sandbox: absolute paths under /workspace become
 * relative (commands run in /workspace), so listings read the same whichever form the model used.
 */
export function sandboxPath(path: string): string {
  const normalized = posix.normalize(path);
  if (normalized === WORKSPACE || normalized === `${WORKSPACE}/`) return ".";
  return normalized.startsWith(`${WORKSPACE}/`) ? normalized.slice(WORKSPACE.length + 1) : normalized;
}

/** Shell prelude for scripts that take a file as "$1": exit 3 if it is missing, 4 if it is a directory. */
export const CHECK_FILE = '[ -e "$1" ] || exit 3; [ -d "$1" ] && exit 4;';

/** The model-facing error for a file command that failed (see CHECK_FILE for exit codes 3 and 4). */
export function fileFailure(result: ExecResult, path: string, action: "read" | "write"): ToolError {
  if (result.exitCode === 3) return new ToolError(`File not found: ${path}`);
  if (result.exitCode === 4) return new ToolError(`${path} is a directory, not a file; list its files with glob`);
  if (result.timedOut) return new ToolError(`Could not ${action} ${path}: timed out`);
  return new ToolError(`Could not ${action} ${path}: ${result.stderr.trim() || `exit code ${result.exitCode}`}`);
}

/** Reads a whole text file from the sandbox; fails for files too large to send back or not UTF-8. */
export async function readWholeFile(ctx: ToolContext, path: string): Promise<string> {
  const result = await exec(ctx, ["bash", "-c", `${CHECK_FILE} cat < "$1"`, "read", sandboxPath(path)]);
  if (result.exitCode !== 0 || result.timedOut) throw fileFailure(result, path, "read");
  if (result.truncated) throw new ToolError(`${path} is over ${MAX_STREAM_BYTES} bytes, too large to edit with this tool; change it with bash (e.g. sed or python3)`);
  if (!result.stdoutIsUtf8) throw new ToolError(`${path} is not UTF-8 text; change it with bash instead`);
  return result.stdout;
}

/** Writes `content` to a file in the sandbox through stdin, creating parent directories. */
export async function writeWholeFile(ctx: ToolContext, path: string, content: string): Promise<void> {
  const script = '[ -d "$1" ] && exit 4; mkdir -p -- "$(dirname -- "$1")" && cat > "$1"';
  const result = await exec(ctx, ["bash", "-c", script, "write", sandboxPath(path)], { stdin: content });
  if (result.exitCode !== 0 || result.timedOut) throw fileFailure(result, path, "write");
}

/** Throws the denial (before anything runs) when the call's mode does not allow writing files; `what` names the operation. */
export function requireWritable(ctx: ToolContext, what: string): void {
  if (denies(ctx.mode, "writes")) throw new ToolError(denialLines(ctx.mode, ["writes"], what));
}
