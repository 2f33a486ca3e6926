// Latency of a session's first step and of a message to a long session, through the real
// services as processes (bench/stack.ts): gateway HTTP API, loop, scripted model in the llm
// service, tools service, sandbox containers.
import { execFileSync } from "node:child_process";
import { readAll } from "@tack/log";
import { collectParts, medians, percentile, round, say, sleep, stepParts, type Seen } from "./lib.js";
import type { Stack } from "./stack.js";

const FIRST_STEPS = Number(process.env.TACK_BENCH_FIRST_STEPS ?? 10);
const LONG_EVENTS = Number(process.env.TACK_BENCH_LONG_EVENTS ?? 2_000);
const LONG_ROUNDS = 5;
const COLD_ROUNDS = 3;
/** Tool calls per step while the long session is built (each adds a tool/call and a tool/result). */
const CALLS_PER_STEP = 10;
/** The launched sandbox service's warm pool (its default: TACK_SANDBOX_POOL_SIZE is not set). */
const POOL_SIZE = 2;

const FIRST_STEP_GOAL_MS = 40;
const LONG_RATIO_GOAL = 1.5;

/** Resolves once the namespace's warm pool holds `POOL_SIZE` containers again (after a claim it refills in the background), or after 10 s. */
async function poolRefilled(namespace: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    const ids = execFileSync("docker", ["ps", "-q", "--filter", `name=^tack-${namespace}-pool-`]).toString().split("\n").filter(Boolean);
    if (ids.length >= POOL_SIZE) break;
    await sleep(100);
  }
  // A pool container is named before its exec agent has answered: give the handshake time.
  await sleep(300);
}

/** The events of the first step of the turn that starts after `afterSeq`, up to its first tool result. */
function firstStep(events: Seen[], afterSeq: number) {
  const after = (type: string, seq: number) => events.find((s) => s.type === type && s.event.seq > seq);
  const user = after("user/message", afterSeq);
  const turn = user && after("turn/start", user.event.seq);
  const step = turn && after("step/start", turn.event.seq);
  const result = step && after("tool/result", step.event.seq);
  return user && turn && step && result ? { user, turn, step, result } : undefined;
}

/**
 * `first_step_ms`: a session created through the gateway gets its first message right away (as
 * `tack run` sends it); measured from just before the POST to its first `tool/result` reaching a
 * log subscriber. The scripted model's first reply calls bash `true`. The warm pool is refilled
 * before each session is created, as it is for a session arriving at an idle Tack.
 */
export async function benchFirstStep(stack: Stack): Promise<Record<string, unknown>> {
  const totals: number[] = [];
  const phases: Record<string, number[]> = { submit_to_user_message: [], user_message_to_turn_start: [], turn_start_to_step_start: [], result_seen: [] };
  const parts = [];
  const model = stack.script("first-step", [{ tool_calls: [{ name: "bash", arguments: { command: "true" } }] }, { content: "done" }]);
  // One session first, not counted: the services' first session pays one-time costs (code loaded and compiled, connections).
  let firstAfterLaunch = 0;
  for (let i = -1; i < FIRST_STEPS; i++) {
    // As `tack run` does: the message right after the session is created (the loop may start the
    // session's container at creation; the first tool call waits for it if that is not done yet).
    await poolRefilled(stack.namespace);
    const session = await stack.createSession(model, stack.workspace());
    const { sentAt } = await stack.submit(session, "run true");
    const step = await stack.watch.waitFor(session, (events) => firstStep(events, 0), 60_000);
    if (i < 0) {
      firstAfterLaunch = step.result.seenAt - sentAt;
      await stack.watch.turnEnd(session, 1, 60_000);
      continue;
    }
    totals.push(step.result.seenAt - sentAt);
    phases.submit_to_user_message!.push(step.user.time - sentAt);
    phases.user_message_to_turn_start!.push(step.turn.time - step.user.time);
    phases.turn_start_to_step_start!.push(step.step.time - step.turn.time);
    phases.result_seen!.push(step.result.seenAt - step.result.time);
    parts.push(stepParts(stack.watch.events(session), stack.tap, session, step.step));
    await stack.watch.turnEnd(session, 1, 60_000);
    say(`first step ${i + 1}/${FIRST_STEPS}: ${Math.round(totals.at(-1)!)} ms`);
  }
  const p50 = percentile(totals, 50);
  return {
    first_step_ms: {
      p50, p90: percentile(totals, 90), sessions: totals.length, goal: FIRST_STEP_GOAL_MS, met: p50 <= FIRST_STEP_GOAL_MS,
      first_after_launch: Math.round(firstAfterLaunch),
      breakdown_p50_ms: { ...medians(phases), ...medians(collectParts(parts)) },
      definition: "new session created through the gateway (warm pool full) and its message POSTed right away, as tack run does (first_after_launch = the services' very first session, not counted): POST /v1/sessions/:id/messages sent → its first tool/result reaches a log subscriber; the scripted model's first reply calls bash `true`. Breakdown (p50 of each part on its own): submit_to_user_message = gateway, the loop (claiming and loading the session unless it holds it), the append; before_model = request header, tool list, compaction and budget checks; model = scripted reply streamed and logged; sandbox_ensure = the tools service's ensure of the session's container (a warm-pool claim, or a wait for the one the loop started at creation); sandbox_exec = `true` in it; result_seen = tool/result stamped → seen",
    },
  };
}

/** A script whose first `steps` replies each call bash `true` `calls` times, then replies `done` to each later message. */
function longScript(steps: number, calls: number, laterTurns: number): unknown[] {
  return [
    ...Array.from({ length: steps }, () => ({ tool_calls: Array.from({ length: calls }, () => ({ name: "bash", arguments: { command: "true" } })) })),
    ...Array.from({ length: laterTurns + 1 }, () => ({ content: "done" })),
  ];
}

interface Latency {
  /** POST sent → turn/start seen. */
  total: number;
  /** POST sent → user/message stamped. */
  userMessage: number;
  /** user/message → turn/start, both stamped by the loop. */
  turnStart: number;
}

/** POST a message to an idle session → its turn/start seen; also when user/message was logged. */
async function messageLatency(stack: Stack, session: string, turn: number): Promise<Latency> {
  const before = stack.watch.events(session).at(-1)?.event.seq ?? 0;
  const { sentAt } = await stack.submit(session, `message ${turn}`);
  const start = await stack.watch.waitFor(session, (events) => events.find((s) => s.type === "turn/start" && s.event.seq > before), 30_000);
  const user = stack.watch.first(session, "user/message", before)!;
  await stack.watch.turnEnd(session, turn, 60_000);
  // Let the loop settle the ended turn before the next message.
  await sleep(200);
  return { total: start.seenAt - sentAt, userMessage: user.time - sentAt, turnStart: start.time - user.time };
}

/**
 * `message_after_long_session_ms`: a message to an idle session whose log holds `LONG_EVENTS`
 * events (built by a real scripted turn of steps with 10 parallel bash calls each), from the POST
 * to its `turn/start` being seen, against the same on a freshly created session (p50 of 5 each,
 * alternating). Measured twice: as the loop holds idle sessions (it may keep them in memory for a
 * while), and `after_release`, when no loop holds either session (the loop process was restarted,
 * as after an idle timeout or a crash), so the session is claimed and its whole log read.
 */
export async function benchLongSession(stack: Stack): Promise<Record<string, unknown>> {
  // Events per step: step/start, assistant/chunks, assistant/message, usage, a call and a result per tool call, step/end.
  const steps = Math.ceil(LONG_EVENTS / (5 + 2 * CALLS_PER_STEP));
  const session = await stack.createSession(stack.script("long", longScript(steps, CALLS_PER_STEP, 2 * LONG_ROUNDS + COLD_ROUNDS)), stack.workspace());
  say(`long session: building ${LONG_EVENTS} events (${steps} steps of ${CALLS_PER_STEP} bash calls)`);
  const buildStarted = performance.now();
  await stack.submit(session, "build a long log");
  const end = await stack.watch.turnEnd(session, 1, 600_000);
  if (end.event.payload?.$case === "turnEnd" && end.event.payload.value.reason !== "completed") throw new Error(`the long session's turn ended with ${end.event.payload.value.reason}`);
  const events = stack.watch.events(session).length;
  const buildMs = performance.now() - buildStarted;
  say(`long session: ${events} events in ${Math.round(buildMs)} ms`);
  await sleep(300);

  const fresh = stack.script("fresh", [{ content: "done" }, { content: "done" }]);
  let turn = 1;
  const warmLong: Latency[] = [];
  const warmFresh: Latency[] = [];
  for (let round = 0; round < LONG_ROUNDS; round++) {
    warmLong.push(await messageLatency(stack, session, ++turn));
    const created = await stack.createSession(fresh, stack.workspace());
    await sleep(200);
    warmFresh.push(await messageLatency(stack, created, 1));
  }

  // After a release: the loop restarted (SIGTERM releases the leases of idle sessions), then one
  // throwaway message warms the new process up before the two measured ones (alternating order).
  const coldLong: Latency[] = [];
  const coldFresh: Latency[] = [];
  const freshSessions: string[] = [];
  for (let round = 0; round < COLD_ROUNDS; round++) {
    const created = await stack.createSession(fresh, stack.workspace());
    freshSessions.push(created);
    const warmup = await stack.createSession(fresh, stack.workspace());
    await stack.tack.kill("loop", "SIGTERM");
    await stack.tack.start("loop");
    await messageLatency(stack, warmup, 1);
    const measureLong = async () => coldLong.push(await messageLatency(stack, session, ++turn));
    const measureFresh = async () => coldFresh.push(await messageLatency(stack, created, 1));
    if (round % 2 === 0) {
      await measureLong();
      await measureFresh();
    } else {
      await measureFresh();
      await measureLong();
    }
  }

  // What reading a whole log costs on its own (the loop's reader, from this process): part of after_release's submit_to_user_message.
  const readLog = async (id: string) => {
    const times: number[] = [];
    for (let i = 0; i < 3; i++) {
      const started = performance.now();
      await readAll(stack.bus.nc, stack.bus.names, { tenant: "local", sessionId: id });
      times.push(performance.now() - started);
    }
    return percentile(times, 50);
  };
  const readLongMs = await readLog(session);
  const readFreshMs = await readLog(freshSessions.at(-1)!);

  const summary = (long: Latency[], fresh: Latency[]) => {
    const longP50 = percentile(long.map((r) => r.total), 50);
    const freshP50 = percentile(fresh.map((r) => r.total), 50);
    return {
      long: { p50: longP50 }, fresh: { p50: freshP50 }, ratio: round(longP50 / freshP50),
      breakdown_p50_ms: {
        long: { submit_to_user_message: percentile(long.map((r) => r.userMessage), 50), user_message_to_turn_start: percentile(long.map((r) => r.turnStart), 50) },
        fresh: { submit_to_user_message: percentile(fresh.map((r) => r.userMessage), 50), user_message_to_turn_start: percentile(fresh.map((r) => r.turnStart), 50) },
      },
    };
  };
  const warm = summary(warmLong, warmFresh);
  const cold = { ...summary(coldLong, coldFresh), read_whole_log_ms: { long: readLongMs, fresh: readFreshMs } };
  say(`message after long session: ${warm.long.p50} ms vs fresh ${warm.fresh.p50} ms; after release ${cold.long.p50} ms vs ${cold.fresh.p50} ms`);
  return {
    message_after_long_session_ms: {
      events, ...warm, goal_ratio: LONG_RATIO_GOAL, met: warm.ratio <= LONG_RATIO_GOAL && cold.ratio <= LONG_RATIO_GOAL,
      after_release: cold,
      build_ms: Math.round(buildMs),
      definition: `POST /v1/sessions/:id/messages sent → turn/start seen, for an idle session whose log holds ${events} events vs a freshly created one: p50 of ${LONG_ROUNDS} each as the loop holds idle sessions, and (after_release) p50 of ${COLD_ROUNDS} each after a loop restart released them, so the loop claims the session and reads its whole log before user/message (submit_to_user_message; read_whole_log_ms = readAll of each log alone, from the bench). met: both ratios ≤ ${LONG_RATIO_GOAL}`,
    },
  };
}
