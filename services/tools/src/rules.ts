import { posix } from "node:path";
import { TackError } from "@tack/bus";
import { WORKSPACE } from "@tack/config";
import { ExecRequest, type ReadRulesRequest, type ReadRulesResponse, type RulesFileRead } from "@tack/proto";
import { parseSandboxMode } from "./permissions.js";
import type { SandboxClient } from "./sandbox.js";
import { MAX_STREAM_BYTES } from "./tools/exec.js";

/** The names a folder's rules files may have, in the order they are listed. */
export const RULES_NAMES = ["AGENTS.md", "CLAUDE.md"] as const;
/** Bytes of each file sent back; the loop cuts them shorter (the rest only tells it the file was longer). */
export const RULES_READ_BYTES = 32 * 1024;
/** Folders one request may name: a bound on the script's argv and output. */
const MAX_DIRS = 64;
const TIMEOUT_MS = 30_000;

// One line per candidate that exists: `<base64 path> F <size> <sha256> <base64 head>` or `<base64 path> E <reason>`.
// Base64 keeps any byte of a path or a file from being read as framing.
const SCRIPT = `for p in "$@"; do
  [ -e "$p" ] || [ -L "$p" ] || continue
  printf '%s ' "$(printf '%s' "$p" | base64 -w0)"
  if [ ! -e "$p" ]; then echo "E is a broken symbolic link"; continue; fi
  if [ ! -f "$p" ]; then echo "E is not a regular file"; continue; fi
  sum=$(sha256sum 2>/dev/null < "$p") || { echo "E could not be read (permission denied?)"; continue; }
  echo "F $(stat -c %s -- "$p") \${sum%% *} $(head -c ${RULES_READ_BYTES} -- "$p" | base64 -w0)"
done`;

/**
 * `tools.rules`: the AGENTS.md and CLAUDE.md of `dirs` (relative to /workspace), read with one
 * exec in the session's sandbox, since the workspace may exist only there.
 */
export async function readRules(request: ReadRulesRequest, sandbox: SandboxClient, signal: AbortSignal): Promise<ReadRulesResponse> {
  const dirs = request.dirs.map(checkDir);
  if (dirs.length > MAX_DIRS) {
    throw new TackError("tools.invalid_request", `tools.rules got ${dirs.length} folders; send at most ${MAX_DIRS} per request`);
  }
  const candidates = dirs.flatMap((dir) => RULES_NAMES.map((name) => (dir === "." ? name : `${dir}/${name}`)));
  const mode = parseSandboxMode(request.sandboxMode);
  await sandbox.ensure({ sessionId: request.sessionId, tenant: request.tenant, workspace: request.workspace, mode });
  const response = await sandbox.exec(ExecRequest.fromPartial({
    sessionId: request.sessionId, argv: ["bash", "-c", SCRIPT, "rules", ...candidates], cwd: WORKSPACE, timeoutMs: TIMEOUT_MS,
    maxOutputBytes: MAX_STREAM_BYTES, mode,
  }), signal);
  if (response.exitCode !== 0 || response.timedOut) {
    const why = response.timedOut ? "timed out" : `exited with ${response.exitCode}: ${Buffer.from(response.stderr).toString("utf8").trim()}`;
    throw new TackError("tools.rules_failed", `reading the rules files in session ${request.sessionId}'s sandbox ${why}; check that the sandbox image has bash and coreutils`);
  }
  return { files: parseListing(Buffer.from(response.stdout).toString("latin1"), response.truncated) };
}

/** A folder as sent: relative to /workspace (absolute ones under it are made relative), inside it, `.` for the root. */
function checkDir(dir: string): string {
  const inside = dir.startsWith(`${WORKSPACE}/`) || dir === WORKSPACE ? posix.relative(WORKSPACE, dir) || "." : dir;
  const normalized = posix.normalize(inside).replace(/\/$/, "");
  if (dir.includes("\0") || posix.isAbsolute(normalized) || normalized === ".." || normalized.startsWith("../")) {
    throw new TackError("tools.invalid_request", `rules folder ${JSON.stringify(dir)} is not inside ${WORKSPACE}; send folders relative to it, e.g. "src/api"`);
  }
  return normalized;
}

/** The script's output; a line cut by the output limit becomes an error for that file instead of a wrong content. */
function parseListing(stdout: string, truncated: boolean): RulesFileRead[] {
  const lines = stdout.split("\n");
  // The last element is what followed the last newline: empty unless the output was cut.
  const complete = lines.slice(0, -1);
  const files = complete.map((line): RulesFileRead => {
    const [path64 = "", kind, ...rest] = line.split(" ");
    const path = Buffer.from(path64, "base64").toString("utf8");
    if (kind === "F") {
      const [size = "0", sha256 = "", content64 = ""] = rest;
      return { path, content: Buffer.from(content64, "base64"), bytes: Number(size), sha256, error: "" };
    }
    return { path, content: Buffer.alloc(0), bytes: 0, sha256: "", error: rest.join(" ") || "could not be read" };
  });
  const cut = lines.at(-1);
  if (truncated && cut) {
    const path = Buffer.from(cut.split(" ")[0] ?? "", "base64").toString("utf8");
    if (path) files.push({ path, content: Buffer.alloc(0), bytes: 0, sha256: "", error: "was not read: the rules files of this request exceeded the output limit" });
  }
  return files;
}
