import { ToolError, type ToolContext } from "../tool.js";
import { exec } from "./exec.js";
import { sandboxPath } from "./files.js";

/**
 * Runs `rg` with `options` on `path` (default: the workspace) and keeps the first `max` output
 * lines, counting them all. Hidden files are searched (so `.github/` or `.env` can be found),
 * `.git/` is not; results are sorted by path so that the same tree always gives the same answer.
 */
export async function ripgrep(ctx: ToolContext, options: string[], path: string | undefined, max: number): Promise<{ lines: string[]; total: number }> {
  // `.git` is excluded after the model's globs: of several matching rg globs the last one wins.
  const argv = ["rg", "--hidden", "--sort", "path", ...options, "--glob", "!.git", "--", ...(path ? [sandboxPath(path)] : [])];
  // pipefail keeps rg's exit status (0 found, 1 nothing found, 2 error); awk prints the count last.
  // stdin is /dev/null because rg searches a piped stdin instead of the directory when given no path.
  const script = `set -o pipefail; "$@" < /dev/null | awk -v max=${max} 'NR <= max { print } END { print NR }'`;
  const result = await exec(ctx, ["bash", "-c", script, "search", ...argv]);
  if (result.timedOut) throw new ToolError("search timed out; narrow the path or pattern");
  const lines = result.stdout.replace(/\n$/, "").split("\n");
  const total = Number(lines.pop());
  if (result.exitCode > 1 && total === 0) throw new ToolError(result.stderr.trim() || `rg failed with exit code ${result.exitCode}`);
  return { lines, total };
}
