import { TackError, type Bus } from "@tack/bus";
import { ExecRequest, ExecResponse } from "@tack/proto";
import { isSandboxMode, modeRank, SANDBOX_MODES } from "@tack/config";

/** The command that lists a sandbox container's processes (run directly by the container's agent). */
export const PS_ARGV = ["ps", "-eo", "pid=,ppid=,args="] as const;

/** A process left running in a sandbox container. */
export interface SandboxProcess {
  readonly pid: number;
  readonly command: string;
}

/** Checks that `mode` is a sandbox mode; throws `loop.bad_sandbox_mode` naming the three otherwise. */
export function assertSandboxMode(mode: string): void {
  if (!isSandboxMode(mode)) {
    throw new TackError("loop.bad_sandbox_mode", `sandbox mode ${JSON.stringify(mode)} is unknown; use one of: ${SANDBOX_MODES.join(", ")}`);
  }
}

/** The sandbox modes strictly wider than `mode`, narrowest first. */
export function modesWiderThan(mode: string): string[] {
  return SANDBOX_MODES.slice(modeRank(mode) + 1);
}

/**
 * The processes in a `PS_ARGV` listing that a command left behind: everything but the init
 * (pid 1), the agent (the init's child running agent.py; orphans are reparented to the init
 * too, so the parent alone does not identify it), the listing's own `ps` and zombies (already
 * ended, only not yet reaped).
 */
export function leftoverProcesses(listing: string): SandboxProcess[] {
  const rows = listing.split("\n").flatMap((line) => {
    const m = /^\s*(\d+)\s+(\d+)\s+(.*)$/.exec(line);
    return m ? [{ pid: Number(m[1]), ppid: Number(m[2]), command: m[3]!.trim() }] : [];
  });
  const agents = new Set(rows.filter((r) => r.ppid === 1 && /\/agent\.py$/.test(r.command)).map((r) => r.pid));
  const ownPs = PS_ARGV.join(" ");
  return rows
    .filter((r) => r.pid !== 1 && !agents.has(r.pid) && !(agents.has(r.ppid) && r.command === ownPs) && !r.command.endsWith("<defunct>"))
    .map(({ pid, command }) => ({ pid, command }));
}

/** The refusal of a mode change while `processes` still run in the container of `wider`. */
export function modeChangeRefused(target: string, wider: string, processes: readonly SandboxProcess[]): TackError {
  const shown = processes.slice(0, 5).map((p) => `${p.pid} ${p.command.length > 80 ? `${p.command.slice(0, 77)}...` : p.command}`);
  const more = processes.length > shown.length ? ` and ${processes.length - shown.length} more` : "";
  return new TackError(
    "loop.mode_change_refused",
    `cannot change the sandbox mode to ${target}: ${processes.length === 1 ? "a process" : `${processes.length} processes`} started under the wider mode ${wider} ` +
    `${processes.length === 1 ? "is" : "are"} still running (pid ${shown.join("; pid ")}${more}); stop ${processes.length === 1 ? "it" : "them"} ` +
    `(e.g. a bash call \`kill ${processes.map((p) => p.pid).slice(0, 5).join(" ")}\` in a turn that has that mode) or wait for ${processes.length === 1 ? "it" : "them"} to end, then retry`,
    { details: { mode: target, wider_mode: wider, pids: processes.map((p) => p.pid).join(",") } },
  );
}

/**
 * Refuses (`loop.mode_change_refused`) a change to `target` while a container of the session
 * under a wider mode still runs a process; modes without a container are skipped.
 */
export async function assertNoWiderProcesses(bus: Bus, sessionId: string, target: string): Promise<void> {
  for (const wider of modesWiderThan(target)) {
    let listed: ExecResponse;
    try {
      listed = await bus.request(bus.names.sandboxExec, ExecRequest, ExecRequest.fromPartial({ sessionId, argv: [...PS_ARGV], mode: wider, timeoutMs: 10_000 }), ExecResponse, { timeoutMs: 15_000 });
    } catch (error) {
      const e = TackError.from(error);
      if (e.code === "sandbox.not_found") continue;
      if (e.code === "bus.no_responders" || e.code === "bus.timeout") {
        throw new TackError("loop.sandbox_unavailable", `cannot check the ${wider} container for running processes (${e.message}); start Tack with \`tack up\` and retry`, { retryable: true, cause: e });
      }
      throw e;
    }
    if (listed.exitCode !== 0) {
      throw new TackError("loop.sandbox_unavailable", `listing the processes of the ${wider} container failed (exit ${listed.exitCode}: ${Buffer.from(listed.stderr).toString("utf8").trim()}); retry`, { retryable: true });
    }
    const processes = leftoverProcesses(Buffer.from(listed.stdout).toString("utf8"));
    if (processes.length > 0) throw modeChangeRefused(target, wider, processes);
  }
}
