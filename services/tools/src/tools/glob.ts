import { readFileSync } from "node:fs";
import { z } from "zod";
import { defineTool } from "../tool.js";
import { argvString } from "./files.js";
import { ripgrep } from "./search.js";

const MAX_RESULTS = 100;

/** glob: file paths matching a glob, sorted, at most 100. */
export const glob = defineTool({
  name: "glob",
  hookAliases: ["Glob"],
  description: readFileSync(new URL("./glob.txt", import.meta.url), "utf8").trim(),
  parameters: z.strictObject({
    pattern: argvString("Glob, e.g. `**/*.ts` or `src/**/test_*.py`"),
    path: argvString("Directory to search; default /workspace").optional(),
  }),
  async execute({ pattern, path }, ctx) {
    const { lines, total } = await ripgrep(ctx, ["--files", "--glob", pattern], path, MAX_RESULTS);
    if (total === 0) return "No files found";
    if (total <= MAX_RESULTS) return lines.join("\n");
    return `${lines.join("\n")}\n\n(showing the first ${MAX_RESULTS} of ${total} files; narrow the pattern or path)`;
  },
});
