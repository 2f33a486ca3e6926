// `make bench`: drives a 200-step scripted session through the real loop, llm, tools and
// sandbox services (one process, talking only over NATS) with a warm sandbox, then writes
// bench/results/latest.json. Uses NATS_URL (default 127.0.0.1:4222) under a fresh namespace.
import { execFileSync } from "node:child_process";
import { chownSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { Bus } from "@tack/bus";
import { removeNamespace } from "@tack/testkit";
import { draft, FORMAT_VERSION, readAll, SessionLogWriter, timestampMs } from "@tack/log";
import { CreateSessionRequest, CreateSessionResponse, SubmitMessageRequest, SubmitMessageResponse, type Event } from "@tack/proto";
import { startLoopService } from "@tack/loop-service";
import { startLlmService } from "@tack/llm-service";
import { startToolsService } from "@tack/tools-service";
import { startSandboxService } from "@tack/sandbox-service";
import { benchContext } from "./context.js";
import { benchSandbox } from "./sandbox.js";

const STEPS = Number(process.env.TACK_BENCH_STEPS ?? 200);
const APPENDS = Number(process.env.TACK_BENCH_APPENDS ?? 2_000);
const natsUrl = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const namespace = `bench${randomBytes(4).toString("hex")}`;
const root = join(import.meta.dirname, "..");

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return Math.round(sorted[i]! * 100) / 100;
}

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

async function main(): Promise<void> {
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

  process.stderr.write(`bench: namespace ${namespace}, ${STEPS} steps\n`);
  const services = [
    await startSandboxService({ natsUrl, namespace }),
    await startToolsService({ natsUrl, namespace }),
    // Scripts are read only from directories named here: this run's scratch directory.
    await startLlmService({ url: natsUrl, namespace, scripts: { scriptDirs: [work] } }),
    await startLoopService({ natsUrl, namespace, stepLimit: STEPS + 10 }),
  ];
  const bus = await Bus.connect({ url: natsUrl, namespace, name: "bench" });
  try {
    const { sessionId } = await bus.request(bus.names.loopCreate, CreateSessionRequest,
      CreateSessionRequest.fromPartial({ tenant: "local", model: `scripted:${script}`, workspace }), CreateSessionResponse);
    // Warm-up: one turn with one tool call so the container exists before measuring.
    const { EnsureSandboxRequest, EnsureSandboxResponse } = await import("@tack/proto");
    await bus.request(bus.names.sandboxEnsure, EnsureSandboxRequest, { sessionId, tenant: "local", workspace, mode: "workspace-write" }, EnsureSandboxResponse, { timeoutMs: 60_000 });
    await bus.request(bus.names.loopSubmit, SubmitMessageRequest, { tenant: "local", sessionId, text: "warm up" }, SubmitMessageResponse);
    await waitForTurns(bus, sessionId, 1, 1);
    await bus.request(bus.names.loopSubmit, SubmitMessageRequest, { tenant: "local", sessionId, text: `run true ${STEPS} times` }, SubmitMessageResponse);
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
    const t0 = performance.now();
    for (let i = 0; i < APPENDS; i++) {
      await writer.append(draft("userMessage", { text: `message ${i}` }, "bench"));
      if (i % 100 === 99) progress("appends", i + 1, APPENDS);
    }
    const appendPerS = Math.round(APPENDS / ((performance.now() - t0) / 1000));

    process.stderr.write("context: 5-step task, cold then warm cache\n");
    const context = await benchContext({ natsUrl, namespace, scriptDir: work });
    process.stderr.write("sandbox: exec, claim, cold starts, runsc slowdown\n");
    const sandbox = await benchSandbox({ natsUrl });

    let commit = "unknown";
    try { commit = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: root }).toString().trim(); } catch { /* not a checkout */ }
    const result = {
      measured_at: new Date().toISOString(),
      commit,
      machine: { cpus: cpus().length, node: process.version },
      steps: overhead.length + 1,
      step_overhead_ms: { p50: percentile(overhead, 50), p99: percentile(overhead, 99), definition: "assistant/message of step k → step/start of step k+1 (tool call included)" },
      tool_roundtrip_ms: { p50: percentile(roundtrip, 50), p99: percentile(roundtrip, 99), definition: "tool/call → tool/result for bash `true` in a warm sandbox" },
      log_append_per_s: appendPerS,
      ...context,
      ...sandbox,
    };
    mkdirSync(join(root, "bench/results"), { recursive: true });
    writeFileSync(join(root, "bench/results/latest.json"), `${JSON.stringify(result, null, 2)}\n`);
    console.log(JSON.stringify(result, null, 2));
  } finally {
    for (const s of services.reverse()) {
      await (s as { stop(o?: { removeContainers?: boolean }): Promise<void> }).stop({ removeContainers: true });
    }
    await removeNamespace(bus.nc, namespace);
    await bus.close();
    rmSync(work, { recursive: true, force: true });
  }
}

await main();
