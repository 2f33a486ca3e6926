// The `gateway` part of `make bench`: the gateway's HTTP API under load, through its public routes
// only, on a stack of every service as its own process (bench/stack.ts):
// - gateway_rps: `GET /v1/sessions/:id` of one session, keep-alive, from a load generator in a
//   separate process — `wrk` (Debian's package) when on PATH, else bench/gateway-clients.ts `load`;
// - sse_fanout: 1,000 SSE followers of one session (`GET /v1/sessions/:id/events?from=`), spread
//   over child processes (bench/gateway-clients.ts `followers`), while a scripted turn appends
//   events through the loop's normal path; for every (event, follower) pair, the event's log
//   time stamp → its arrival at that follower.
import { execFileSync, fork, spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { FromFollowers, LoadJob, LoadResult, ToFollowers } from "./gateway-clients.js";
import { percentile, round, say, sleep, type Seen } from "./lib.js";
import { BENCH_DIR, ROOT, Stack } from "./stack.js";

const SECONDS = Number(process.env.TACK_BENCH_GATEWAY_SECONDS ?? 10);
/** Measured runs of `gateway_rps` (the median is reported). */
const RPS_RUNS = Number(process.env.TACK_BENCH_GATEWAY_RUNS ?? 3);
const CONNECTIONS = Number(process.env.TACK_BENCH_GATEWAY_CONNECTIONS ?? 50);
/** `wrk` or `node` (bench/gateway-clients.ts); default wrk when it is on PATH. */
const LOADGEN = process.env.TACK_BENCH_GATEWAY_LOADGEN;
/** Seconds of load on each of the comparison routes (`other_routes`). */
const OTHER_SECONDS = 3;
const FOLLOWERS = Number(process.env.TACK_BENCH_SSE_FOLLOWERS ?? 1_000);
/** Follower processes: one per core of the two-core bench machine (more only add context switches on the cores the gateway needs). */
const PROCESSES = Number(process.env.TACK_BENCH_SSE_PROCESSES ?? 2);
/** Steps of the measured turn: each a bash `sleep` in the session's sandbox, so events arrive as a working session's do. */
const STEPS = Number(process.env.TACK_BENCH_SSE_STEPS ?? 25);
const STEP_SLEEP_S = 0.1;
const GOALS = { rps: 5_000, fanout_p99_ms: 200 };
const CLIENTS = join(BENCH_DIR, "gateway-clients.ts");

/** A bench client process (bench/gateway-clients.ts) and its IPC messages, read in order. */
class Client<In, Out> {
  readonly #queue: Out[] = [];
  readonly #waiting: Array<(message: Out) => void> = [];
  #exit: string | undefined;

  constructor(readonly child: ChildProcess) {
    child.on("message", (message) => {
      const waiter = this.#waiting.shift();
      if (waiter) waiter(message as Out);
      else this.#queue.push(message as Out);
    });
    // "close", not "exit": a process's last messages may still be on their way when it has exited.
    child.on("close", (code, signal) => {
      this.#exit = `the bench client process exited (${signal ?? `code ${code}`})`;
    });
  }

  static fork<In, Out>(mode: "followers" | "load"): Client<In, Out> {
    return new Client(fork(CLIENTS, [mode], { cwd: ROOT, execArgv: ["--import", "tsx"], stdio: ["ignore", "inherit", "inherit", "ipc"] }));
  }

  send(message: In): void {
    this.child.send(message as object);
  }

  /** The next message; rejects after `timeoutMs` or when the process is gone. */
  next(timeoutMs: number): Promise<Out> {
    const queued = this.#queue.shift();
    if (queued !== undefined) return Promise.resolve(queued);
    return new Promise((resolve, reject) => {
      const gone = () => reject(new Error(this.#exit ?? "the bench client process exited"));
      const timer = setTimeout(() => {
        this.child.off("close", gone);
        reject(new Error(`no answer from the bench client process within ${timeoutMs} ms`));
      }, timeoutMs);
      if (this.#exit) return gone();
      this.child.once("close", gone);
      this.#waiting.push((message) => {
        clearTimeout(timer);
        this.child.off("close", gone);
        resolve(message);
      });
    });
  }

  kill(): void {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill("SIGKILL");
  }
}

/** CPU seconds (user + system) a process has used so far, from /proc/<pid>/stat; undefined when it is gone. */
function cpuSeconds(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
  } catch {
    return undefined;
  }
}
/** The machine's CPU time so far, all cores (/proc/stat): total and the part the hypervisor gave to other guests (steal). */
function machineTicks(): { total: number; steal: number } | undefined {
  try {
    const fields = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number);
    return { total: fields.slice(0, 8).reduce((a, b) => a + b, 0), steal: fields[7] ?? 0 };
  } catch {
    return undefined;
  }
}

/** Seconds the main thread of a process has spent runnable but waiting for a CPU (/proc/<pid>/schedstat); undefined when unknown. */
function waitSeconds(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const waited = Number(readFileSync(`/proc/${pid}/schedstat`, "utf8").split(" ")[1]);
    return Number.isFinite(waited) ? waited / 1e9 : undefined;
  } catch {
    return undefined;
  }
}
const CLOCK_TICKS = (() => {
  try {
    return Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100;
  } catch {
    return 100;
  }
})();

function hasWrk(): boolean {
  try {
    execFileSync("wrk", ["--version"], { stdio: "ignore" });
    return true;
  } catch (error) {
    // wrk --version exits 1 after printing its usage: it is there.
    return (error as { code?: string }).code !== "ENOENT";
  }
}

/** A wrk duration ("512.00us", "4.80ms", "1.02s", "1.5m") in ms. */
function wrkMs(text: string): number {
  const match = /^([\d.]+)(us|ms|s|m)$/.exec(text);
  if (!match) throw new Error(`wrk printed a latency ${JSON.stringify(text)} the bench cannot read`);
  return Number(match[1]) * { us: 0.001, ms: 1, s: 1_000, m: 60_000 }[match[2] as "us" | "ms" | "s" | "m"];
}

/** Runs wrk (2 threads, `connections` keep-alive connections, `seconds`) against `url`; its summary as a `LoadResult`. */
async function runWrk(url: string, headers: Record<string, string>, connections: number, seconds: number): Promise<LoadResult> {
  const args = ["-t2", `-c${connections}`, `-d${seconds}s`, "--latency", ...Object.entries(headers).flatMap(([k, v]) => ["-H", `${k}: ${v}`]), url];
  const child = spawn("wrk", args, { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
  child.stderr.on("data", (chunk: Buffer) => (out += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
  if (code !== 0) throw new Error(`wrk exited with ${code}: ${out.slice(0, 1000)}`);
  const requests = /(\d+) requests in ([\d.]+)(s|m)/.exec(out);
  const p50 = /^\s+50%\s+(\S+)/m.exec(out);
  const p99 = /^\s+99%\s+(\S+)/m.exec(out);
  const max = /^\s+Latency\s+\S+\s+\S+\s+(\S+)/m.exec(out);
  if (!requests || !p50 || !p99 || !max) throw new Error(`wrk's output is not what the bench reads:\n${out}`);
  const errors: Record<string, number> = {};
  const socket = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  if (socket) {
    for (const [i, kind] of ["connect", "read", "write", "timeout"].entries()) if (Number(socket[i + 1]) > 0) errors[kind] = Number(socket[i + 1]);
  }
  const non2xx = /Non-2xx or 3xx responses: (\d+)/.exec(out);
  if (non2xx) errors.non_2xx = Number(non2xx[1]);
  return {
    requests: Number(requests[1]), errors, seconds: Number(requests[2]) * (requests[3] === "m" ? 60 : 1),
    p50_ms: wrkMs(p50[1]!), p99_ms: wrkMs(p99[1]!), max_ms: wrkMs(max[1]!),
  };
}

/** The bench's node load generator in its own process. */
async function runNodeLoad(job: LoadJob): Promise<LoadResult> {
  const client = Client.fork<LoadJob, LoadResult>("load");
  try {
    client.send(job);
    return await client.next(job.durationMs + 60_000);
  } finally {
    client.kill();
  }
}

/** `gateway_rps`: GET one session with keep-alive for `SECONDS`, after a warm-up of a quarter of that. */
async function benchRps(stack: Stack): Promise<Record<string, unknown>> {
  const model = stack.script("gateway-rps", [{ content: "Ready." }]);
  const session = await stack.createSession(model, stack.workspace());
  await stack.submit(session, "say you are ready");
  await stack.watch.turnEnd(session, 1, 120_000);
  const detail = await stack.api<{ id: string; last_seq: number }>("GET", `/v1/sessions/${session}`);
  if (detail.id !== session) throw new Error(`GET /v1/sessions/${session} answered another session: ${JSON.stringify(detail).slice(0, 300)}`);
  const url = `${stack.tack.gatewayUrl}/v1/sessions/${session}`;
  const headers = { authorization: `Bearer ${stack.tack.apiKey}` };
  const generator = LOADGEN ?? (hasWrk() ? "wrk" : "node");
  if (generator !== "wrk" && generator !== "node") throw new Error(`TACK_BENCH_GATEWAY_LOADGEN must be wrk or node, got ${JSON.stringify(generator)}`);
  const load = (seconds: number) => generator === "wrk"
    ? runWrk(url, headers, CONNECTIONS, seconds)
    : runNodeLoad({ url, headers, connections: CONNECTIONS, durationMs: seconds * 1000 });
  say(`gateway: GET /v1/sessions/:id (a session of ${detail.last_seq} events), ${generator}, ${CONNECTIONS} connections, ${SECONDS} s after a warm-up`);
  await load(Math.max(1, Math.round(SECONDS / 4)));
  const pid = stack.tack.pid("gateway");
  // RUNS measured runs; the one with the median rate is reported (this shared two-core machine's
  // speed varies from run to run by a third), the rates of all of them beside it.
  const runs: Array<{ result: LoadResult; rps: number; cpu?: number; wait?: number; usPerRequest?: number; stealPercent?: number }> = [];
  for (let i = 0; i < RPS_RUNS; i++) {
    const cpuBefore = cpuSeconds(pid);
    const waitBefore = waitSeconds(pid);
    const ticksBefore = machineTicks();
    const result = await load(SECONDS);
    const cpuAfter = cpuSeconds(pid);
    const waitAfter = waitSeconds(pid);
    const ticksAfter = machineTicks();
    const run = {
      result, rps: Math.round(result.requests / result.seconds),
      ...(cpuBefore !== undefined && cpuAfter !== undefined && result.requests > 0 ? { usPerRequest: Math.round(((cpuAfter - cpuBefore) / result.requests) * 1e6) } : {}),
      ...(ticksBefore && ticksAfter && ticksAfter.total > ticksBefore.total ? { stealPercent: round(((ticksAfter.steal - ticksBefore.steal) / (ticksAfter.total - ticksBefore.total)) * 100, 1) } : {}),
      ...(cpuBefore !== undefined && cpuAfter !== undefined ? { cpu: cpuAfter - cpuBefore } : {}),
      ...(waitBefore !== undefined && waitAfter !== undefined ? { wait: waitAfter - waitBefore } : {}),
    };
    runs.push(run);
    say(`gateway: run ${i + 1}/${RPS_RUNS}: ${run.rps} requests/s, p50 ${round(result.p50_ms)} ms, p99 ${round(result.p99_ms)} ms, gateway CPU ${run.usPerRequest ?? "?"} µs/request, steal ${run.stealPercent ?? "?"} %`);
  }
  const median = [...runs].sort((a, b) => a.rps - b.rps)[Math.floor(runs.length / 2)]!;
  const { result, rps } = median;
  const errors = runs.reduce((n, r) => n + Object.values(r.result.errors).reduce((a, b) => a + b, 0), 0);
  say(`gateway: ${rps} requests/s (the median of ${runs.map((r) => r.rps).join(", ")}), p50 ${round(result.p50_ms)} ms, p99 ${round(result.p99_ms)} ms, ${errors} errors`);
  // Where the time goes: the same load on a route that only pings the index (about the framework's floor) and on
  // one that reads only the session index (key check and SQL, no session log).
  const others: Record<string, { rps: number; p50_ms: number; errors: number }> = {};
  for (const path of ["/healthz", "/v1/sessions?limit=1"]) {
    const other = generator === "wrk"
      ? await runWrk(`${stack.tack.gatewayUrl}${path}`, headers, CONNECTIONS, OTHER_SECONDS)
      : await runNodeLoad({ url: `${stack.tack.gatewayUrl}${path}`, headers, connections: CONNECTIONS, durationMs: OTHER_SECONDS * 1000 });
    others[`GET ${path}`] = { rps: Math.round(other.requests / other.seconds), p50_ms: round(other.p50_ms), errors: Object.values(other.errors).reduce((a, b) => a + b, 0) };
  }
  say(`gateway: other routes: ${Object.entries(others).map(([route, o]) => `${route} ${o.rps}/s`).join(", ")}`);
  return {
    gateway_rps: {
      rps, runs_rps: runs.map((r) => r.rps), runs_gateway_cpu_us_per_request: runs.map((r) => r.usPerRequest ?? null), runs_machine_steal_percent: runs.map((r) => r.stealPercent ?? null), p50_ms: round(result.p50_ms), p99_ms: round(result.p99_ms), max_ms: round(result.max_ms),
      requests: result.requests, errors, errors_by_kind: result.errors, seconds: round(result.seconds, 1),
      connections: CONNECTIONS, load_generator: generator, session_events: detail.last_seq,
      ...(median.cpu !== undefined ? { gateway_cpu_percent: Math.round((median.cpu / result.seconds) * 100) } : {}),
      ...(median.wait !== undefined ? { gateway_cpu_wait_percent: Math.round((median.wait / result.seconds) * 100) } : {}),
      ...(median.cpu !== undefined && result.requests > 0 ? { gateway_cpu_us_per_request: Math.round((median.cpu / result.requests) * 1e6) } : {}),
      other_routes: others,
      goal: GOALS.rps, met: rps >= GOALS.rps && errors === 0,
    },
    gateway_rps_definition: `GET /v1/sessions/:id of one session (${detail.last_seq} events in its log) with a bearer key, ${CONNECTIONS} keep-alive connections each sending the next request when the last was answered, for ${SECONDS} s after a ${Math.max(1, Math.round(SECONDS / 4))} s warm-up, ${RPS_RUNS} times: the run with the median rate is reported (runs_rps: each run's rate; runs_gateway_cpu_us_per_request: the gateway's CPU per answered request in each; runs_machine_steal_percent: the share of the machine's CPU time the hypervisor gave elsewhere during each, from /proc/stat), errors summed over all runs; against the one gateway process (${stack.runners().gateway ?? "?"}); load from ${generator === "wrk" ? "wrk (2 threads)" : "bench/gateway-clients.ts (undici Pool)"} in its own process; rps = answered requests / seconds, latency = request sent → answer read, errors = socket errors, timeouts and answers other than 200 (must be 0); gateway_cpu_percent = the gateway process's CPU time over the run (100 = one core); gateway_cpu_wait_percent = the time its main thread was ready to run but waited for a CPU taken by other work on the machine (/proc/<pid>/schedstat); gateway_cpu_us_per_request = its CPU time / answered requests; other_routes: the same load for ${OTHER_SECONDS} s on GET /healthz (no key check; one ping of the session index: about the HTTP framework's floor) and GET /v1/sessions?limit=1 (key check and the session index, no session log)`,
  };
}

/** `sse_fanout`: `FOLLOWERS` SSE followers of one session while a scripted turn of `STEPS` steps runs. */
async function benchFanout(stack: Stack): Promise<Record<string, unknown>> {
  const model = stack.script("gateway-fanout", [
    { content: "Ready." },
    ...Array.from({ length: STEPS }, (_, i) => ({ content: `Step ${i + 1}.`, tool_calls: [{ name: "bash", arguments: { command: `sleep ${STEP_SLEEP_S}; echo ${i + 1}` } }] })),
    { content: "Done." },
  ]);
  const session = await stack.createSession(model, stack.workspace());
  const { last_seq: createdSeq } = await stack.api<{ last_seq: number }>("GET", `/v1/sessions/${session}`);
  const processes = Math.max(1, Math.min(PROCESSES, FOLLOWERS));
  const clients = Array.from({ length: processes }, () => Client.fork<ToFollowers, FromFollowers>("followers"));
  try {
    // Followers start after the session's creation events, so each receives what the turns append.
    const connectStarted = performance.now();
    clients.forEach((client, i) => client.send({
      type: "start", gatewayUrl: stack.tack.gatewayUrl, apiKey: stack.tack.apiKey, session, fromSeq: createdSeq + 1,
      followers: Math.floor(FOLLOWERS / processes) + (i < FOLLOWERS % processes ? 1 : 0),
    }));
    const connected = await Promise.all(clients.map((c) => c.next(300_000)));
    const connectMs = performance.now() - connectStarted;
    const failed = connected.flatMap((m) => (m.type === "connected" ? m.failed : []));
    const open = connected.reduce((n, m) => n + (m.type === "connected" ? m.ok : 0), 0);
    say(`gateway: ${open}/${FOLLOWERS} SSE followers connected in ${Math.round(connectMs)} ms`);
    if (failed.length > 0) throw new Error(`${failed.length} of ${FOLLOWERS} SSE followers were refused; the first: ${failed[0]}`);

    // A warm-up turn every follower must receive: each one's stream is then really following the log.
    await stack.submit(session, "say you are ready");
    const warm = await stack.watch.turnEnd(session, 1, 120_000);
    const behindWarm = await reached(clients, warm.event.seq, 60_000);
    if (behindWarm > 0) throw new Error(`${behindWarm} of ${FOLLOWERS} SSE followers did not receive the warm-up turn's events within 60 s`);

    say(`gateway: ${FOLLOWERS} followers; a scripted turn of ${STEPS} bash steps`);
    // CPU time of the gateway and of the followers' processes from the turn's start until every follower had its end.
    const pids = { gateway: stack.tack.pid("gateway"), followers: clients.map((c) => c.child.pid) };
    const cpu = () => ({
      gateway: cpuSeconds(pids.gateway) ?? Number.NaN,
      gateway_wait: waitSeconds(pids.gateway) ?? Number.NaN,
      followers: pids.followers.reduce((n: number, pid) => n + (cpuSeconds(pid) ?? Number.NaN), 0),
    });
    const cpuBefore = cpu();
    const turnStarted = performance.now();
    await stack.submit(session, `run sleep ${STEP_SLEEP_S} ${STEPS} times`);
    const end = await stack.watch.turnEnd(session, 2, 300_000);
    const reason = end.event.payload?.$case === "turnEnd" ? end.event.payload.value.reason : "?";
    if (reason !== "completed") throw new Error(`the fan-out turn ended with ${reason}, not completed`);
    const behind = await reached(clients, end.event.seq, 60_000);
    const cpuAfter = cpu();
    const windowS = (performance.now() - turnStarted) / 1000;
    const share = (key: keyof typeof cpuBefore) => Math.round(((cpuAfter[key] - cpuBefore[key]) / windowS) * 100);
    const cpuPercent = { gateway: share("gateway"), gateway_waiting_for_cpu: share("gateway_wait"), followers: share("followers") };
    for (const client of clients) client.send({ type: "collect" });
    const collected = await Promise.all(clients.map((c) => c.next(60_000)));

    const measured: Seen[] = stack.watch.events(session).filter((s) => s.event.seq > warm.event.seq && s.event.seq <= end.event.seq);
    const pairs: number[] = [];
    const toAll: number[] = [];
    const lastArrival = new Map<number, number>();
    let missed = 0;
    let missedPairs = 0;
    const streamErrors: string[] = [];
    for (const message of collected) {
      if (message.type !== "arrivals") continue;
      for (const follower of message.followers) {
        const arrivals = new Map(follower.arrivals);
        let missing = 0;
        for (const seen of measured) {
          const at = arrivals.get(seen.event.seq);
          if (at === undefined) {
            missing++;
            continue;
          }
          pairs.push(at - seen.time);
          lastArrival.set(seen.event.seq, Math.max(lastArrival.get(seen.event.seq) ?? -Infinity, at));
        }
        if (missing > 0) missed++;
        missedPairs += missing;
        if (follower.error) streamErrors.push(follower.error);
      }
    }
    for (const seen of measured) {
      const last = lastArrival.get(seen.event.seq);
      if (last !== undefined) toAll.push(last - seen.time);
    }
    // The floor: the same events reaching the bench's own plain subscription on the log subjects.
    const bus = measured.map((s) => s.seenAt - s.time);
    const spanMs = measured.length > 0 ? measured.at(-1)!.time - measured[0]!.time : 0;
    const p99 = percentile(pairs, 99);
    say(`gateway: ${measured.length} events × ${open} followers: p50 ${percentile(pairs, 50)} ms, p99 ${p99} ms; ${missed} followers missed events (${missedPairs} pairs), ${behind} still behind 60 s after the turn ended, ${streamErrors.length} stream errors${streamErrors[0] ? ` (the first: ${streamErrors[0]})` : ""}`);
    return {
      sse_fanout: {
        p50_ms: percentile(pairs, 50), p99_ms: p99, max_ms: pairs.length > 0 ? round(pairs.reduce((a, b) => Math.max(a, b), -Infinity)) : Number.NaN,
        to_all_p50_ms: percentile(toAll, 50), to_all_p99_ms: percentile(toAll, 99),
        followers: open, events: measured.length, pairs: pairs.length, missed_followers: missed, missed_pairs: missedPairs,
        followers_behind_at_end: behind, stream_errors: streamErrors.length, ...(streamErrors.length > 0 ? { first_stream_error: streamErrors[0] } : {}),
        follower_processes: processes, connect_ms: Math.round(connectMs), turn_ms: Math.round(spanMs), cpu_percent: cpuPercent,
        gateway_cpu_us_per_delivery: pairs.length > 0 ? round(((cpuAfter.gateway - cpuBefore.gateway) / pairs.length) * 1e6, 1) : Number.NaN,
        events_per_s: spanMs > 0 ? Math.round((measured.length / spanMs) * 1000) : 0,
        breakdown_p50_ms: { log_to_bus_subscriber: percentile(bus, 50), bus_subscriber_to_follower: round(percentile(pairs, 50) - percentile(bus, 50)) },
        goal: GOALS.fanout_p99_ms, met: p99 <= GOALS.fanout_p99_ms && missed === 0 && open === FOLLOWERS,
      },
      sse_fanout_definition: `${FOLLOWERS} SSE followers (GET /v1/sessions/:id/events?from=<first new seq>, keep-alive, in ${processes} child processes, each response read with node:http and parsed by eventsource-parser as its chunks arrive) of one session on the one gateway process; after a warm-up turn every follower received, a scripted turn of ${STEPS} steps (each a bash \`sleep ${STEP_SLEEP_S}\` in the session's sandbox) appends its events through the loop; for each of its events and each follower: the event's log time stamp (the loop's) → the event parsed by that follower; p50/p99/max over all (event, follower) pairs, to_all = per event, until the last follower had it; missed_followers = followers lacking any of the turn's events (must be 0); breakdown: the log stamp → the bench's own NATS subscription on the log subjects, and from there to the followers; cpu_percent: CPU time of the gateway process and of all follower processes together from the turn's start until every follower had its last event, over that time (100 = one core), and the time the gateway's main thread was ready to run but waited for a CPU (/proc/<pid>/schedstat); gateway_cpu_us_per_delivery: the gateway's CPU time over that window / (event, follower) pairs delivered`,
    };
  } finally {
    for (const client of clients) client.kill();
  }
}

/** Asks every followers process to wait until each of its followers received `seq`; how many did not. */
async function reached(clients: Client<ToFollowers, FromFollowers>[], seq: number, timeoutMs: number): Promise<number> {
  for (const client of clients) client.send({ type: "await", seq, timeoutMs });
  const answers = await Promise.all(clients.map((c) => c.next(timeoutMs + 30_000)));
  return answers.reduce((n, m) => n + (m.type === "reached" ? m.behind : 0), 0);
}

/** The gateway part: one stack of service processes, then the request rate and the SSE fan-out. */
export async function benchGateway(options: { natsUrl: string }): Promise<Record<string, unknown>> {
  const stack = await Stack.launch({ natsUrl: options.natsUrl, label: "gw" });
  try {
    say(`gateway: services up in ${Math.round(stack.launchMs)} ms (gateway: ${stack.runners().gateway ?? "?"})`);
    const rps = await benchRps(stack);
    // Let the gateway settle (GC, sockets in TIME_WAIT) before the fan-out.
    await sleep(1_000);
    return { ...rps, ...await benchFanout(stack) };
  } finally {
    await stack.close();
  }
}
