import { readFileSync } from "node:fs";
import { z } from "zod";
import { defineTool, ToolError } from "../tool.js";
import { exec } from "./exec.js";
import { argvString, CHECK_FILE, fileFailure, sandboxPath } from "./files.js";

/** Lines read when the model gives no limit. */
const DEFAULT_LIMIT = 2000;
/** Longer lines are cut so that one minified line cannot fill the result. */
const MAX_LINE_CHARS = 2000;
/** Stop adding lines past this many characters, below the wrapper's cap, so the model gets a clean place to continue. */
const MAX_READ_CHARS = 40_000;

// Prints the selected lines `cat -n` style, then the file's total line count as the last line.
const SCRIPT = `${CHECK_FILE} awk -v start="$2" -v limit="$3" -v budget="$4" -v width="$5" '
NR >= start && shown < limit && !full {
  line = $0
  if (length(line) > width) line = substr(line, 1, width) "... (line cut at " width " characters)"
  out = sprintf("%6d\\t%s", NR, line)
  if (shown > 0 && used + length(out) + 1 > budget) full = 1
  else { print out; shown++; used += length(out) + 1 }
}
END { print NR }' < "$1"`;

/** read: numbered lines of a text file, a window at a time. */
export const read = defineTool({
  name: "read",
  description: readFileSync(new URL("./read.txt", import.meta.url), "utf8").trim(),
  parameters: z.strictObject({
    path: argvString("File path, relative to /workspace or absolute"),
    offset: z.number().int().min(1).optional().describe("First line to read (1-based)"),
    limit: z.number().int().min(1).default(DEFAULT_LIMIT).describe("Maximum number of lines"),
  }),
  async execute({ path, offset = 1, limit }, ctx) {
    const argv = ["bash", "-c", SCRIPT, "read", sandboxPath(path), String(offset), String(limit), String(MAX_READ_CHARS), String(MAX_LINE_CHARS)];
    const result = await exec(ctx, argv);
    if (result.exitCode !== 0 || result.timedOut) throw fileFailure(result, path, "read");
    const output = result.stdout.replace(/\n$/, "");
    const split = output.lastIndexOf("\n");
    const total = Number(output.slice(split + 1));
    const lines = split < 0 ? "" : output.slice(0, split);
    if (total === 0) return `(${path} is empty)`;
    if (offset > total) throw new ToolError(`offset ${offset} is past the end of ${path}, which has ${total} lines`);
    const last = offset + lines.split("\n").length - 1;
    if (last >= total) return lines;
    return `${lines}\n\n(showing lines ${offset}-${last} of ${total}; read more with offset=${last + 1})`;
  },
});
