import { SandboxRpc, TackError, ToolsRpc, type Bus } from "@tack/bus";
import { ListProcessesResponse } from "@tack/proto";
import { isSandboxMode, modeRank, SANDBOX_MODES } from "@tack/config";

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

/** How long a mode change waits for processes of a wider mode to end before it is refused. */
export const WIDER_PROCESSES_GRACE_MS = 2_000;

/**
 * Refuses (`loop.mode_change_refused`) a change to `target` while a container of the session
 * under a wider mode still runs a process; modes without a container are skipped. Processes that
 * end within `graceMs` do not count: a short command still finishing (such as the read of a new
 * session's hooks and rules files, started at its creation under the default mode) is waited
 * for, asked again every 100 ms. The sandbox service lists every process but the container's
 * exec agent, which its agent tells apart by pid: a process calling itself agent.py is listed
 * like any other.
 */
export async function assertNoWiderProcesses(bus: Bus, sessionId: string, target: string, graceMs = WIDER_PROCESSES_GRACE_MS): Promise<void> {
  const deadline = Date.now() + graceMs;
  for (const wider of modesWiderThan(target)) {
    for (;;) {
      let listed: ListProcessesResponse;
      try {
        listed = await bus.request(SandboxRpc.ListProcesses, { sessionId, mode: wider }, { timeoutMs: 20_000 });
      } catch (error) {
        const e = TackError.from(error);
        if (e.code === "sandbox.not_found") break;
        if (e.code === "bus.no_responders" || e.code === "bus.timeout") {
          throw new TackError("loop.sandbox_unavailable", `cannot check the ${wider} container for running processes (${e.message}); start Tack with \`tack up\` and retry`, { retryable: true, cause: e });
        }
        throw e;
      }
      const processes = listed.processes.map(({ pid, command }) => ({ pid, command }));
      if (processes.length === 0) break;
      if (Date.now() >= deadline) throw modeChangeRefused(target, wider, processes);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

/**
 * Checks that the tools service has mode `mode` (it owns the list of modes); throws
 * `loop.unknown_mode` naming the modes it has. `standard` is every tools service's mode, so it
 * is not asked about (a session in it can be created while no tools worker runs).
 */
export async function assertToolsMode(bus: Bus, mode: string): Promise<void> {
  if (mode === "standard") return;
  try {
    await bus.request(ToolsRpc.ListTools, { mode }, { timeoutMs: 10_000 });
  } catch (error) {
    const e = TackError.from(error);
    if (e.code === "tools.unknown_mode") {
      const known = /known modes: (.*)$/.exec(e.message)?.[1];
      throw new TackError("loop.unknown_mode", `mode ${JSON.stringify(mode)} is unknown; use one of: ${known ?? "the modes the tools service lists"}`, { details: { mode } });
    }
    if (e.code === "bus.no_responders" || e.code === "bus.timeout") {
      throw new TackError("loop.tools_unavailable", `cannot check mode ${JSON.stringify(mode)}: no tools service answers (${e.message}); start Tack with \`tack up\` and retry`, { retryable: true, cause: e });
    }
    throw e;
  }
}
