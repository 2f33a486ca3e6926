// `make bench`: writes bench/results/latest.json. Uses NATS_URL (default 127.0.0.1:4222), each
// part under its own fresh namespace. The parts:
// - core (here): a 200-step scripted session through the real loop, llm, tools and sandbox
//   services (in this process, talking only over NATS) with a warm sandbox; the log's append rate;
// - context (bench/context.ts): first request size, prefix-cache hit ratio, cost of a task;
// - sandbox (bench/sandbox.ts): exec, warm-pool claim, cold starts, gVisor slowdown;
// - services (bench/latency.ts, bench/startup.ts): every service as its own process through the
//   launcher `tack up` uses — a new session's first step, `tack run` start-up, a message to a long session;
// - load (bench/load.ts): 100 sessions at once, with each service's peak memory and the CPU time by process kind (bench/cpu.ts);
// - death (bench/recovery.ts): the tools worker killed during a call;
// - tools (bench/tools.ts): every session mode's first request, run_code's inner-call overhead, web_fetch;
// - images (bench/images.ts): each image's size and each service's container start-up in the compose deploy.
// - ui (bench/ui.ts): the web UI's first paint of a 200-event session in Chromium.
// - uploads (bench/uploads.ts): bytes an upload bomb (a 9 MB tar.gz of a 2 GB sparse file) writes before it is refused.
// - gateway (bench/gateway.ts): requests per second of GET a session (keep-alive, wrk), 1,000 SSE followers of one session.
// TACK_BENCH_ONLY=services,load (say) runs only those parts and prints them without writing latest.json.
import { execFileSync } from "node:child_process";
import { chownSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { Bus, LoopRpc, SandboxRpc } from "@tack/bus";
import { removeNamespace } from "@tack/testkit";
import { draft, FORMAT_VERSION, readAll, SessionLogWriter, timestampMs } from "@tack/log";
import { CreateSessionRequest, EnsureSandboxRequest, SubmitMessageRequest, type Event } from "@tack/proto";
import { startLoopService } from "@tack/loop-service";
import { startLlmService } from "@tack/llm-service";
import { startToolsService } from "@tack/tools-service";
import { startSandboxService } from "@tack/sandbox-service";
import { benchContext } from "./context.js";
import { benchImages } from "./images.js";
import { benchGateway } from "./gateway.js";
import { benchFirstStep, benchLongSession } from "./latency.js";
import { percentile, round, say } from "./lib.js";
import { benchLoad } from "./load.js";
import { benchToolWorkerDeath } from "./recovery.js";
import { benchSandbox } from "./sandbox.js";
import { Stack } from "./stack.js";
import { benchStartup, FakeModel } from "./startup.js";
import { benchTools } from "./tools.js";
import { benchUi } from "./ui.js";
import { benchUploads } from "./uploads.js";

const STEPS = Number(process.env.TACK_BENCH_STEPS ?? 200);
const APPENDS = Number(process.env.TACK_BENCH_APPENDS ?? 2_000);
const natsUrl = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const namespace = `bench${randomBytes(4).toString("hex")}`;
const root = join(import.meta.dirname, "..");

function progress(label: string, done: number, total: number): void {
  if (!process.stderr.isTTY) return;
  const width = 30;
  const filled = Math.round((done / total) * width);
  process.stderr.write(`\r${label} [${"#".repeat(filled)}${".".repeat(width - filled)}] ${done}/${total}`);
  if (done === total) process.stderr.write("\n");
}

const of = <C extends NonNullable<Event["payload"]>["$case"]>(events: Event[], c: C) => events.filter((e) => e.payload?.$case === c);

async function waitForTurns(bus: Bus, sessionId: string, turns: number, total: number): Promise<Event[]> {
  for (;;) {
    const events = await readAll(bus.nc, bus.names, { tenant: "local", sessionId });
    const steps = of(events, "stepEnd").length;
    progress("steps", Math.min(steps, total), total);
    const ended = of(events, "turnEnd");
    if (ended.length >= turns) {
      const last = ended.at(-1)!;
      if (last.payload?.$case === "turnEnd" && last.payload.value.reason !== "completed") {
        const error = of(events, "error").at(-1);
        throw new Error(`bench turn ended with ${last.payload.value.reason}: ${error?.payload?.$case === "error" ? error.payload.value.message : "?"}`);
      }
      return events;
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** The parts `TACK_BENCH_ONLY` can name, in the order they run. */
const PARTS = ["core", "context", "tools", "sandbox", "uploads", "services", "load", "death", "images", "ui", "gateway"] as const;
type Part = (typeof PARTS)[number];

/** The core numbers (and, sharing its services, the context numbers): in-process services, one long scripted session. */
async function benchCore(parts: ReadonlySet<Part>): Promise<Record<string, unknown>> {
  const work = mkdtempSync(join(tmpdir(), "tack-bench-"));
  const workspace = join(work, "workspace");
  mkdirSync(workspace);
  if (process.getuid?.() === 0) chownSync(workspace, 1000, 1000);
  const script = join(work, "script.json");
  const replies = [
    { content: "warm" }, // turn 1: creates the sandbox (cold start, not measured)
    ...Array.from({ length: STEPS }, () => ({ tool_calls: [{ name: "bash", arguments: { command: "true" } }] })),
    { content: "done" },
  ];
  writeFileSync(script, JSON.stringify({ replies }));

  say(`core: namespace ${namespace}, ${STEPS} steps`);
  const services = [
    await startSandboxService({ natsUrl, namespace }),
    await startToolsService({ natsUrl, namespace }),
    // Scripts are read only from directories named here: this run's scratch directory.
    await startLlmService({ url: natsUrl, namespace, scripts: { scriptDirs: [work] } }),
    await startLoopService({ natsUrl, namespace, stepLimit: STEPS + 10 }),
  ];
  const bus = await Bus.connect({ url: natsUrl, namespace, name: "bench" });
  try {
    let core: Record<string, unknown> = {};
    if (parts.has("core")) {
      const { sessionId } = await bus.request(LoopRpc.CreateSession, CreateSessionRequest.fromPartial({ tenant: "local", model: `scripted:${script}`, workspace }));
      // Warm-up: one turn with one tool call so the container exists before measuring.
      await bus.request(SandboxRpc.EnsureSandbox, EnsureSandboxRequest.fromPartial({ sessionId, tenant: "local", workspace, mode: "workspace-write" }), { timeoutMs: 60_000 });
      await bus.request(LoopRpc.SubmitMessage, SubmitMessageRequest.fromPartial({ tenant: "local", sessionId, text: "warm up" }));
      await waitForTurns(bus, sessionId, 1, 1);
      await bus.request(LoopRpc.SubmitMessage, SubmitMessageRequest.fromPartial({ tenant: "local", sessionId, text: `run true ${STEPS} times` }));
      const events = await waitForTurns(bus, sessionId, 2, STEPS + 1);

      const turnStart = of(events, "turnStart").at(-1)!.seq;
      const inTurn = events.filter((e) => e.seq > turnStart);
      const stepStarts = of(inTurn, "stepStart");
      const assistants = of(inTurn, "assistantMessage");
      const overhead: number[] = [];
      for (let i = 1; i < stepStarts.length; i++) overhead.push(timestampMs(stepStarts[i]!.time) - timestampMs(assistants[i - 1]!.time));
      const calls = new Map(of(inTurn, "toolCall").map((e) => [e.payload?.$case === "toolCall" ? e.payload.value.callId : "", timestampMs(e.time)]));
      const roundtrip = of(inTurn, "toolResult").map((e) => timestampMs(e.time) - calls.get(e.payload?.$case === "toolResult" ? e.payload.value.callId : "")!);

      // Raw append rate of the single-writer log (each append waits for its JetStream ack).
      const writer = await SessionLogWriter.open(bus.nc, bus.names, { tenant: "local", sessionId: "appendbench" });
      await writer.append(draft("sessionCreated", { sessionId: "appendbench", tenant: "local", mode: "standard", model: "m", workspace, formatVersion: FORMAT_VERSION, title: "" }, "bench"));
      // One at a time: each append waits for its ack before the next starts (latency-bound).
      const t0 = performance.now();
      for (let i = 0; i < APPENDS; i++) {
        await writer.append(draft("userMessage", { text: `message ${i}` }, "bench"));
        if (i % 100 === 99) progress("appends", i + 1, APPENDS);
      }
      const sequentialPerS = Math.round(APPENDS / ((performance.now() - t0) / 1000));
      // Pipelined, as the writer allows: up to 64 appends in flight, the chain of expectations kept.
      const t1 = performance.now();
      const inFlight = new Set<Promise<unknown>>();
      for (let i = 0; i < APPENDS; i++) {
        const p = writer.append(draft("userMessage", { text: `pipelined ${i}` }, "bench"));
        inFlight.add(p);
        void p.finally(() => inFlight.delete(p));
        if (inFlight.size >= 64) await Promise.race(inFlight);
        if (i % 100 === 99) progress("pipelined appends", i + 1, APPENDS);
      }
      await Promise.all(inFlight);
      const appendPerS = Math.round(APPENDS / ((performance.now() - t1) / 1000));
      core = {
        steps: overhead.length + 1,
        step_overhead_ms: { p50: percentile(overhead, 50), p99: percentile(overhead, 99), definition: "assistant/message of step k → step/start of step k+1 (tool call included)" },
        tool_roundtrip_ms: { p50: percentile(roundtrip, 50), p99: percentile(roundtrip, 99), definition: "tool/call → tool/result for bash `true` in a warm sandbox" },
        log_append_per_s: appendPerS,
        log_append_sequential_per_s: sequentialPerS,
      };
    }
    if (!parts.has("context")) return core;
    say("context: 5-step task, cold then warm cache");
    return { ...core, ...await benchContext({ natsUrl, namespace, scriptDir: work }) };
  } finally {
    for (const s of services.reverse()) {
      await (s as { stop(o?: { removeContainers?: boolean }): Promise<void> }).stop({ removeContainers: true });
    }
    await removeNamespace(bus.nc, namespace);
    await bus.close();
    rmSync(work, { recursive: true, force: true });
  }
}

/** First step, `tack run` start-up and a message to a long session, on one stack of service processes whose `openai:` provider is a local fake. */
async function benchServices(): Promise<Record<string, unknown>> {
  const model = await FakeModel.start();
  const stack = await Stack.launch({ natsUrl, label: "svc", env: { OPENAI_BASE_URL: model.url, OPENAI_API_KEY: "bench-fake-key" } });
  try {
    say(`services: every service as its own process, up in ${Math.round(stack.launchMs)} ms`);
    return {
      service_processes: { runner: stack.runners(), launch_ms: Math.round(stack.launchMs), definition: "how the launcher ran each service for the services part (compiled = dist/ from `make build`, tsx = TypeScript sources) and how long launch() took until every service answered" },
      ...await benchFirstStep(stack),
      ...await benchStartup(stack, model),
      ...await benchLongSession(stack),
    };
  } finally {
    await stack.close();
    model.close();
  }
}

async function main(): Promise<void> {
  const only = process.env.TACK_BENCH_ONLY?.split(",").map((p) => p.trim()).filter(Boolean);
  for (const part of only ?? []) if (!(PARTS as readonly string[]).includes(part)) throw new Error(`TACK_BENCH_ONLY names ${JSON.stringify(part)}; parts: ${PARTS.join(", ")}`);
  const parts = new Set<Part>((only as Part[] | undefined) ?? PARTS);
  const started = performance.now();
  const loadAtStart = loadavg()[0]!;
  const result: Record<string, unknown> = {};
  // A part that fails is reported (and fails the run) without losing the parts that worked.
  const errors: Record<string, string> = {};
  const run = async (part: Part, fn: () => Promise<Record<string, unknown>>) => {
    if (!parts.has(part)) return;
    try {
      Object.assign(result, await fn());
    } catch (error) {
      errors[part] = (error as Error).message ?? String(error);
      say(`${part} failed: ${(error as Error).stack ?? errors[part]}`);
    }
  };
  if (parts.has("core") || parts.has("context")) await run(parts.has("core") ? "core" : "context", () => benchCore(parts));
  await run("tools", benchTools);
  await run("sandbox", () => {
    say("sandbox: exec, claim, cold starts, runsc slowdown");
    return benchSandbox({ natsUrl });
  });
  await run("uploads", () => benchUploads({ natsUrl }));
  await run("services", benchServices);
  await run("load", () => benchLoad({ natsUrl }));
  await run("death", () => benchToolWorkerDeath({ natsUrl }));
  await run("images", benchImages);
  await run("ui", () => benchUi({ natsUrl }));
  await run("gateway", () => benchGateway({ natsUrl }));

  let commit = "unknown";
  try { commit = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: root }).toString().trim(); } catch { /* not a checkout */ }
  const out = {
    measured_at: new Date().toISOString(),
    commit,
    machine: { cpus: cpus().length, node: process.version, load_avg_1m: { at_start: round(loadAtStart), at_end: round(loadavg()[0]!) } },
    bench_seconds: Math.round((performance.now() - started) / 1000),
    ...result,
    ...(Object.keys(errors).length > 0 ? { errors } : {}),
  };
  if (!only) {
    mkdirSync(join(root, "bench/results"), { recursive: true });
    writeFileSync(join(root, "bench/results/latest.json"), `${JSON.stringify(out, null, 2)}\n`);
  }
  // Exit once the JSON is written: a connection or timer left open by a failed part must not keep the bench alive.
  const code = Object.keys(errors).length > 0 ? 1 : 0;
  process.stdout.write(`${JSON.stringify(out, null, 2)}\n`, () => process.exit(code));
}

await main();
