import { readFileSync } from "node:fs";
import { parseSpillPath } from "@tack/log";
import { z } from "zod";
import { defineTool, ToolError, type ToolContext } from "../tool.js";
import { exec } from "./exec.js";
import { argvString, CHECK_FILE, fileFailure, sandboxPath } from "./files.js";

/** Lines read when the model gives no limit. */
const DEFAULT_LIMIT = 2000;
/** Longer lines are cut so that one minified line cannot fill the result. */
const MAX_LINE_CHARS = 2000;
/** Stop adding lines past this many characters, far below the wrapper's cap and the loop's spill threshold, so the model gets a clean place to continue. */
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

/**
 * read: numbered lines of a text file, a window at a time. A `tack-spill:<call id>` path reads
 * a tool result of this session that was too large for the log, from the object store, the same way.
 */
export const read = defineTool({
  name: "read",
  description: readFileSync(new URL("./read.txt", import.meta.url), "utf8").trim(),
  parameters: z.strictObject({
    path: argvString("File path, relative to /workspace or absolute"),
    offset: z.number().int().min(1).optional().describe("First line to read (1-based)"),
    limit: z.number().int().min(1).default(DEFAULT_LIMIT).describe("Maximum number of lines"),
  }),
  async execute({ path, offset = 1, limit }, ctx) {
    const spilled = parseSpillPath(path);
    const { lines, total } = spilled === undefined ? await fileWindow(path, offset, limit, ctx) : await spillWindow(spilled, path, offset, limit, ctx.spilled);
    if (total === 0) return `(${path} is empty)`;
    if (offset > total) throw new ToolError(`offset ${offset} is past the end of ${path}, which has ${total} lines`);
    const last = offset + lines.split("\n").length - 1;
    if (last >= total) return lines;
    return `${lines}\n\n(showing lines ${offset}-${last} of ${total}; read more with offset=${last + 1})`;
  },
});

/** The selected lines of a file in the sandbox, numbered, and the file's line count. */
async function fileWindow(path: string, offset: number, limit: number, ctx: ToolContext): Promise<{ lines: string; total: number }> {
  const argv = ["bash", "-c", SCRIPT, "read", sandboxPath(path), String(offset), String(limit), String(MAX_READ_CHARS), String(MAX_LINE_CHARS)];
  const result = await exec(ctx, argv);
  if (result.exitCode !== 0 || result.timedOut) throw fileFailure(result, path, "read");
  const output = result.stdout.replace(/\n$/, "");
  const split = output.lastIndexOf("\n");
  return { total: Number(output.slice(split + 1)), lines: split < 0 ? "" : output.slice(0, split) };
}

/** The same window over a spilled result, numbered the way SCRIPT numbers a file's lines. */
async function spillWindow(
  callId: string, path: string, offset: number, limit: number, spilled: (callId: string) => Promise<Uint8Array | undefined>,
): Promise<{ lines: string; total: number }> {
  const bytes = await spilled(callId);
  if (!bytes) throw new ToolError(`No spilled result ${path} in this session; use the exact path given in the note of the shortened tool result`);
  const all = Buffer.from(bytes).toString("utf8").split("\n");
  if (all.at(-1) === "") all.pop(); // a final newline ends the last line; it does not start another
  const out: string[] = [];
  let used = 0;
  for (let n = offset; n <= all.length && out.length < limit; n++) {
    let line = all[n - 1]!;
    if (line.length > MAX_LINE_CHARS) line = `${line.slice(0, MAX_LINE_CHARS)}... (line cut at ${MAX_LINE_CHARS} characters)`;
    const numbered = `${String(n).padStart(6)}\t${line}`;
    if (out.length > 0 && used + numbered.length + 1 > MAX_READ_CHARS) break;
    out.push(numbered);
    used += numbered.length + 1;
  }
  return { lines: out.join("\n"), total: all.length };
}
