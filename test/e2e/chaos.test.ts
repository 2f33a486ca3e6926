// Chaos: many scripted sessions at once on replicated services (the launcher `tack up` uses),
// real bash tool calls in real sandbox containers, while a chaos loop SIGKILLs a random service
// process every second or two (the launcher's supervisor starts it again) and NATS itself is
// killed and restarted once. Afterwards every session's log (read from JetStream) must be whole:
// seqs 1..N, nothing twice, one result per tool call, the turn completed, no command run twice in
// the workspace; a few sessions followed through the gateway's SSE stream (resumed with
// Last-Event-ID across its crashes) must have delivered exactly the log; and once Tack stops, no
// container of the run is left. A failing run keeps its directory (service logs, NATS store,
// `docker events`) and reports each broken session's log, containers and service log lines.
//
// TACK_CHAOS_SESSIONS (default 30; `make soak` runs 200), TACK_CHAOS_STEPS (default 6 model
// steps of two bash calls each), TACK_CHAOS_WINDOW_MS (default 75 s: how long the kills go on
// after the sessions started, once every kind was killed once), TACK_CHAOS_BUDGET_MS (default
// 120 s + 4 s a session), TACK_CHAOS_KEEP=1 keeps the run's directory even on success.
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chownSync, closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createConnection, createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Kvm } from "@nats-io/kv";
import { createParser, type EventSourceMessage } from "eventsource-parser";
import { Bus } from "@tack/bus";
import { launch, type Launched, type ServiceName } from "@tack/cli";
import { readAll } from "@tack/log";
import type { Event } from "@tack/proto";
import { waitFor } from "@tack/testkit";

const whole = (name: string, fallback: number) => {
  const value = Number(process.env[name] ?? fallback);
  if (!Number.isInteger(value) || value < 1) throw new Error(`${name} must be a whole number ≥ 1, got ${process.env[name]}`);
  return value;
};
const SESSIONS = whole("TACK_CHAOS_SESSIONS", 30);
const STEPS = Math.max(3, whole("TACK_CHAOS_STEPS", 6));
/** The step whose first command waits for the gate: opened once every kind of process (and NATS) was killed once. */
const GATE_STEP = 2;
/** Sessions also followed through the gateway's SSE stream (resuming with Last-Event-ID across gateway crashes). */
const FOLLOWED = Math.min(4, SESSIONS);
/** What the whole run may take: start-up, the sessions under chaos, the checks and the stop. */
const RUN_BUDGET_MS = whole("TACK_CHAOS_BUDGET_MS", 120_000 + SESSIONS * 4_000);
/**
 * How long the random kills go on (from the sessions' start; the first round, every kind once,
 * always completes). Kills that lasted until every session ended fed on themselves on a loaded
 * machine: a slower run meant more kills, more recoveries and a slower run again.
 */
const CHAOS_WINDOW_MS = whole("TACK_CHAOS_WINDOW_MS", 75_000);
const TENANT = "local";
const KINDS: readonly ServiceName[] = ["loop", "tools", "llm", "sandbox", "gateway"];

const namespace = `chaos${randomBytes(4).toString("hex")}`;
const work = mkdtempSync(join(tmpdir(), "tack-chaos-"));
const stateDir = join(work, "data");
let nats: ControlledNats;
let tack: Launched | undefined;
let bus: Bus;
let failed = false;
/** `docker events` of this run's containers (create, rename, start, kill, die, destroy), for failure reports. */
let dockerEvents: ChildProcess | undefined;
const dockerEventsFile = join(work, "docker-events.log");

/** What the chaos loop did, with the time since the sessions started. */
const timeline: string[] = [];
let t0 = Date.now();
const note = (line: string) => timeline.push(`${((Date.now() - t0) / 1000).toFixed(1).padStart(6)} s  ${line}`);

// ---- a nats-server of our own, so that it can be killed and started again on the same port and store ----

interface ControlledNats {
  readonly url: string;
  /** SIGKILLs the server, waits until it is gone, starts it again and waits until it accepts connections. */
  restart(): Promise<{ downMs: number }>;
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => server.once("error", reject).listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

const exited = (child: ChildProcess) => (child.exitCode !== null || child.signalCode !== null
  ? Promise.resolve()
  : new Promise<void>((resolve) => child.once("exit", () => resolve())));

async function startNats(dir: string): Promise<ControlledNats> {
  const port = await freePort();
  const store = join(dir, "store");
  mkdirSync(store, { recursive: true });
  const logFile = join(dir, "nats-server.log");
  let child: ChildProcess;
  const accepts = () => new Promise<boolean>((resolve) => {
    const socket = createConnection({ host: "127.0.0.1", port }, () => { socket.destroy(); resolve(true); });
    socket.once("error", () => resolve(false));
  });
  const start = async () => {
    const out = openSync(logFile, "a");
    child = spawn("nats-server", ["-js", "-sd", store, "-a", "127.0.0.1", "-p", String(port)], { stdio: ["ignore", out, out] });
    closeSync(out);
    const started = child;
    await waitFor(`nats-server on port ${port} to accept connections (see ${logFile})`, async () => {
      if (started.exitCode !== null || started.signalCode !== null) throw new Error(`nats-server exited (${started.exitCode ?? started.signalCode}); see ${logFile}`);
      return accepts();
    }, { timeoutMs: 20_000, intervalMs: 50 });
  };
  await start();
  return {
    url: `nats://127.0.0.1:${port}`,
    async restart() {
      const killedAt = Date.now();
      child.kill("SIGKILL");
      await exited(child);
      await start();
      return { downMs: Date.now() - killedAt };
    },
    async stop() {
      child.kill("SIGTERM");
      await exited(child);
    },
  };
}

// ---- the sessions ----

interface Run {
  readonly index: number;
  readonly workspace: string;
  id: string;
  /** Completed once the log holds a turn/end. */
  ended: boolean;
}
const runs: Run[] = [];

/** Each step runs two bash calls in parallel; each command appends its own line to /workspace/lines once. */
const line = (step: number, call: "a" | "b") => `s${step}${call}`;
function scriptReplies(): unknown[] {
  const replies: unknown[] = [];
  for (let step = 0; step < STEPS; step++) {
    const gate = step === GATE_STEP ? "while [ ! -e /workspace/.go ]; do sleep 0.1; done; " : "";
    replies.push({
      content: `Step ${step}.`,
      tool_calls: [
        { name: "bash", arguments: { command: `${gate}echo ${line(step, "a")} >> /workspace/lines; sleep 0.3; echo done ${line(step, "a")}` } },
        { name: "bash", arguments: { command: `echo ${line(step, "b")} >> /workspace/lines; echo done ${line(step, "b")}` } },
      ],
    });
  }
  replies.push({ content: "All steps done." });
  return replies;
}

async function api(path: string, init: RequestInit & { json?: unknown } = {}): Promise<Response> {
  const headers: Record<string, string> = { authorization: `Bearer ${tack!.apiKey}`, ...(init.headers as Record<string, string> | undefined) };
  if (init.json !== undefined) headers["content-type"] = "application/json";
  return fetch(`${tack!.gatewayUrl}${path}`, { ...init, headers, body: init.json === undefined ? init.body : JSON.stringify(init.json) });
}

const events = (id: string) => readAll(bus.nc, bus.names, { tenant: TENANT, sessionId: id });
const payloadOf = (event: Event) => (event.payload as { value?: Record<string, unknown> } | undefined)?.value ?? {};

/** Runs `fn` over `items`, at most `width` at once. */
async function inBatches<T, R>(items: readonly T[], width: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(width, items.length) }, async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!);
    }
  }));
  return out;
}

// ---- following a session through the gateway, as a client would: SSE, resumed with Last-Event-ID ----

interface Followed {
  seqs: number[];
  types: string[];
  connects: number;
  /** `event: error` frames the gateway sent in-band before ending a stream. */
  errors: string[];
}

async function follow(id: string, signal: AbortSignal): Promise<Followed> {
  const seen: Followed = { seqs: [], types: [], connects: 0, errors: [] };
  while (!signal.aborted) {
    try {
      seen.connects += 1;
      const last = seen.seqs.at(-1);
      const response = await api(`/v1/sessions/${id}/events?follow=1`, { headers: last === undefined ? {} : { "last-event-id": String(last) }, signal });
      if (response.status !== 200) throw new Error(`events answered ${response.status}`);
      const messages: EventSourceMessage[] = [];
      const parser = createParser({ onEvent: (message) => messages.push(message) });
      const decoder = new TextDecoder();
      for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
        parser.feed(decoder.decode(chunk, { stream: true }));
        for (const { event: type, id: seq, data } of messages.splice(0)) {
          if (type === "error") seen.errors.push(data);
          if (seq === undefined || type === undefined) continue;
          seen.seqs.push(Number(seq));
          seen.types.push(type);
          if (type === "turn/end") return seen;
        }
      }
    } catch {
      // The gateway is down (killed) or the stream broke: reconnect below.
    }
    // A client's reconnect delay, as EventSource has.
    if (!signal.aborted) await new Promise((resolve) => setTimeout(resolve, 200));
  }
  return seen;
}

// ---- the checks ----

/** What is wrong with one session's log (empty when nothing). */
function problemsOf(log: Event[], lines: string[]): string[] {
  const problems: string[] = [];
  const seqs = log.map((e) => e.seq);
  if (seqs.some((seq, i) => seq !== i + 1)) problems.push(`seqs are not 1..${log.length}: ${compact(seqs)}`);
  const key = (e: Event) => `${e.type} ${JSON.stringify(payloadOf(e))}`;
  // Events that may repeat with the same content by design: a request header after each recovery
  // ("resume"), and stream chunks of a model call that was retried after its llm died mid-stream.
  const retriedSteps = new Set(log.filter((e) => e.type === "llm/retry").map((e) => `${payloadOf(e).turn}/${payloadOf(e).step}`));
  const mayRepeat = (e: Event) => e.type === "request/header" || (e.type === "assistant/chunks" && retriedSteps.has(`${payloadOf(e).turn}/${payloadOf(e).step}`));
  const firstSeen = new Map<string, number>();
  for (const e of log) {
    const k = key(e);
    const before = firstSeen.get(k);
    if (before !== undefined && !mayRepeat(e)) problems.push(`event ${e.seq} (${e.type}) repeats event ${before}: ${k.slice(0, 300)}`);
    firstSeen.set(k, e.seq);
  }
  const once = (type: string, by: (e: Event) => string) => {
    const counts = new Map<string, number[]>();
    for (const e of log.filter((x) => x.type === type)) counts.set(by(e), [...(counts.get(by(e)) ?? []), e.seq]);
    for (const [what, at] of counts) if (at.length > 1) problems.push(`${type} ${what} logged ${at.length} times (seqs ${at.join(", ")})`);
    return counts;
  };
  const step = (e: Event) => `${payloadOf(e).turn}/${payloadOf(e).step}`;
  once("turn/start", (e) => String(payloadOf(e).turn));
  once("step/start", step);
  once("step/end", step);
  once("assistant/message", step);
  // Every call the model asked for has exactly one result. A call with a tool/call event may have
  // run; one without it never started, and its result must say so (synthesized at recovery).
  const asked = new Set(log.filter((e) => e.type === "assistant/message").flatMap((e) => ((payloadOf(e).toolCalls ?? []) as Array<{ id: string }>).map((c) => c.id)));
  const calls = once("tool/call", (e) => String(payloadOf(e).callId));
  const results = once("tool/result", (e) => String(payloadOf(e).callId));
  for (const callId of asked) if (!results.has(callId)) problems.push(`call ${callId} has no tool/result`);
  for (const callId of calls.keys()) if (!asked.has(callId)) problems.push(`tool/call ${callId} is no call of an assistant message`);
  for (const e of log.filter((x) => x.type === "tool/result")) {
    const callId = String(payloadOf(e).callId);
    if (!asked.has(callId)) problems.push(`tool/result ${callId} answers no call of an assistant message`);
    if (!calls.has(callId) && !payloadOf(e).synthesized) problems.push(`tool/result ${callId} has no tool/call, yet is not synthesized: ${JSON.stringify(payloadOf(e).content)}`);
  }
  if (asked.size !== STEPS * 2) problems.push(`${asked.size} tool calls asked for, expected ${STEPS * 2} (${STEPS} steps of 2)`);
  const ends = log.filter((e) => e.type === "turn/end");
  if (ends.length !== 1) problems.push(`${ends.length} turn/end events, expected 1`);
  else if (payloadOf(ends[0]!).reason !== "completed") problems.push(`the turn ended with reason ${String(payloadOf(ends[0]!).reason)}, expected completed`);
  const final = log.filter((e) => e.type === "assistant/message").at(-1);
  if (final && payloadOf(final).content !== "All steps done.") problems.push(`the last assistant message is ${JSON.stringify(payloadOf(final).content)}, not the script's last reply`);
  // No command ran twice (the sandbox replays a retried exec by its call id), and every command
  // the log reports as done really left its line.
  const counted = new Map<string, number>();
  for (const l of lines) counted.set(l, (counted.get(l) ?? 0) + 1);
  for (const [l, n] of counted) if (n > 1) problems.push(`the command writing ${l} ran ${n} times (workspace lines: ${lines.join(" ")})`);
  for (const e of log.filter((x) => x.type === "tool/result")) {
    const done = /^done (s\d+[ab])\b/.exec(String(payloadOf(e).content))?.[1];
    if (done && !counted.has(done)) problems.push(`tool/result ${String(payloadOf(e).callId)} reports ${done} done, but the workspace has no such line`);
    // The scripted model names call k of step n `call_<n>_<k>`: a call reported as never started left no line.
    const ids = /^call_(\d+)_([01])$/.exec(String(payloadOf(e).callId));
    const own = ids && line(Number(ids[1]), ids[2] === "0" ? "a" : "b");
    if (own && /^Not executed/.test(String(payloadOf(e).content)) && counted.has(own)) problems.push(`tool/result ${String(payloadOf(e).callId)} says it was not executed, but ${own} is in the workspace`);
  }
  return problems;
}

/** 1..40 → "1-40"; keeps irregular runs visible. */
function compact(seqs: number[]): string {
  const parts: string[] = [];
  for (let i = 0; i < seqs.length;) {
    let j = i;
    while (j + 1 < seqs.length && seqs[j + 1] === seqs[j]! + 1) j++;
    parts.push(i === j ? String(seqs[i]) : `${seqs[i]}-${seqs[j]}`);
    i = j + 1;
  }
  return parts.join(",");
}

/** A session's log as one line per event, for failure messages. */
function describeLog(log: Event[]): string {
  return log.map((e) => {
    const p = payloadOf(e);
    const detail = e.type.startsWith("tool/") ? ` ${String(p.callId ?? "")}${p.content !== undefined ? ` ${JSON.stringify(String(p.content).slice(0, 80))}` : ""}${p.code ? ` ${String(p.code)}` : ""}`
      : e.type === "turn/end" ? ` ${String(p.reason)}`
      : e.type === "error/raised" ? ` ${JSON.stringify(p).slice(0, 200)}`
      : e.type === "llm/retry" ? ` ${String(p.code)} attempt ${String(p.attempt)}` : "";
    const at = e.time ? (Number(e.time.seconds) * 1000 + e.time.nanos / 1e6 - t0) / 1000 : NaN;
    return `    ${String(e.seq).padStart(3)} ${at.toFixed(1).padStart(6)} s ${e.type}${detail}`;
  }).join("\n");
}

/** The services' log lines that name a session (their last `max`). */
function serviceLines(id: string, max = 40): string {
  const dir = join(stateDir, "logs");
  if (!existsSync(dir)) return "";
  const found: string[] = [];
  for (const file of readdirSync(dir).sort()) {
    for (const l of readFileSync(join(dir, file), "utf8").split("\n")) if (l.includes(id)) found.push(`    ${file}: ${l.slice(0, 400)}`);
  }
  return found.slice(-max).join("\n");
}

/** The lifecycle of the containers that were ever named after the session (from `docker events`). */
function containerHistory(id: string): string {
  if (!existsSync(dockerEventsFile)) return "";
  const lines = readFileSync(dockerEventsFile, "utf8").split("\n").filter(Boolean).map((l) => l.split(" "));
  const ids = new Set(lines.filter(([, , , name]) => name?.includes(id)).map(([, , container]) => container));
  return lines.filter(([, , container]) => ids.has(container)).map(([nanos, action, container, name]) =>
    `    ${((Number(BigInt(nanos!) / 1_000_000n) - t0) / 1000).toFixed(1).padStart(6)} s ${action} ${container!.slice(0, 12)} ${name}`).join("\n");
}

/** The session's lease entry as the KV bucket holds it now (a deleted lease shows as DEL). */
async function leaseOf(id: string): Promise<string> {
  try {
    const kv = await new Kvm(bus.nc).open(bus.names.leaseBucket);
    const entry = await kv.get(`${TENANT}.${id}`);
    if (!entry) return "no lease entry";
    return `${entry.operation} revision ${entry.revision} at ${((entry.created.getTime() - t0) / 1000).toFixed(1)} s: ${entry.string() || "(empty)"}`;
  } catch (error) {
    return `cannot read the lease: ${(error as Error).message}`;
  }
}

function containersOfRun(): string[] {
  return execFileSync("docker", ["ps", "-a", "--filter", `label=tack.namespace=${namespace}`, "--format", "{{.Names}} {{.Status}}"]).toString().split("\n").filter(Boolean);
}

beforeAll(async () => {
  nats = await startNats(join(work, "nats"));
  const eventsOut = openSync(dockerEventsFile, "a");
  dockerEvents = spawn("docker", ["events", "--filter", "type=container", "--filter", `label=tack.namespace=${namespace}`, "--format", "{{.TimeNano}} {{.Action}} {{.Actor.ID}} {{.Actor.Attributes.name}}"], { stdio: ["ignore", eventsOut, "ignore"] });
  closeSync(eventsOut);
  // Limits high enough for every session at once; workspaces under this run's directory.
  const config = join(work, "operator.yaml");
  writeFileSync(config, [
    "tenants:",
    `  ${TENANT}: { workspace_roots: [${JSON.stringify(join(work, "ws"))}], max_sessions: ${SESSIONS + 10}, max_sandboxes: ${SESSIONS + 10}, max_event_streams: ${FOLLOWED + 20}, requests_per_minute: ${Math.max(600, SESSIONS * 20)} }`,
    `workspaces: { dir: ${JSON.stringify(join(work, "managed"))} }`,
    "",
  ].join("\n"));
  mkdirSync(join(stateDir, "scripts"), { recursive: true });
  writeFileSync(join(stateDir, "scripts", "chaos.json"), JSON.stringify({ replies: scriptReplies() }));
  for (let index = 0; index < SESSIONS; index++) {
    const workspace = join(work, "ws", `s${index}`);
    mkdirSync(workspace, { recursive: true });
    if (process.getuid?.() === 0) chownSync(workspace, 1000, 1000);
    runs.push({ index, workspace, id: "", ended: false });
  }
  bus = await Bus.connect({ url: nats.url, namespace, name: "chaos-test" });
  tack = await launch({
    dataDir: stateDir, natsUrl: nats.url, namespace,
    replicas: { llm: 2, tools: 2, loop: 2, sandbox: 2 },
    // A short backoff, also after several crashes in a row (on a loaded machine a restarted process still takes seconds to answer).
    restart: { initialDelayMs: 200, maxDelayMs: 2_000, stableAfterMs: 5_000 },
    env: { TACK_CONFIG: config, TACK_STATE_DIR: stateDir, TACK_LEASE_TTL_MS: "3000" },
    onRestart: (e) => note(`restarted ${e.service}#${e.replica} as pid ${e.pid} (old pid ${e.previousPid} ${e.reason}; waited ${e.delayMs} ms)`),
    onServiceExit: (service, description, _log, replica) => { if (!/SIGKILL/.test(description)) note(`${service}#${replica} ${description}`); },
  });
}, 180_000);

afterAll(async () => {
  await tack?.stop();
  await bus?.close().catch(() => undefined);
  // The NATS store is this run's own (under its directory); only containers need removing.
  for (const name of containersOfRun()) {
    try {
      execFileSync("docker", ["rm", "-f", name.split(" ")[0]!], { stdio: "ignore" });
    } catch {
      // Being removed already (a removal the sandbox asked for before it ended).
    }
  }
  await nats?.stop();
  dockerEvents?.kill();
  if (failed || process.env.TACK_CHAOS_KEEP === "1") console.log(`chaos: the run's directory (service logs under data/logs, NATS under nats/) is kept: ${work}`);
  else rmSync(work, { recursive: true, force: true });
}, 120_000);

describe("chaos", () => {
  it(`chaos - ${SESSIONS} sessions survive SIGKILLed loop, tools, llm, sandbox and gateway processes and a NATS restart`, async () => {
    const deadline = Date.now() + RUN_BUDGET_MS - 60_000;
    try {
      // Every session is created and its turn started while nothing is broken yet.
      await inBatches(runs, 8, async (run) => {
        // A 503 or 504 says "retry" (a service did not answer in time, as on a loaded machine): a client retries it.
        let created = await api("/v1/sessions", { method: "POST", json: { workspace: run.workspace, model: "scripted:chaos.json", title: `chaos ${run.index}` } });
        for (let attempt = 1; (created.status === 503 || created.status === 504) && attempt < 5; attempt++) {
          await new Promise((resolve) => setTimeout(resolve, 1_000 * attempt));
          created = await api("/v1/sessions", { method: "POST", json: { workspace: run.workspace, model: "scripted:chaos.json", title: `chaos ${run.index}` } });
        }
        expect(created.status, await created.clone().text()).toBe(201);
        run.id = ((await created.json()) as { id: string }).id;
        const posted = await api(`/v1/sessions/${run.id}/messages`, { method: "POST", json: { text: `run all ${STEPS} steps` } });
        expect(posted.status, await posted.clone().text()).toBe(202);
      });
      t0 = Date.now();
      note(`${SESSIONS} sessions started`);
      const stopFollowing = new AbortController();
      const followed = runs.slice(0, FOLLOWED).map((run) => follow(run.id, stopFollowing.signal));

      // The chaos: first every kind once in random order with the NATS restart among them, then the
      // gate opens and kills go on at random until every session has ended or the chaos window is over. A kind is killed only
      // while all its replicas run (a restart takes seconds on a loaded machine), so one of them
      // keeps serving; the gateway runs once and is killed whenever it runs.
      const first: Array<ServiceName | "nats"> = [...KINDS, "nats" as const].sort(() => Math.random() - 0.5);
      const killed = new Map<string, number>();
      const eligible = (kind: ServiceName) => tack!.replicas(kind).every((r) => r.state === "running");
      let chaosOver = false;
      const chaos = (async () => {
        while (!chaosOver) {
          await new Promise((resolve) => setTimeout(resolve, 1_000 + Math.random() * 1_000));
          if (chaosOver) break;
          if (first.length === 0 && Date.now() - t0 >= CHAOS_WINDOW_MS) {
            note(`the chaos window (${CHAOS_WINDOW_MS / 1000} s) is over: no more kills; ${runs.filter((run) => !run.ended).length} sessions still running`);
            break;
          }
          const planned = first[0];
          if (planned === "nats") {
            note("killing nats-server (SIGKILL) and starting it again");
            const { downMs } = await nats.restart();
            note(`nats-server accepts connections again after ${downMs} ms`);
            killed.set("nats", 1);
            first.shift();
          } else {
            const candidates = planned ? [planned] : KINDS.filter(eligible);
            const target = candidates[Math.floor(Math.random() * candidates.length)];
            if (!target || !eligible(target)) {
              note(`nothing to kill: ${KINDS.map((k) => `${k} ${tack!.replicas(k).map((r) => r.state).join("/")}`).join(", ")}`);
              continue;
            }
            const victim = 1 + Math.floor(Math.random() * tack!.replicas(target).length);
            const pid = await tack!.crash(target, victim).catch(() => undefined);
            if (pid === undefined) continue;
            note(`SIGKILL ${target}#${victim} pid ${pid}`);
            killed.set(target, (killed.get(target) ?? 0) + 1);
            if (planned) first.shift();
          }
          if (planned && first.length === 0) {
            for (const run of runs) writeFileSync(join(run.workspace, ".go"), "");
            note("gate opened: every kind was killed once");
          }
        }
      })();

      try {
        await waitFor("every session's turn to end", async () => {
          await inBatches(runs.filter((run) => !run.ended), 8, async (run) => {
            const log = await events(run.id);
            run.ended = log.some((e) => e.type === "turn/end");
          });
          lastOpen = runs.filter((run) => !run.ended).map((run) => run.id);
          return lastOpen.length === 0;
        }, { timeoutMs: Math.max(10_000, deadline - Date.now()), intervalMs: 1_000 });
      } finally {
        chaosOver = true;
        await chaos;
        note(`chaos over; kills: ${[...killed].map(([k, n]) => `${k} ${n}`).join(", ")}`);
      }
      // The scenario really happened: each kind died at least once while sessions ran.
      expect(Object.fromEntries(KINDS.map((k) => [k, (killed.get(k) ?? 0) > 0])), timeline.join("\n")).toEqual(Object.fromEntries(KINDS.map((k) => [k, true])));
      expect(killed.get("nats")).toBe(1);

      // Every process is back before the checks.
      for (const service of KINDS) await tack!.whenRunning(service, 30_000);

      const problems: string[] = [];
      const logs = new Map<string, Event[]>();
      await inBatches(runs, 8, async (run) => {
        const log = await events(run.id);
        logs.set(run.id, log);
        const linesFile = join(run.workspace, "lines");
        const lines = existsSync(linesFile) ? readFileSync(linesFile, "utf8").split("\n").filter(Boolean) : [];
        const found = problemsOf(log, lines);
        if (found.length > 0) problems.push(`session ${run.index} ${run.id}:\n  ${found.join("\n  ")}\n  log:\n${describeLog(log)}\n  its containers:\n${containerHistory(run.id)}\n  service log lines naming it:\n${serviceLines(run.id)}`);
      });

      // The gateway's event streams, resumed across its crashes, delivered exactly the log.
      stopFollowing.abort();
      for (const [i, seen] of (await Promise.all(followed)).entries()) {
        const run = runs[i]!;
        const log = logs.get(run.id)!;
        const upToEnd = log.slice(0, log.findIndex((e) => e.type === "turn/end") + 1);
        const expected = upToEnd.map((e) => e.seq);
        if (JSON.stringify(seen.seqs) !== JSON.stringify(expected)) {
          problems.push(`session ${run.index} ${run.id} through the gateway (${seen.connects} connections${seen.errors.length ? `, in-band errors: ${seen.errors.join(" | ")}` : ""}): seqs ${compact(seen.seqs)}, the log has ${compact(expected)}`);
        } else if (JSON.stringify(seen.types) !== JSON.stringify(upToEnd.map((e) => e.type))) {
          problems.push(`session ${run.index} ${run.id} through the gateway: event types differ from the log`);
        }
      }

      const stats = summarize(logs);
      console.log(`chaos: ${SESSIONS} sessions, ${STEPS} steps each, ${((Date.now() - t0) / 1000).toFixed(0)} s under chaos; ${stats}\n${timeline.join("\n")}`);

      // Stopping Tack removes every container of the run, including those of replicas killed along the way.
      const stopping = Date.now();
      await tack!.stop();
      note(`Tack stopped in ${Date.now() - stopping} ms`);
      const left = containersOfRun();
      if (left.length > 0) problems.push(`${left.length} containers left after stop (${timeline.at(-1)!.trim()}):\n  ${left.join("\n  ")}`);
      expect(problems, `${problems.length} problems:\n${problems.join("\n\n")}\n\nchaos timeline:\n${timeline.join("\n")}`).toEqual([]);
    } catch (error) {
      failed = true;
      if (lastOpen.length > 0) {
        const open = runs.filter((run) => lastOpen.includes(run.id)).slice(0, 3);
        const details = await Promise.all(open.map(async (run) => `session ${run.index} ${run.id} never ended; lease: ${await leaseOf(run.id)}; log:\n${describeLog(await events(run.id).catch(() => []))}\n  its containers:\n${containerHistory(run.id)}\n  service log lines naming it:\n${serviceLines(run.id)}`));
        console.log(`chaos: ${lastOpen.length} sessions never ended; the first ones:\n${details.join("\n\n")}\n\nchaos timeline:\n${timeline.join("\n")}`);
        // CI keeps only the tail of the output: the error itself says where the first open session stopped.
        const first = open[0]!;
        const log = await events(first.id).catch(() => [] as Event[]);
        const tail = log.slice(-8).map((e) => `${e.seq} ${e.type}${e.type.startsWith("tool/") ? ` ${String(payloadOf(e).callId ?? "")}` : ""}`).join(", ");
        throw new Error(`${lastOpen.length} of ${SESSIONS} sessions never ended (${(error as Error).message})\n` +
          `session ${first.index} ${first.id}: lease ${await leaseOf(first.id)}; its last events: ${tail}\n` +
          `chaos timeline tail: ${timeline.slice(-6).map((l) => l.trim()).join(" | ")}`, { cause: error });
      }
      throw error;
    }
  }, RUN_BUDGET_MS);
});

/** Sessions still open at the last completion probe (for the failure report). */
let lastOpen: string[] = [];

/** Counts of what the chaos caused, across all sessions. */
function summarize(logs: Map<string, Event[]>): string {
  const all = [...logs.values()].flat();
  const count = (type: string) => all.filter((e) => e.type === type).length;
  const results = all.filter((e) => e.type === "tool/result").map((e) => String(payloadOf(e).content));
  const failedToRun = results.filter((content) => content.startsWith("Tool bash could not run")).length;
  const recovered = results.filter((content) => /^(Not executed|Interrupted)/.test(content)).length;
  return `${all.length} events; ${count("session/recovered")} recoveries, ${count("tool/retry")} tool retries, ${count("llm/retry")} llm retries; ` +
    `tool results: ${results.length - failedToRun - recovered} ran, ${recovered} interrupted or not executed (recovery), ${failedToRun} "could not run"` +
    [...new Set(results.filter((content) => content.startsWith("Tool bash could not run")))].slice(0, 3).map((content) => `\n  ${content.slice(0, 300)}`).join("");
}
