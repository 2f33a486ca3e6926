import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { z } from "zod";
import { defineTool, ToolError, type ToolContext } from "../tool.js";
import { exec } from "./exec.js";

/** Background jobs running at once in one sandbox; the next start is refused. */
export const MAX_RUNNING_JOBS = 10;
/** Output job_output returns per call; the rest waits for the next call. */
const MAX_OUTPUT_BYTES = 30_000;
/** Longest wait_ms; the exec's own timeout is this plus the usual margin. */
const MAX_WAIT_MS = 300_000;
/** How long job_kill waits after SIGTERM before it sends SIGKILL. */
const KILL_GRACE_TENTHS = 20;
/** Allowance on top of a wait for the script's own work. */
const EXEC_MARGIN_MS = 30_000;

/**
 * Jobs live in the container, not in this service: every tools replica sees them, and they end
 * with the container (its /tmp is a tmpfs). One directory per job under $J holds `cmd`, `pid`
 * (the wrapper's, which leads the job's session and process group), `start`, `out` (stdout and
 * stderr), `offset` (what job_output has returned), and, once it ends, `exit` and `end`; job_kill
 * adds `killed`. Times are bash's $EPOCHREALTIME, read without a fork. `state` sets st to running,
 * exited N, killed or lost (the process is gone without an exit code: killed outside job_kill).
 */
const PRELUDE = `J="\${TMPDIR:-/tmp}/tack-jobs"
state() {
  st=running end= start= pid=
  read -r start 2>/dev/null < "$1/start"; read -r pid 2>/dev/null < "$1/pid"
  if [ -e "$1/killed" ]; then st=killed; read -r end < "$1/killed"
  elif [ -e "$1/exit" ]; then read -r code < "$1/exit"; st="exited $code"; read -r end < "$1/end"
  elif [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then st=lost
  fi
}
`;

// $1 id, $2 directory (relative to /workspace), $3 command, $4 the running limit. Exit 7: no such
// directory; 8: at the limit (the running jobs listed). The count and the start are one step under
// the lock, so concurrent starts cannot pass the limit together. The wrapper traps TERM so that it
// outlives job_kill's SIGTERM to the group and records the command's exit code.
const START = `${PRELUDE}cd -- "$2" 2>/dev/null || exit 7
mkdir -p "$J" && exec 9> "$J/.lock" && flock 9 || exit
n=0 running=
for d in "$J"/*/; do
  [ -d "$d" ] || continue; state "$d"; [ "$st" = running ] || continue
  n=$((n + 1)); IFS= read -r first < "$d/cmd"; b=\${d%/}; running+="\${b##*/}  $first"$'\\n'
done
[ "$n" -lt "$4" ] || { printf '%s' "$running"; exit 8; }
j="$J/$1"; mkdir "$j" || exit
printf '%s' "$3" > "$j/cmd"; printf '%s' "$EPOCHREALTIME" > "$j/start"
setsid bash -c 'trap : TERM; bash -c "$1" > "$2/out" 2>&1 < /dev/null; code=$?
printf "%s" "$EPOCHREALTIME" > "$2/end"; printf "%s" "$code" > "$2/exit.new"; mv "$2/exit.new" "$2/exit"' tack-job "$3" "$j" < /dev/null > /dev/null 2>&1 9>&- &
p=$!
# Recorded once setsid has made the job its process group's leader (or it already ended), so that a kill of the group right after finds it.
for ((i = 0; i < 500; i++)); do kill -0 -- "-$p" 2>/dev/null || ! kill -0 "$p" 2>/dev/null && break; sleep 0.002; done
printf '%s' "$p" > "$j/pid"
printf '%s %s\\n' "$1" "$p"`;

// Per job: id, state, start, end (empty while running), then the command and a NUL. First line: the container's clock.
const LIST = `${PRELUDE}printf '%s\\n' "$EPOCHREALTIME"
for d in "$J"/*/; do
  [ -d "$d" ] || continue; state "$d"; IFS= read -r -d '' cmd < "$d/cmd"; b=\${d%/}
  printf '%s\\t%s\\t%s\\t%s\\n%s\\0' "\${b##*/}" "$st" "$start" "$end" "$cmd"
done`;

// $1 id, $2 most bytes, $3 wait in tenths of a second. Exit 9: no such job. Waits (without the lock)
// for output past the offset or the end, then, under the job's lock, takes the state before the size
// (so an ended job's output is whole), moves the cut back to a UTF-8 character boundary and keeps the
// new offset. Prints: now, state, start, end, bytes left after this chunk, then the command, NUL, the chunk.
const OUTPUT = `${PRELUDE}d="$J/$1"; [ -d "$d" ] || exit 9
off=0; read -r off 2>/dev/null < "$d/offset"
for ((i = 0; i < $3; i++)); do
  [ -e "$d/exit" ] || [ -e "$d/killed" ] || [ "$(stat -c %s -- "$d/out" 2>/dev/null || echo 0)" -gt "$off" ] && break
  state "$d"; [ "$st" = running ] || break
  sleep 0.1
done
exec 9> "$d/.lock" && flock 9 || exit
off=0; read -r off 2>/dev/null < "$d/offset"
state "$d"; size=$(stat -c %s -- "$d/out" 2>/dev/null || echo 0)
n=$((size - off)); [ "$n" -lt 0 ] && n=0
if [ "$n" -gt "$2" ]; then
  n=$2; read -r -a b <<< "$(tail -c +$((off + n - 2)) -- "$d/out" | head -c 4 | od -An -tu1)"
  back=0; while [ "$back" -lt 3 ] && [ "\${b[3 - back]:-0}" -ge 128 ] && [ "\${b[3 - back]}" -lt 192 ]; do back=$((back + 1)); done
  n=$((n - back))
fi
printf '%s' "$((off + n))" > "$d/offset"
IFS= read -r -d '' cmd < "$d/cmd"
printf '%s\\n%s\\n%s\\n%s\\n%s\\n%s\\0' "$EPOCHREALTIME" "$st" "$start" "$end" "$((size - off - n))" "$cmd"
[ "$n" -gt 0 ] && tail -c +$((off + 1)) -- "$d/out" | head -c "$n"
exit 0`;

// $1 id, $2 grace in tenths of a second. Exit 9: no such job. A job that is not running is left
// alone (its state printed); otherwise SIGTERM to its process group, and SIGKILL unless the wrapper
// recorded the end (or is gone) within the grace.
const KILL = `${PRELUDE}d="$J/$1"; [ -d "$d" ] || exit 9
state "$d"; IFS= read -r -d '' cmd < "$d/cmd"
if [ "$st" = running ] && [ -n "$pid" ]; then
  printf '%s' "$EPOCHREALTIME" > "$d/killed"
  kill -TERM -- "-$pid" 2>/dev/null
  for ((i = 0; i < $2; i++)); do [ -e "$d/exit" ] || ! kill -0 "$pid" 2>/dev/null && break; sleep 0.1; done
  kill -KILL -- "-$pid" 2>/dev/null
  was=running; state "$d"
fi
printf '%s\\n%s\\n%s\\n%s\\n%s\\0%s' "$EPOCHREALTIME" "$st" "$start" "$end" "\${was:-$st}" "$cmd"`;

/** A job id as the model passes it: only what ids are made of, so it can never name a path outside the job directory. */
function jobId() {
  return z.string().regex(/^[A-Za-z0-9_-]{1,32}$/, "is not a job id; ids look like j1a2b3c (job_list shows them)").describe("The id bash gave the job when it started it");
}

/**
 * Starts `command` detached in the session's sandbox, in `dir` (relative to /workspace), and
 * returns the text of bash's result: the job's id, pid and command.
 */
export async function startJob(ctx: ToolContext, command: string, dir: string, workdir: string | undefined): Promise<string> {
  const result = await exec(ctx, ["bash", "-c", START, "job", `j${randomBytes(3).toString("hex")}`, dir, command, String(MAX_RUNNING_JOBS)]);
  if (result.exitCode === 7) throw new ToolError(noWorkdir(workdir ?? dir));
  if (result.exitCode === 8) {
    throw new ToolError(`Not started: ${MAX_RUNNING_JOBS} background jobs are already running in this sandbox, the most it runs at once; stop one with job_kill (or wait for one to end) and start this again. Running:\n${result.stdout.trimEnd()}`);
  }
  if (result.exitCode !== 0 || result.timedOut) throw new ToolError(`Could not start the background job: ${result.stderr.trim() || (result.timedOut ? "timed out" : `exit code ${result.exitCode}`)}`);
  // The id as the script printed it: a retried call replays the first attempt's output, which named that attempt's id.
  const [id, pid] = result.stdout.trim().split(" ");
  return `Started background job ${id} (pid ${pid}): ${shown(command)}\nIt runs on after this call, until it ends, job_kill stops it or the sandbox goes; job_output ${id} returns its output.`;
}

/** The error for a workdir that is not a directory in the sandbox. */
export function noWorkdir(workdir: string): string {
  return `workdir ${workdir} is not a directory in /workspace; create it first (mkdir -p) or leave workdir out`;
}

export const job_list = defineTool({
  name: "job_list",
  description: readFileSync(new URL("./job_list.txt", import.meta.url), "utf8").trim(),
  parameters: z.strictObject({}),
  async execute(_args, ctx) {
    const result = await exec(ctx, ["bash", "-c", LIST, "job_list"]);
    if (result.exitCode !== 0 || result.timedOut) throw new ToolError(`Could not list the background jobs: ${result.stderr.trim() || `exit code ${result.exitCode}`}`);
    const split = result.stdout.indexOf("\n");
    const now = Number(result.stdout.slice(0, split));
    const jobs = result.stdout.slice(split + 1).split("\0").filter(Boolean).map((record) => {
      const newline = record.indexOf("\n");
      const [id = "", state = "", start = "", end = ""] = record.slice(0, newline).split("\t");
      return { id, state, start: Number(start), end: end ? Number(end) : now, command: record.slice(newline + 1) };
    });
    if (jobs.length === 0) return "No background jobs in this sandbox (jobs end with it: after it was stopped or left idle, none are left)";
    jobs.sort((a, b) => a.start - b.start);
    const rows = jobs.map((job) => `${job.id}  ${stateText(job.state).padEnd(9)}  ${duration(job.end - job.start).padStart(7)}  ${shown(job.command)}`);
    return `${jobs.length} background job${jobs.length === 1 ? "" : "s"} (id, state, runtime, command):\n${rows.join("\n")}`;
  },
});

export const job_output = defineTool({
  name: "job_output",
  hookAliases: ["BashOutput"],
  description: readFileSync(new URL("./job_output.txt", import.meta.url), "utf8").trim(),
  parameters: z.strictObject({
    id: jobId(),
    wait_ms: z.number().int().min(0).max(MAX_WAIT_MS).default(0).describe("Wait up to this long for new output or the end of the job"),
  }),
  async execute({ id, wait_ms }, ctx) {
    const tenths = Math.ceil(wait_ms / 100);
    const result = await exec(ctx, ["bash", "-c", OUTPUT, "job_output", id, String(MAX_OUTPUT_BYTES), String(tenths)], { timeoutMs: wait_ms + EXEC_MARGIN_MS });
    if (result.exitCode === 9) throw new ToolError(gone(id));
    if (result.exitCode !== 0 || result.timedOut) throw new ToolError(`Could not read the output of job ${id}: ${result.stderr.trim() || (result.timedOut ? "timed out" : `exit code ${result.exitCode}`)}`);
    const nul = result.stdout.indexOf("\0");
    const [now = "", state = "", start = "", end = "", left = "0", ...command] = result.stdout.slice(0, nul).split("\n");
    const chunk = result.stdout.slice(nul + 1);
    const runtime = duration((end ? Number(end) : Number(now)) - Number(start));
    const parts = [`job ${id} (${shown(command.join("\n"))}): ${stateText(state)}, ${state === "running" ? "running for" : "ran"} ${runtime}`];
    parts.push(chunk ? chunk.replace(/\n$/, "") : "(no new output)");
    if (Number(left) > 0) parts.push(`(${left} more bytes of output; call job_output again for them)`);
    return parts.join("\n");
  },
});

export const job_kill = defineTool({
  name: "job_kill",
  hookAliases: ["KillShell"],
  description: readFileSync(new URL("./job_kill.txt", import.meta.url), "utf8").trim(),
  parameters: z.strictObject({ id: jobId() }),
  async execute({ id }, ctx) {
    const result = await exec(ctx, ["bash", "-c", KILL, "job_kill", id, String(KILL_GRACE_TENTHS)]);
    if (result.exitCode === 9) throw new ToolError(gone(id));
    if (result.exitCode !== 0 || result.timedOut) throw new ToolError(`Could not kill job ${id}: ${result.stderr.trim() || (result.timedOut ? "timed out" : `exit code ${result.exitCode}`)}`);
    const nul = result.stdout.indexOf("\0");
    const [now = "", state = "", start = "", end = "", was = ""] = result.stdout.slice(0, nul).split("\n");
    const command = shown(result.stdout.slice(nul + 1));
    const runtime = duration((end ? Number(end) : Number(now)) - Number(start));
    if (was !== "running") return `job ${id} (${command}) was not running: ${stateText(state)} after ${runtime}; nothing to kill`;
    return `Killed job ${id} (${command}) after ${runtime}: its process group got SIGTERM, then SIGKILL if still running after ${KILL_GRACE_TENTHS / 10} s`;
  },
});

/** The error for a job id the sandbox does not know. */
function gone(id: string): string {
  return `No job ${id} in this sandbox: it never existed here, or it is gone with the sandbox it ran in (stopped, or removed after being idle). job_list shows the jobs there are.`;
}

function stateText(state: string): string {
  if (state === "lost") return "ended (no exit code: killed outside job_kill)";
  return state;
}

/** The first line of a command, at most 100 characters, as results and listings show it. */
function shown(command: string): string {
  const first = command.split("\n", 1)[0]!;
  return first.length > 100 || first.length < command.length ? `${first.slice(0, 100)} …` : first;
}

/** "4s", "2m05s", "1h02m" from seconds. */
function duration(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}
