// `load_100_sessions`: many scripted sessions at once through the real services as separate
// processes (bench/stack.ts), each a few steps whose tool calls run in its own sandbox container;
// how many finish, how long their first and later steps take, each service's peak memory, and
// where the machine's CPU time went (bench/cpu.ts) while they were created, ran and were released.
import { execFileSync } from "node:child_process";
import { SandboxRpc } from "@tack/bus";
import { ReleaseSandboxRequest } from "@tack/proto";
import { SERVICES } from "@tack/cli";
import { CpuMeter, perSession, sumSplits, type CpuSample, type CpuSplit } from "./cpu.js";
import { collectParts, medians, percentile, pooled, round, RssSampler, say, stepParts, type Seen } from "./lib.js";
import { Stack } from "./stack.js";

const SESSIONS = Number(process.env.TACK_BENCH_LOAD_SESSIONS ?? 100);
/** How long the whole run may take before the sessions still going are counted as not finished. */
const CAP_MS = Number(process.env.TACK_BENCH_LOAD_CAP_MS ?? 300_000);
const GOALS = { finished: SESSIONS, first_step_p50_ms: 500, step_p99_ms: 100, loop_rss_mb: 300 };

/** Each session: write a file, read it, list the workspace, answer — three steps with a tool call each, then the answer. */
const REPLIES = [
  { content: "Writing.", tool_calls: [{ name: "bash", arguments: { command: "echo load > load.txt" } }] },
  { content: "Reading.", tool_calls: [{ name: "read", arguments: { path: "load.txt" } }] },
  { content: "Listing.", tool_calls: [{ name: "bash", arguments: { command: "ls -la && cat load.txt" } }] },
  { content: "Done: load.txt says load." },
];

/** One finished (or abandoned) session's numbers. */
interface Outcome {
  reason: string;
  toolErrors: number;
  firstStep?: number;
  /** step/start → step/end of the steps after the first (the session's container exists by then). */
  laterSteps: number[];
  /** The first step's parts (`stepParts`) and what came before its step/start. */
  firstParts: Record<string, number>;
}

function outcome(stack: Stack, session: string, sentAt: number, events: Seen[], reason: string): Outcome {
  const results = events.filter((s) => s.type === "tool/result");
  const firstResult = results[0];
  const starts = events.filter((s) => s.type === "step/start");
  const ends = events.filter((s) => s.type === "step/end");
  const laterSteps: number[] = [];
  for (const end of ends) {
    const payload = end.event.payload;
    if (payload?.$case !== "stepEnd" || payload.value.step < 2) continue;
    const start = starts.find((s) => s.event.payload?.$case === "stepStart" && s.event.payload.value.step === payload.value.step);
    if (start) laterSteps.push(end.time - start.time);
  }
  const user = events.find((s) => s.type === "user/message");
  const turn = events.find((s) => s.type === "turn/start");
  const before: Record<string, number> = {};
  if (user) before.submit_to_user_message = user.time - sentAt;
  if (user && turn) before.user_message_to_turn_start = turn.time - user.time;
  if (turn && starts[0]) before.turn_start_to_step_start = starts[0].time - turn.time;
  if (firstResult) before.result_seen = firstResult.seenAt - firstResult.time;
  return {
    reason,
    toolErrors: results.filter((s) => s.event.payload?.$case === "toolResult" && s.event.payload.value.isError).length,
    firstStep: firstResult ? firstResult.seenAt - sentAt : undefined,
    laterSteps,
    firstParts: { ...before, ...(starts[0] ? stepParts(events, stack.tap, session, starts[0]) : {}) },
  };
}

/**
 * Launches its own stack (so each service's memory is this run's), creates `SESSIONS` sessions
 * through the gateway, then sends all their messages at once and follows them to their end.
 */
export async function benchLoad(options: { natsUrl: string }): Promise<Record<string, unknown>> {
  const stack = await Stack.launch({ natsUrl: options.natsUrl, label: "load" });
  const sessions: string[] = [];
  let released = false;
  try {
    say(`load: ${SESSIONS} sessions, services up in ${Math.round(stack.launchMs)} ms`);
    const model = stack.script("load", REPLIES);
    const cpu = new CpuMeter(() => Object.fromEntries(SERVICES.map((service) => [service, stack.tack.pids(service)])));
    const beforeCreate = cpu.sample();
    sessions.push(...await pooled(Array.from({ length: SESSIONS }), 10, () => stack.createSession(model, stack.workspace({ "README.md": "load test\n" }))));
    const rss = new RssSampler(() => Object.fromEntries(SERVICES.map((service) => [service, stack.tack.pid(service)])));
    const beforeSend = cpu.sample();
    const started = performance.now();
    let finished = 0;
    let firstSeen = 0;
    let afterFirst: CpuSample | undefined;
    const outcomes = await Promise.all(sessions.map(async (session) => {
      const { sentAt } = await stack.submit(session, "write, read and list load.txt");
      let reason = "not_finished";
      try {
        // Every session's first tool/result (or its turn's end, should it have none) seen: the end of the first-steps window.
        await stack.watch.waitFor(session, (events) => events.find((s) => s.type === "tool/result" || s.type === "turn/end"), CAP_MS - (performance.now() - started));
        if (++firstSeen === SESSIONS) afterFirst = cpu.sample();
        const end = await stack.watch.turnEnd(session, 1, CAP_MS - (performance.now() - started));
        reason = end.event.payload?.$case === "turnEnd" ? end.event.payload.value.reason : "?";
      } catch {
        // Still running at the cap.
      }
      if (++finished % 10 === 0) say(`load: ${finished}/${SESSIONS} sessions ended (${Math.round(performance.now() - started)} ms)`);
      return outcome(stack, session, sentAt, stack.watch.events(session), reason);
    }));
    const wallMs = performance.now() - started;
    const afterTurns = cpu.sample();
    const rssMb = rss.stop();
    // The containers of this stack, before the release and after it (a pool refill): the first listing's own cost falls in the release window.
    const measured = stackContainers(stack);
    await release(stack, sessions);
    released = true;
    const afterRelease = cpu.sample();
    for (const id of stackContainers(stack)) measured.add(id);
    const cpuReport = cpuFigures(cpu, measured, stack.runners(), { beforeCreate, beforeSend, afterFirst: afterFirst ?? afterTurns, afterTurns, afterRelease });
    const ok = outcomes.filter((o) => o.reason === "completed" && o.toolErrors === 0).length;
    const firsts = outcomes.flatMap((o) => (o.firstStep === undefined ? [] : [o.firstStep]));
    const later = outcomes.flatMap((o) => o.laterSteps);
    const reasons: Record<string, number> = {};
    for (const o of outcomes) reasons[o.reason] = (reasons[o.reason] ?? 0) + 1;
    const firstP50 = percentile(firsts, 50);
    const stepP99 = percentile(later, 99);
    say(`load: ${ok}/${SESSIONS} finished in ${Math.round(wallMs)} ms; first step p50 ${firstP50} ms, later steps p99 ${stepP99} ms; rss ${JSON.stringify(rssMb)}`);
    return {
      load_100_sessions: {
        sessions: SESSIONS,
        finished: ok,
        first_step_p50_ms: firstP50,
        first_step_p90_ms: percentile(firsts, 90),
        step_p50_ms: percentile(later, 50),
        step_p99_ms: stepP99,
        rss_mb: rssMb,
        wall_ms: Math.round(wallMs),
        end_reasons: reasons,
        tool_errors: outcomes.reduce((sum, o) => sum + o.toolErrors, 0),
        goals: GOALS,
        met: {
          finished: ok >= GOALS.finished, first_step_p50_ms: firstP50 <= GOALS.first_step_p50_ms, step_p99_ms: stepP99 <= GOALS.step_p99_ms,
          loop_rss_mb: (rssMb.loop ?? Infinity) <= GOALS.loop_rss_mb,
        },
        first_step_breakdown_p50_ms: medians(collectParts(outcomes.map((o) => o.firstParts))),
        later_step_breakdown_p50_ms: laterBreakdown(stack, sessions),
        ...cpuReport,
        definition: `${SESSIONS} sessions created through the gateway (each its own workspace; the sandbox service's warm pool is its default 2), then all their messages sent at once; each turn: bash write, read, bash ls, answer. finished = turn completed with no failed tool call within ${CAP_MS / 1000} s; first step = message POST → first tool/result seen (includes the session's container: cold starts once the pool is empty); step = step/start → step/end of steps 2-3 (container exists); rss_mb = peak VmRSS of each service process during the run; ${CPU_DEFINITION}`,
      },
    };
  } finally {
    if (!released) await release(stack, sessions);
    await stack.close();
  }
}

/** The ids of the containers labelled with the stack's namespace (running or not). */
function stackContainers(stack: Stack): Set<string> {
  return new Set(execFileSync("docker", ["ps", "-aq", "--no-trunc", "--filter", `label=tack.namespace=${stack.namespace}`]).toString().split("\n").filter(Boolean));
}

/** Removes the sessions' containers, 10 at a time, rather than the sandbox service on stop (its stop grace would not cover 100 containers). */
async function release(stack: Stack, sessions: readonly string[]): Promise<void> {
  await pooled(sessions, 10, (sessionId) => stack.bus.request(SandboxRpc.ReleaseSandbox, ReleaseSandboxRequest.fromPartial({ sessionId, mode: "" }), { timeoutMs: 60_000 }).catch(() => undefined));
}

const CPU_DEFINITION = "cpu_ms_per_session = the machine's CPU time (/proc/stat user+nice+system+irq+softirq; steal left out) from before the sessions were created until their containers were released, divided by the sessions (the sum of the four windows of cpu_ms_per_step_phase, each split on its own: a split counts a container's or process's CPU only if it is alive at the window's end); "
  + "cpu_ms_per_session_by_kind splits it: each service = its process and descendants (/proc/<pid>/stat utime+stime, plus cutime+cstime of children it reaped); bench = this process (the driver: HTTP calls, log watch, bus tap, the CPU sampling itself); "
  + "nats = nats-server (shared with any other user of the machine); dockerd; containerd; shims = the containerd shims of this stack's containers with the runc calls they reaped (less the container's PID 1 they reap at its stop, counted by the cgroup); other processes' reaped children are not counted (init reaps orphans whose time was counted while they lived); "
  + "agents = PID 1 of each of this stack's containers (the exec agent, its own utime+stime, which includes the runc init it was exec'ed from); commands = the rest of each container's cgroup CPU (cpuacct.usage or cpu.stat usage_usec: the commands with their children, runc's set-up processes in the cgroup); "
  + "other = the system's CPU time minus all of the above (other_detail: kernel threads, interrupts, other containers and processes by name, and exited_or_unattributed: processes that exited in the window — runc, shims of removed containers, the containers' CPU after the last sample of their cgroup — and tick rounding); "
  + "cpu_ms_per_step_phase: the same split over consecutive windows: create = the sessions created through the gateway 10 at a time (the loop pre-warms each one's container), first_steps = messages sent → every session's first tool/result seen (later steps of early sessions run in it too), later_steps = from there → every turn ended, release = the stack's containers listed and released 10 at a time (their CPU in this window is lost with their cgroups: it shows in exited_or_unattributed); "
  + "each sample reads only /proc and the cgroup files (sample_ms: how long one took)";

/** The CPU figures of the run: the whole and each window, per session. */
function cpuFigures(cpu: CpuMeter, measured: ReadonlySet<string>, runners: Record<string, string>, s: Record<"beforeCreate" | "beforeSend" | "afterFirst" | "afterTurns" | "afterRelease", CpuSample>): Record<string, unknown> {
  const windows = {
    create: cpu.split(s.beforeCreate, s.beforeSend, measured),
    first_steps: cpu.split(s.beforeSend, s.afterFirst, measured),
    later_steps: cpu.split(s.afterFirst, s.afterTurns, measured),
    release: cpu.split(s.afterTurns, s.afterRelease, measured),
  };
  // The whole run as the sum of its windows: a split sees only the containers alive at its end, and the release removes them all.
  const whole = perSession(sumSplits(Object.values(windows)), SESSIONS);
  const phase = (split: CpuSplit) => {
    const { wall_ms: wall, cpu_ms_per_session: ms, by_kind: byKind, busy_percent: busy } = perSession(split, SESSIONS);
    return { wall_ms: wall, cpu_ms_per_session: ms, busy_percent: busy, by_kind: byKind };
  };
  const samples = Object.values(s);
  say(`load: cpu ${whole.cpu_ms_per_session} ms per session, ${JSON.stringify(whole.by_kind)}`);
  return {
    cpu_ms_per_session: whole.cpu_ms_per_session,
    cpu_ms_per_session_by_kind: whole.by_kind,
    cpu_ms_per_step_phase: Object.fromEntries(Object.entries(windows).map(([name, split]) => [name, phase(split)])),
    cpu_other_detail_ms_per_session: whole.other_detail,
    cpu_machine: {
      cores: cpu.cores, clk_tck: cpu.hz, wall_ms: whole.wall_ms, busy_percent: whole.busy_percent, steal_ms: whole.steal_ms,
      service_runners: runners, containers_measured: measured.size, sample_ms: round(Math.max(...samples.map((x) => x.scanMs)), 1),
      load_avg: { at_start: s.beforeCreate.loadavg.map((v) => round(v)), at_end: s.afterRelease.loadavg.map((v) => round(v)) },
    },
  };
}

/** p50 of the parts of steps 2 and later across the sessions. */
function laterBreakdown(stack: Stack, sessions: string[]): Record<string, number> {
  const parts = sessions.flatMap((session) => {
    const events = stack.watch.events(session);
    return events.filter((s) => s.event.payload?.$case === "stepStart" && s.event.payload.value.step >= 2 && s.event.payload.value.step <= 3)
      .map((start) => stepParts(events, stack.tap, session, start));
  });
  return Object.fromEntries(Object.entries(medians(collectParts(parts))).map(([name, value]) => [name, round(value)]));
}
