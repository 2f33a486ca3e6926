import { readFileSync } from "node:fs";
import { z } from "zod";
import { escalationParameters } from "../permissions.js";
import { defineTool, ToolError, type ToolContext } from "../tool.js";
import { exec, MAX_STREAM_BYTES } from "../tools/exec.js";
import { argvString, CHECK_FILE, fileFailure, requireWritable, sandboxPath, writeWholeFile } from "../tools/files.js";

/** A view stops adding lines past this many characters (as read does), and says where to go on. */
const MAX_VIEW_CHARS = 40_000;
const MAX_LINE_CHARS = 2000;
const MAX_LISTED = 500;

/**
 * editor (minimal mode): one tool for viewing and changing files, by `command`. Files are read and
 * written whole (writes through files.ts, as write and edit do).
 */
export const editor = defineTool({
  name: "editor",
  pathIsFile: true,
  deniable: ["writes"],
  description: readFileSync(new URL("./editor.txt", import.meta.url), "utf8").trim(),
  parameters: z.strictObject({
    command: z.enum(["view", "create", "str_replace", "insert"]).describe("What to do"),
    path: argvString("File path, relative to /workspace or absolute"),
    view_range: z.tuple([z.number().int().min(1), z.number().int().min(-1)]).optional().describe("view: [first, last] line, 1-based; last -1 reads to the end"),
    file_text: z.string().optional().describe("create: the whole content"),
    old_str: z.string().min(1).optional().describe("str_replace: exact text to replace, whitespace included"),
    new_str: z.string().optional().describe("str_replace: the replacement; insert: the lines to insert"),
    insert_line: z.number().int().min(0).optional().describe("insert: the line after which new_str goes"),
    ...escalationParameters,
  }),
  async execute(args, ctx) {
    const { command, path } = args;
    const need = <T>(value: T | undefined, field: string): T => {
      if (value === undefined) throw new ToolError(`editor ${command} needs ${field}`);
      return value;
    };
    if (command === "view") return view(ctx, path, args.view_range);
    requireWritable(ctx, `${command === "create" ? "writing" : "editing"} ${path}`);
    if (command === "create") {
      const text = need(args.file_text, "file_text");
      await writeWholeFile(ctx, path, text);
      return `Created ${path} (${Buffer.byteLength(text, "utf8")} bytes)`;
    }
    const content = await readText(ctx, path);
    const newStr = need(args.new_str, "new_str");
    if (command === "str_replace") {
      const oldStr = need(args.old_str, "old_str");
      const parts = content.split(oldStr);
      if (parts.length === 1) throw new ToolError(`old_str not found in ${path}; view the file and copy the text exactly, whitespace included`);
      if (parts.length > 2) throw new ToolError(`old_str occurs ${parts.length - 1} times in ${path}; include more surrounding lines so it occurs once`);
      await writeWholeFile(ctx, path, parts.join(newStr));
      const line = parts[0]!.split("\n").length;
      return `Edited ${path}: replaced the text at line ${line}`;
    }
    const after = need(args.insert_line, "insert_line");
    // A final newline ends the last line rather than starting another.
    const ended = content === "" || content.endsWith("\n");
    const lines = content === "" ? [] : (ended ? content.slice(0, -1) : content).split("\n");
    if (after > lines.length) throw new ToolError(`insert_line ${after} is past the end of ${path}, which has ${lines.length} lines`);
    const inserted = newStr.replace(/\n$/, "").split("\n");
    lines.splice(after, 0, ...inserted);
    await writeWholeFile(ctx, path, `${lines.join("\n")}${ended ? "\n" : ""}`);
    return `Inserted ${inserted.length} line${inserted.length === 1 ? "" : "s"} after line ${after} of ${path}`;
  },
});

/** A whole text file; fails for one too large to send back or not UTF-8. */
async function readText(ctx: ToolContext, path: string): Promise<string> {
  const result = await exec(ctx, ["bash", "-c", `${CHECK_FILE} cat < "$1"`, "editor", sandboxPath(path)]);
  if (result.exitCode === 4) throw new ToolError(`${path} is a directory, not a file`);
  if (result.exitCode !== 0 || result.timedOut) throw fileFailure(result, path, "read");
  if (result.truncated) throw new ToolError(`${path} is over ${MAX_STREAM_BYTES} bytes, too large for the editor; change it with shell (e.g. sed or python3)`);
  if (!result.stdoutIsUtf8) throw new ToolError(`${path} is not UTF-8 text; change it with shell instead`);
  return result.stdout;
}

async function view(ctx: ToolContext, path: string, range: readonly [number, number] | undefined): Promise<string> {
  let content: string;
  try {
    content = await readText(ctx, path);
  } catch (error) {
    if (error instanceof ToolError && error.message.startsWith(`${path} is a directory`)) return listDirectory(ctx, path);
    throw error;
  }
  const lines = content === "" ? [] : content.replace(/\n$/, "").split("\n");
  if (lines.length === 0) return `(${path} is empty)`;
  const [first, last] = range ?? [1, -1];
  const end = last === -1 ? lines.length : last;
  if (first > lines.length) throw new ToolError(`view_range starts at line ${first}, past the end of ${path}, which has ${lines.length} lines`);
  if (end < first || end > lines.length) throw new ToolError(`view_range [${first}, ${last}] is not within 1..${lines.length} of ${path}; use -1 as last to read to the end`);
  const out: string[] = [];
  let used = 0;
  for (let n = first; n <= end; n++) {
    let line = lines[n - 1]!;
    if (line.length > MAX_LINE_CHARS) line = `${line.slice(0, MAX_LINE_CHARS)}... (line cut at ${MAX_LINE_CHARS} characters)`;
    const numbered = `${String(n).padStart(6)}\t${line}`;
    if (out.length > 0 && used + numbered.length + 1 > MAX_VIEW_CHARS) {
      out.push(`\n(showing lines ${first}-${n - 1} of ${lines.length}; view more with view_range [${n}, ${last}])`);
      break;
    }
    out.push(numbered);
    used += numbered.length + 1;
  }
  return out.join("\n");
}

async function listDirectory(ctx: ToolContext, path: string): Promise<string> {
  const script = `find "$1" -mindepth 1 -maxdepth 2 -not -path '*/.*' | sort | head -n ${MAX_LISTED + 1}`;
  const result = await exec(ctx, ["bash", "-c", script, "view", sandboxPath(path)]);
  if (result.exitCode !== 0) throw new ToolError(`Could not list ${path}: ${result.stderr.trim() || `exit code ${result.exitCode}`}`);
  const entries = result.stdout.split("\n").filter(Boolean);
  if (entries.length === 0) return `(${path} is an empty directory)`;
  const shown = entries.slice(0, MAX_LISTED).join("\n");
  return entries.length > MAX_LISTED ? `${shown}\n(more than ${MAX_LISTED} entries; view a subdirectory)` : shown;
}
