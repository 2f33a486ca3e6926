import { createHash } from "node:crypto";
import { posix } from "node:path";
import { WORKSPACE } from "@tack/config";
import { z } from "zod";
import { denialLines, denies } from "../permissions.js";
import { ToolError, type ToolContext } from "../tool.js";
import { exec, MAX_STREAM_BYTES, type ExecResult } from "./exec.js";

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

/** `text` as one shell word. */
export function shellQuote(text: string): string {
  return `'${text.replace(/'/g, "'\\''")}'`;
}

/** Shell prelude for scripts that take a file as "$1": exit 3 if it is missing, 4 if it is a directory. */
export const CHECK_FILE = '[ -e "$1" ] || exit 3; [ -d "$1" ] && exit 4;';

/**
 * Reads are recorded in the session's container, not in this service: every tools replica sees
 * them, and they end with the container. One file per path (named by `readKey`) holds the size and
 * mtime the file had when it was read, written and checked by the same exec that reads or writes.
 */
const READS = '"${TMPDIR:-/tmp}/tack-reads"';
/** The stamp a read records and an edit compares: size and mtime to the nanosecond. */
const STAMP = "stat -c '%s %y' --";

/** Shell that records the current stamp of file "$1" under the record name in `key` (one fork once the directory exists). */
export function recordRead(key: string): string {
  return `{ ${STAMP} "$1" > ${READS}/${key} 2>/dev/null || { mkdir -p ${READS} && ${STAMP} "$1" > ${READS}/${key}; }; }`;
}

/** The record name of a path: the same file named the same way (relative, absolute, with `./`) has one record. */
export function readKey(path: string): string {
  return createHash("sha256").update(posix.resolve(WORKSPACE, path)).digest("hex");
}

/** The model-facing error for a file command that failed (see CHECK_FILE for exit codes 3 and 4, readForEdit for 5 and 6). */
export function fileFailure(result: ExecResult, path: string, action: "read" | "write"): ToolError {
  if (result.exitCode === 3) return new ToolError(`File not found: ${path}`);
  if (result.exitCode === 4) return new ToolError(`${path} is a directory, not a file; list its files with glob`);
  if (result.exitCode === 5) return new ToolError(`read ${path} first: edit only changes a file read in this session (with read), so that old_string comes from what the file holds`);
  if (result.exitCode === 6) return new ToolError(`${path} changed since you read it (${changed(result.stderr)}) — read it again, then edit`);
  if (result.timedOut) return new ToolError(`Could not ${action} ${path}: timed out`);
  return new ToolError(`Could not ${action} ${path}: ${result.stderr.trim() || `exit code ${result.exitCode}`}`);
}

/** "size 10 → 12 bytes, mtime ... → ..." from the two stamps (as read, as now) a script printed. */
function changed(stamps: string): string {
  const [was = "", now = ""] = stamps.trim().split("\n");
  const [wasSize, ...wasTime] = was.split(" ");
  const [nowSize, ...nowTime] = now.split(" ");
  if (!nowSize) return "it is gone";
  const parts: string[] = [];
  if (wasSize !== nowSize) parts.push(`size ${wasSize} → ${nowSize} bytes`);
  if (wasTime.join(" ") !== nowTime.join(" ")) parts.push(`mtime ${wasTime.join(" ")} → ${nowTime.join(" ")}`);
  return parts.join(", ") || "size/mtime";
}

/** A text file as `edit` sees it, and the stamp it had, which the write back must still find. */
export interface ReadForEdit {
  readonly content: string;
  readonly stamp: string;
}

// Exit 5: never read in this session; 6: changed since (both stamps on stderr). Then the stamp line and the content.
const READ_FOR_EDIT = `${CHECK_FILE} now=$(${STAMP} "$1") || exit; r=${READS}/"$2"
[ -f "$r" ] || exit 5
IFS= read -r was < "$r"
[ "$was" = "$now" ] || { printf '%s\\n%s\\n' "$was" "$now" >&2; exit 6; }
printf '%s\\n' "$now"; cat < "$1"`;

/**
 * Reads a whole text file that this session read before and nobody changed since (one exec: the
 * check and the read); fails for files too large to send back or not UTF-8.
 */
export async function readForEdit(ctx: ToolContext, path: string): Promise<ReadForEdit> {
  const result = await exec(ctx, ["bash", "-c", READ_FOR_EDIT, "edit", sandboxPath(path), readKey(path)]);
  if (result.exitCode !== 0 || result.timedOut) throw fileFailure(result, path, "read");
  if (result.truncated) throw new ToolError(`${path} is over ${MAX_STREAM_BYTES} bytes, too large to edit with this tool; change it with bash (e.g. sed or python3)`);
  if (!result.stdoutIsUtf8) throw new ToolError(`${path} is not UTF-8 text; change it with bash instead`);
  const split = result.stdout.indexOf("\n");
  return { stamp: result.stdout.slice(0, split), content: result.stdout.slice(split + 1) };
}

// "$3", when set, is the stamp the file must still have (exit 6 otherwise): nothing changed it between an edit's read and its write.
const WRITE = `[ -d "$1" ] && exit 4
if [ -n "$3" ]; then now=$(${STAMP} "$1" 2>/dev/null); [ "$now" = "$3" ] || { printf '%s\\n%s\\n' "$3" "$now" >&2; exit 6; }; fi
mkdir -p -- "$(dirname -- "$1")" && cat > "$1" || exit
${recordRead('"$2"')} || :`;

/**
 * Writes `content` to a file in the sandbox through stdin, creating parent directories, and
 * records it as read: what was just written is known content. With `stamp`, refuses to write a
 * file that changed since it was read.
 */
export async function writeWholeFile(ctx: ToolContext, path: string, content: string, stamp = ""): Promise<void> {
  const result = await exec(ctx, ["bash", "-c", WRITE, "write", sandboxPath(path), readKey(path), stamp], { stdin: content });
  if (result.exitCode !== 0 || result.timedOut) throw fileFailure(result, path, "write");
}

/** Throws the denial (before anything runs) when the call's mode does not allow writing files; `what` names the operation. */
export function requireWritable(ctx: ToolContext, what: string): void {
  if (denies(ctx.mode, "writes")) throw new ToolError(denialLines(ctx.mode, ["writes"], what));
}
