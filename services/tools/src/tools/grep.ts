import { readFileSync } from "node:fs";
import { z } from "zod";
import { defineTool } from "../tool.js";
import { argvString } from "./files.js";
import { ripgrep } from "./search.js";

const MAX_MATCHES = 250;
/** Longer matching lines show a preview, so one minified file cannot fill the result. */
const MAX_COLUMNS = 500;

/** grep: lines matching a regular expression, as `path:line:text`, at most 250. */
export const grep = defineTool({
  name: "grep",
  hookAliases: ["Grep"],
  description: readFileSync(new URL("./grep.txt", import.meta.url), "utf8").trim(),
  parameters: z.strictObject({
    pattern: argvString("Regular expression (Rust regex syntax)"),
    path: argvString("File or directory to search; default /workspace").optional(),
    glob: argvString("Only search files matching this glob, e.g. `*.ts`").optional(),
    case_insensitive: z.boolean().default(false).describe("Ignore case"),
  }),
  async execute({ pattern, path, glob, case_insensitive }, ctx) {
    const args = ["--line-number", "--with-filename", "--no-heading", "--color", "never", "--max-columns", String(MAX_COLUMNS), "--max-columns-preview"];
    if (case_insensitive) args.push("--ignore-case");
    if (glob) args.push("--glob", glob);
    args.push("--regexp", pattern);
    const { lines, total } = await ripgrep(ctx, args, path, MAX_MATCHES);
    if (total === 0) return "No matches found";
    if (total <= MAX_MATCHES) return lines.join("\n");
    return `${lines.join("\n")}\n\n(showing the first ${MAX_MATCHES} of ${total} matching lines; narrow the pattern, path or glob)`;
  },
});
