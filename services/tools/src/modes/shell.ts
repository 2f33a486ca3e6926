import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { z } from "zod";
import { denialLines, escalationParameters } from "../permissions.js";
import { defineTool, ToolError } from "../tool.js";
import { deniedBy } from "../tools/bash.js";
import { exec } from "../tools/exec.js";
import { argvString } from "../tools/files.js";

const SCRIPT = readFileSync(new URL("./shell.sh", import.meta.url), "utf8");
const DEFAULT_TIMEOUT_MS = 60_000;
const MAX_TIMEOUT_MS = 600_000;
/** What shell.sh keeps of a command's output (it says how much there was). */
const MAX_OUTPUT_BYTES = 400_000;
/** On top of the command's timeout: starting the shell, and the poll that notices the deadline. */
const EXEC_MARGIN_MS = 10_000;

/**
 * shell (minimal mode): one long-lived bash per session and sandbox mode, in the container's /tmp,
 * started on first use and again after it died (shell.sh). Results read like bash's: output, then
 * `exit code: N`; a non-zero exit, a timeout or a denial is also `is_error`.
 */
export const shell = defineTool({
  name: "shell",
  deniable: ["writes", "network"],
  operation: "command",
  description: readFileSync(new URL("./shell.txt", import.meta.url), "utf8").trim(),
  parameters: z.strictObject({
    command: argvString("The command to run"),
    timeout_ms: z.number().int().min(1).max(MAX_TIMEOUT_MS).default(DEFAULT_TIMEOUT_MS).describe("Kill the shell after this many milliseconds"),
    ...escalationParameters,
  }),
  async execute({ command, timeout_ms }, ctx) {
    const dir = `/tmp/tack-shell-${ctx.sessionId.replace(/[^A-Za-z0-9_.-]/g, "_")}`;
    const id = randomBytes(6).toString("hex");
    const result = await exec(ctx, ["bash", "-c", SCRIPT, "shell", dir, id, String(timeout_ms)], { stdin: command, timeoutMs: timeout_ms + EXEC_MARGIN_MS });
    const match = /\n__tack_shell (\w+) (\w+) (\d+) ([01])\n$/.exec(result.stdout);
    if (!match) {
      throw new ToolError(`The shell could not run the command (exit code ${result.exitCode}${result.timedOut ? ", timed out" : ""}): ${result.stderr.trim() || "no output"}`);
    }
    const [, state, rc, size, restarted] = match;
    const output = result.stdout.slice(0, match.index);
    const parts: string[] = [];
    if (restarted === "1") parts.push("(the previous shell had ended; this is a new one: cwd and environment are reset)");
    if (output) parts.push(output.replace(/\n$/, ""));
    if (Number(size) > MAX_OUTPUT_BYTES) parts.push(`(output cut after ${MAX_OUTPUT_BYTES} of ${size} bytes; redirect it to a file and read parts of it)`);
    if (state === "timeout") parts.push(`timed out after ${timeout_ms} ms: the shell was killed; the next call starts a new one (cwd and environment reset)`);
    if (state === "died") parts.push("the shell was killed while running this command; the next call starts a new one (cwd and environment reset)");
    const exitCode = state === "done" ? Number(rc) : 137;
    parts.push(`exit code: ${exitCode}`);
    const denied = deniedBy(ctx.mode, { ...result, stdout: output, stderr: "", exitCode });
    if (denied.length > 0) parts.push(denialLines(ctx.mode, denied));
    const text = parts.join("\n");
    if (exitCode !== 0 || denied.length > 0) throw new ToolError(text);
    return text;
  },
});
