import { readFileSync } from "node:fs";
import { z } from "zod";
import { escalationParameters } from "../permissions.js";
import { defineTool } from "../tool.js";
import { argvString, requireWritable, writeWholeFile } from "./files.js";

/** write: creates or overwrites a file with the given content; denied before running in read-only mode. */
export const write = defineTool({
  name: "write",
  hookAliases: ["Write"],
  pathIsFile: true,
  writesPath: true,
  description: readFileSync(new URL("./write.txt", import.meta.url), "utf8").trim(),
  parameters: z.strictObject({
    path: argvString("File path, relative to /workspace or absolute"),
    content: z.string().describe("The complete new content of the file"),
    ...escalationParameters,
  }),
  deniable: ["writes"],
  async execute({ path, content }, ctx) {
    requireWritable(ctx, `writing ${path}`);
    await writeWholeFile(ctx, path, content);
    return `Wrote ${Buffer.byteLength(content, "utf8")} bytes to ${path}`;
  },
});
