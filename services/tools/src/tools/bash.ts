import { readFileSync } from "node:fs";
import { z } from "zod";
import { defineTool, ToolError } from "../tool.js";
import { exec, MAX_STREAM_BYTES } from "./exec.js";
import { argvString } from "./files.js";

const DEFAULT_TIMEOUT_MS = 60_000;
const MAX_TIMEOUT_MS = 600_000;

/**
 * bash: runs a command with `bash -lc` in /workspace. The text always ends with `exit code: N`;
 * a non-zero exit or a timeout is also flagged `is_error`, so both the model and a UI see it.
 */
export const bash = defineTool({
  name: "bash",
  description: readFileSync(new URL("./bash.txt", import.meta.url), "utf8").trim(),
  parameters: z.strictObject({
    command: argvString("The command to run"),
    timeout_ms: z.number().int().min(1).max(MAX_TIMEOUT_MS).default(DEFAULT_TIMEOUT_MS).describe("Kill the command after this many milliseconds"),
    description: z.string().optional().describe("What the command does, in 5-10 words"),
  }),
  async execute({ command, timeout_ms }, ctx) {
    const result = await exec(ctx, ["bash", "-lc", command], { timeoutMs: timeout_ms });
    const parts: string[] = [];
    if (result.stdout) parts.push(result.stdout.replace(/\n$/, ""));
    if (result.stderr) parts.push(`stderr:\n${result.stderr.replace(/\n$/, "")}`);
    if (result.truncated) parts.push(`(output cut after ${MAX_STREAM_BYTES} bytes per stream; redirect it to a file and read that instead)`);
    if (result.timedOut) parts.push(`timed out after ${timeout_ms} ms`);
    parts.push(`exit code: ${result.exitCode}`);
    const text = parts.join("\n");
    if (result.exitCode !== 0 || result.timedOut) throw new ToolError(text);
    return text;
  },
});
