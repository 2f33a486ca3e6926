import { readFileSync } from "node:fs";
import { posix } from "node:path";
import { WORKSPACE } from "@tack/config";
import { z } from "zod";
import { denialLines, denies, escalationParameters, type Denied, type SandboxMode } from "../permissions.js";
import { defineTool, ToolError } from "../tool.js";
import { exec, MAX_STREAM_BYTES, type ExecResult } from "./exec.js";
import { argvString, sandboxPath, shellQuote } from "./files.js";
import { noWorkdir, startJob } from "./jobs.js";

const DEFAULT_TIMEOUT_MS = 60_000;
const MAX_TIMEOUT_MS = 600_000;
/** What a command exits with when its workdir is missing; the marker on stderr tells it from the command's own 126. */
const NO_WORKDIR_EXIT = 126;
const NO_WORKDIR_MARKER = "tack: no workdir";

/** How each kind of denial shows in a command's output: the errors the OS and common tools print. */
const DENIAL_SIGNS: Record<Denied, RegExp> = {
  writes: /Read-only file system/,
  network: /Network is unreachable|Could not resolve host|Temporary failure in name resolution|EAI_AGAIN/,
};

/**
 * bash: runs a command with `bash -c` in /workspace (not a login shell: the container's environment already sets PATH, HOME and LANG, and sourcing the profiles cost ~4 ms a call). The text always ends with `exit code: N`;
 * a non-zero exit or a timeout is also flagged `is_error`, so both the model and a UI see it.
 * When the output shows that the sandbox mode denied something, the two denial lines follow.
 * `run_in_background` starts the command as a job (jobs.ts) and returns its id at once.
 */
export const bash = defineTool({
  name: "bash",
  hookAliases: ["Bash"],
  description: readFileSync(new URL("./bash.txt", import.meta.url), "utf8").trim(),
  parameters: z.strictObject({
    command: argvString("The command to run"),
    timeout_ms: z.number().int().min(1).max(MAX_TIMEOUT_MS).default(DEFAULT_TIMEOUT_MS).describe("Kill the command after this many milliseconds"),
    description: z.string().optional().describe("What the command does, in 5-10 words"),
    workdir: argvString("Directory to run in, relative to /workspace (default /workspace)").optional(),
    run_in_background: z.boolean().default(false).describe("Start it as a background job and return its id at once (timeout_ms does not apply)"),
    ...escalationParameters,
  }),
  deniable: ["writes", "network"],
  operation: "command",
  async execute({ command, timeout_ms, workdir, run_in_background }, ctx) {
    const dir = workdir === undefined ? "." : inWorkspace(workdir);
    if (run_in_background) return startJob(ctx, command, dir, workdir);
    // The cd shares the command's first line, so the command's line numbers in errors stay its own.
    const script = dir === "." ? command : `cd -- ${shellQuote(dir)} 2>/dev/null || { echo '${NO_WORKDIR_MARKER}' >&2; exit ${NO_WORKDIR_EXIT}; }; ${command}`;
    const result = await exec(ctx, ["bash", "-c", script], { timeoutMs: timeout_ms });
    if (result.exitCode === NO_WORKDIR_EXIT && result.stderr === `${NO_WORKDIR_MARKER}\n`) throw new ToolError(noWorkdir(workdir!));
    return commandResult(result, ctx.mode, timeout_ms, "redirect it to a file and read that instead");
  },
});

/**
 * The text of a finished command: stdout, stderr, what was cut or timed out, `exit code: N`
 * last, then the denial lines when `mode` denied it something. A non-zero exit, a timeout or a
 * denial is thrown as a ToolError (`is_error`); `cutAdvice` follows the note of a cut output.
 */
export function commandResult(result: ExecResult, mode: SandboxMode, timeoutMs: number, cutAdvice?: string): string {
  const parts: string[] = [];
  if (result.stdout) parts.push(result.stdout.replace(/\n$/, ""));
  if (result.stderr) parts.push(`stderr:\n${result.stderr.replace(/\n$/, "")}`);
  if (result.truncated) parts.push(`(output cut after ${MAX_STREAM_BYTES} bytes per stream${cutAdvice ? `; ${cutAdvice}` : ""})`);
  if (result.timedOut) parts.push(`timed out after ${timeoutMs} ms`);
  parts.push(`exit code: ${result.exitCode}`);
  const denied = deniedBy(mode, result);
  if (denied.length > 0) parts.push(denialLines(mode, denied));
  const text = parts.join("\n");
  if (result.exitCode !== 0 || result.timedOut || denied.length > 0) throw new ToolError(text);
  return text;
}

/** `workdir` as a path relative to /workspace ("." for itself); refused when it leads outside. */
function inWorkspace(workdir: string): string {
  const resolved = posix.resolve(WORKSPACE, workdir);
  if (resolved !== WORKSPACE && !resolved.startsWith(`${WORKSPACE}/`)) {
    throw new ToolError(`workdir ${workdir} is outside /workspace; commands run only in the workspace: give a directory in it, relative (src) or absolute (/workspace/src)`);
  }
  return sandboxPath(resolved);
}

/**
 * What `mode` denied this command, judged from its output: stderr always counts, stdout only
 * when the command failed (so that printing a file that mentions such an error is not a denial).
 */
export function deniedBy(mode: SandboxMode, result: ExecResult): Denied[] {
  const output = result.exitCode === 0 ? result.stderr : `${result.stdout}\n${result.stderr}`;
  return (Object.keys(DENIAL_SIGNS) as Denied[]).filter((what) => denies(mode, what) && DENIAL_SIGNS[what].test(output));
}
