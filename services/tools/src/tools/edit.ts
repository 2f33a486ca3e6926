import { readFileSync } from "node:fs";
import { z } from "zod";
import { escalationParameters } from "../permissions.js";
import { defineTool, ToolError } from "../tool.js";
import { argvString, readForEdit, requireWritable, writeWholeFile } from "./files.js";

/**
 * edit: exact string replacement in a file, done here between a whole-file read and write; denied
 * before running in read-only mode. Only a file this session read (or wrote) and that has not
 * changed since, checked by the read and again by the write (see `readForEdit`), so that
 * old_string comes from what the file holds and no change made meanwhile is overwritten.
 */
export const edit = defineTool({
  name: "edit",
  hookAliases: ["Edit", "MultiEdit"],
  pathIsFile: true,
  writesPath: true,
  description: readFileSync(new URL("./edit.txt", import.meta.url), "utf8").trim(),
  parameters: z.strictObject({
    path: argvString("File path, relative to /workspace or absolute"),
    old_string: z.string().min(1).describe("Exact text to replace, including whitespace and indentation"),
    new_string: z.string().describe("Text to put in its place"),
    replace_all: z.boolean().default(false).describe("Replace every occurrence instead of exactly one"),
    ...escalationParameters,
  }),
  deniable: ["writes"],
  async execute({ path, old_string, new_string, replace_all }, ctx) {
    requireWritable(ctx, `editing ${path}`);
    if (old_string === new_string) throw new ToolError("old_string and new_string are identical; nothing to change");
    const { content, stamp } = await readForEdit(ctx, path);
    const parts = content.split(old_string);
    const count = parts.length - 1;
    if (count === 0) throw new ToolError(`old_string not found in ${path}; read the file and copy the text exactly, including whitespace`);
    if (count > 1 && !replace_all) {
      throw new ToolError(`old_string occurs ${count} times in ${path}; add surrounding lines to make it unique, or set replace_all to replace every occurrence`);
    }
    // split/join rather than String.replace, whose replacement string gives `$&` and friends a meaning.
    await writeWholeFile(ctx, path, parts.join(new_string), stamp);
    return `Edited ${path}: replaced ${count} occurrence${count === 1 ? "" : "s"}`;
  },
});
