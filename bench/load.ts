// `load_100_sessions`: many scripted sessions at once through the real services as separate
// processes (bench/stack.ts), each a few steps whose tool calls run in its own sandbox container;
// how many finish, how long their first and later steps take, and each service's peak memory.
import { SandboxRpc } from "@tack/bus";
import { ReleaseSandboxRequest } from "@tack/proto";
import { SERVICES } from "@tack/cli";
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
  try {
    say(`load: ${SESSIONS} sessions, services up in ${Math.round(stack.launchMs)} ms`);
    const model = stack.script("load", REPLIES);
    sessions.push(...await pooled(Array.from({ length: SESSIONS }), 10, () => stack.createSession(model, stack.workspace({ "README.md": "load test\n" }))));
    const rss = new RssSampler(() => Object.fromEntries(SERVICES.map((service) => [service, stack.tack.pid(service)])));
    const started = performance.now();
    let finished = 0;
    const outcomes = await Promise.all(sessions.map(async (session) => {
      const { sentAt } = await stack.submit(session, "write, read and list load.txt");
      let reason = "not_finished";
      try {
        const end = await stack.watch.turnEnd(session, 1, CAP_MS - (performance.now() - started));
        reason = end.event.payload?.$case === "turnEnd" ? end.event.payload.value.reason : "?";
      } catch {
        // Still running at the cap.
      }
      if (++finished % 10 === 0) say(`load: ${finished}/${SESSIONS} sessions ended (${Math.round(performance.now() - started)} ms)`);
      return outcome(stack, session, sentAt, stack.watch.events(session), reason);
    }));
    const wallMs = performance.now() - started;
    const rssMb = rss.stop();
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
        definition: `${SESSIONS} sessions created through the gateway (each its own workspace; the sandbox service's warm pool is its default 2), then all their messages sent at once; each turn: bash write, read, bash ls, answer. finished = turn completed with no failed tool call within ${CAP_MS / 1000} s; first step = message POST → first tool/result seen (includes the session's container: cold starts once the pool is empty); step = step/start → step/end of steps 2-3 (container exists); rss_mb = peak VmRSS of each service process during the run`,
      },
    };
  } finally {
    // Removed here, 10 at a time, rather than by the sandbox service on stop (its stop grace would not cover 100 containers).
    await pooled(sessions, 10, (sessionId) => stack.bus.request(SandboxRpc.ReleaseSandbox, ReleaseSandboxRequest.fromPartial({ sessionId, mode: "" }), { timeoutMs: 60_000 }).catch(() => undefined));
    await stack.close();
  }
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
