// `tool_worker_death_recovery_ms`: a tool call runs `sleep 3` in the sandbox when the tools
// worker handling it is SIGKILLed; measured from the kill to the call's tool/result being logged.
// llm, tools and sandbox run as processes (bench/stack.ts); the loop runs in this process with a
// 30 s tool timeout, so that without recovery the call ends by that timeout instead of the
// default 11 minutes. The outcome says which of the two happened.
//
// With a launcher that runs replicas and has `crash(service, replica)`, tools runs as 2 replicas
// and the one handling the call is crashed (the supervisor restarts it; the other one is there
// for a retry). The handler is the replica that wrote to its NATS connection while the call was
// being dispatched (its /proc/<pid>/io write count moved; an idle replica writes nothing).
// Without replicas, the one tools process is killed (`kill`) and started again (`start`).
import { LoopRpc } from "@tack/bus";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { Launched, ServiceName } from "@tack/cli";
import { CreateSessionRequest, SubmitMessageRequest } from "@tack/proto";
import { startLoopService } from "@tack/loop-service";
import { nowMs, round, say, sleep } from "./lib.js";
import { Stack } from "./stack.js";

const TOOL_TIMEOUT_MS = 30_000;
const GOAL_MS = 5_000;
/** Each run of the command appends a line, so the workspace tells how many times it ran. */
const SLEEP_MS = 3_000;
const COMMAND = `sleep ${SLEEP_MS / 1000}; echo ran >> runs.txt; echo slept`;

/** The launcher's supervision API where it has one. */
type Supervising = Launched & {
  crash?: (service: ServiceName, replica?: number) => Promise<number>;
  pids?: (service: ServiceName) => number[];
};

/** Write system calls a process has made so far (/proc/<pid>/io `syscw`); undefined when unreadable. */
function writes(pid: number): number | undefined {
  try {
    const match = /^syscw:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/io`, "utf8"));
    return match ? Number(match[1]) : undefined;
  } catch {
    return undefined;
  }
}

export async function benchToolWorkerDeath(options: { natsUrl: string }): Promise<Record<string, unknown>> {
  const stack = await Stack.launch({ natsUrl: options.natsUrl, label: "death", services: ["llm", "tools", "sandbox"], replicas: { tools: 2 } });
  const loop = await startLoopService({ natsUrl: options.natsUrl, namespace: stack.namespace, toolTimeoutMs: TOOL_TIMEOUT_MS });
  const tack = stack.tack as Supervising;
  const replicaPids = tack.pids?.("tools") ?? [];
  const replicated = typeof tack.crash === "function" && replicaPids.length >= 2;
  try {
    const workspace = stack.workspace();
    const model = stack.script("death", [{ tool_calls: [{ name: "bash", arguments: { command: COMMAND } }] }, { content: "done" }]);
    const { bus } = stack;
    const { sessionId } = await bus.request(LoopRpc.CreateSession, CreateSessionRequest.fromPartial({ tenant: "local", model, workspace }), { timeoutMs: 30_000 });
    const writesBefore = replicaPids.map(writes);
    await bus.request(LoopRpc.SubmitMessage, SubmitMessageRequest.fromPartial({ tenant: "local", sessionId, text: "sleep" }));
    // Mid-call: the tools worker has sent the command to the sandbox (its sandbox.exec is on the bus).
    const deadline = Date.now() + 60_000;
    while (!stack.tap.of(sessionId, "sandbox.exec").some((r) => r.end === undefined)) {
      if (Date.now() > deadline) throw new Error(`the tool call never reached the sandbox; log: ${stack.watch.events(sessionId).map((s) => s.type).join(", ")}`);
      await sleep(10);
    }
    const execStartedAt = stack.tap.of(sessionId, "sandbox.exec").find((r) => r.end === undefined)!.start;
    await sleep(500);

    let victim: number | undefined;
    let how: string;
    let killedAt: number;
    let restartMs: number | undefined;
    if (replicated) {
      const moved = replicaPids.map((pid, i) => (writes(pid) ?? 0) - (writesBefore[i] ?? 0));
      const busiest = moved.indexOf(Math.max(...moved));
      const sure = moved.filter((n) => n === moved[busiest]).length === 1;
      killedAt = nowMs();
      victim = await tack.crash!("tools", busiest + 1);
      how = `crash of tools replica ${busiest + 1} of ${replicaPids.length}${sure ? " (the one handling the call)" : " (which replica handled the call could not be told)"}, restarted by the supervisor`;
    } else {
      victim = stack.tack.pid("tools");
      killedAt = nowMs();
      await stack.tack.kill("tools", "SIGKILL");
      const restartStarted = nowMs();
      await stack.tack.start("tools");
      restartMs = nowMs() - restartStarted;
      how = "kill of the only tools process, then start";
    }
    say(`worker death: ${how} (pid ${victim}) 500 ms into \`sleep 3\``);
    let ms: number | undefined;
    let outcome: string;
    let content = "";
    try {
      const result = await stack.watch.waitFor(sessionId, (events) => events.find((s) => s.type === "tool/result"), TOOL_TIMEOUT_MS + 5_000);
      ms = result.seenAt - killedAt;
      const payload = result.event.payload?.$case === "toolResult" ? result.event.payload.value : undefined;
      content = payload?.content ?? "";
      outcome = !payload?.isError && content.includes("slept") ? "recovered"
        : /time(d)? ?out/i.test(content) ? "tool_timeout"
          : "error";
    } catch {
      outcome = "no_result";
    }
    await stack.watch.turnEnd(sessionId, 1, 30_000).catch(() => undefined);
    let runs = 0;
    try {
      runs = readFileSync(join(workspace, "runs.txt"), "utf8").split("\n").filter(Boolean).length;
    } catch {
      // Never ran to its end.
    }
    const retries = stack.watch.events(sessionId).filter((s) => s.type === "tool/retry").length;
    // The command itself still had this long to run when the worker died: no recovery can report its result sooner.
    const commandLeftMs = Math.max(0, SLEEP_MS - (killedAt - execStartedAt));
    say(`worker death: ${outcome} after ${ms === undefined ? "-" : Math.round(ms)} ms (command ran ${runs}×, ${retries} retries logged)`);
    return {
      tool_worker_death_recovery_ms: {
        ms: ms === undefined ? null : Math.round(ms), outcome, goal: GOAL_MS, met: outcome === "recovered" && ms !== undefined && ms <= GOAL_MS,
        command_left_ms: Math.round(commandLeftMs), ...(ms === undefined ? {} : { overhead_ms: Math.round(ms - commandLeftMs) }),
        killed: how, ...(restartMs === undefined ? {} : { tools_restart_ms: round(restartMs, 0) }),
        command_runs: runs, tool_retries_logged: retries, tool_timeout_ms: TOOL_TIMEOUT_MS,
        ...(outcome === "recovered" ? {} : { result: content.slice(0, 300) }),
        definition: `a bash call \`${COMMAND}\` in the sandbox; 500 ms after its sandbox.exec went out the tools worker is SIGKILLed (see killed); ms = kill → the call's tool/result seen; command_left_ms = how much of the sleep was left at the kill, overhead_ms = ms − that. outcome: recovered (the command's own output), tool_timeout (the loop gave up after its ${TOOL_TIMEOUT_MS / 1000} s tool timeout), error, no_result. command_runs = how many times the command completed (it appends a line in the workspace)`,
      },
    };
  } finally {
    await loop.stop();
    await stack.close();
  }
}
