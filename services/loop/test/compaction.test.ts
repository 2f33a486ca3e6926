import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { Bus, LlmRpc, LoopRpc, SandboxRpc, ToolsRpc } from "@tack/bus";
import { deriveRequest, Projection, pruneText, readAll, SpillBucket } from "@tack/log";
import { CallToolRequest, ChatMessage, CompleteRequest, CreateSessionRequest, Delta_Kind, ExecResponse, Role, Surface_Kind, type Event, type Usage } from "@tack/proto";
import { startLoopService, SUMMARY_HEADING, SUMMARY_INSTRUCTION, type LoopOptions, type LoopService } from "@tack/loop-service";
import { listTools, startToolsService, type ToolsService } from "@tack/tools-service";
import type { Logger } from "@tack/telemetry";
import { Budgets } from "../src/budget.js";
import { compactInstruction, Compactor, type CompactionSettings } from "../src/compaction.js";
import { removeNamespace, waitFor } from "@tack/testkit";

// Compaction through the real loop, the real tools service and real NATS (log stream and spill
// object store). Scripted on the bus: the model, and the sandbox, whose `emit <bytes> <label>`
// command prints numbered 100-byte lines so that results have a known size and content.
const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const namespace = `t${randomBytes(5).toString("hex")}`;
const workspace = mkdtempSync(join(tmpdir(), "tack-compaction-"));
let bus: Bus;
let tools: ToolsService;
let loop: LoopService | undefined;

type Reply = { content?: string; calls?: Array<{ id: string; name: string; args: object }>; usage?: Usage; costUsd?: number; model?: string };
/** Every model request in the order received; summary requests end with SUMMARY_INSTRUCTION. */
let requests: CompleteRequest[] = [];
/** The reply to a step's request, by the step's index (0-based) among the requests that are not summaries. */
let stepReply: (index: number) => Reply = () => ({ content: "done" });
let summaryReply: (index: number) => Reply = () => ({ content: "summary" });
/** Model replies wait for this (a test holds a turn running with it). */
let llmGate: Promise<void> = Promise.resolve();

/** A summary request: it ends with the automatic summary's instruction or with a `/compact` one. */
const isSummary = (r: CompleteRequest) => r.messages.at(-1)?.role === Role.ROLE_USER
  && (r.messages.at(-1)?.content === SUMMARY_INSTRUCTION || r.messages.at(-1)!.content.startsWith(compactInstruction().slice(0, 40)));

/** What `emit <bytes> <label>` prints: 100-byte lines `<label> <line number> xxx…`. */
function emitted(bytes: number, label: string): string {
  const lines: string[] = [];
  for (let i = 1; lines.length * 100 < bytes; i++) lines.push(`${label} ${String(i).padStart(6, "0")} `.padEnd(99, "x"));
  return `${lines.join("\n")}\n`;
}
/** The bash tool's text for `emit`: stdout without its final newline, then the exit code. */
const bashResult = (bytes: number, label: string) => `${emitted(bytes, label).replace(/\n$/, "")}\nexit code: 0`;
const emit = (id: string, bytes: number, label: string) => ({ id, name: "bash", args: { command: `emit ${bytes} ${label}` } });

beforeAll(async () => {
  bus = await Bus.connect({ url: NATS_URL, namespace, name: "compaction-test" });
  bus.serve(LlmRpc.Complete, async (req, w) => {
    requests.push(req);
    await llmGate;
    const reply = isSummary(req) ? summaryReply(requests.filter(isSummary).length - 1) : stepReply(requests.filter((r) => !isSummary(r)).length - 1);
    const toolCalls = (reply.calls ?? []).map((c) => ({ id: c.id, name: c.name, arguments: JSON.stringify(c.args) }));
    let index = 0;
    if (reply.content) w.send({ index: index++, body: { $case: "delta", value: { kind: Delta_Kind.KIND_TEXT, text: reply.content, toolIndex: 0, toolCallId: "", toolName: "" } } });
    w.send({ index, body: { $case: "done", value: {
      content: reply.content ?? "", reasoningContent: "", toolCalls, finishReason: toolCalls.length ? "tool_calls" : "stop",
      usage: reply.usage, model: reply.model ?? "scripted", costUsd: reply.costUsd ?? 0, priceWindow: "",
    } } });
  });
  bus.serve(LlmRpc.CheckModel, async () => ({ provider: "scripted" }));
  bus.serve(SandboxRpc.EnsureSandbox, async () => ({ containerId: "scripted", created: false, runtime: "scripted" }));
  bus.serve(SandboxRpc.Exec, async (req) => {
    const m = /^emit (\d+) (\w+)$/.exec(req.argv[2] ?? "");
    if (!m) return ExecResponse.fromPartial({ exitCode: 127, stderr: Buffer.from(`unknown command ${req.argv.join(" ")}`) });
    return ExecResponse.fromPartial({ exitCode: 0, stdout: Buffer.from(emitted(Number(m[1]), m[2]!)) });
  });
  tools = await startToolsService({ natsUrl: NATS_URL, namespace });
});

afterEach(async () => {
  await loop?.stop();
  loop = undefined;
  requests = [];
});

afterAll(async () => {
  await tools.stop();
  await removeNamespace(bus.nc, namespace).catch(() => undefined);
  await bus.close();
});

/** Starts a loop with `options`, runs one turn of a new session on `text`, and returns the session's log. */
async function runTurn(options: Partial<LoopOptions>, text: string, mode = "standard"): Promise<{ sessionId: string; events: Event[] }> {
  loop = await startLoopService({ natsUrl: NATS_URL, namespace, ...options });
  const { sessionId } = await bus.request(LoopRpc.CreateSession, CreateSessionRequest.fromPartial({ model: "scripted:x", workspace, mode }));
  await bus.request(LoopRpc.SubmitMessage, { tenant: "local", sessionId, text });
  const events = await waitFor("turn/end", async () => {
    const all = await readAll(bus.nc, bus.names, { tenant: "local", sessionId });
    return all.some((e) => e.type === "turn/end") && all;
  }, { timeoutMs: 20_000, intervalMs: 50 });
  return { sessionId, events };
}

const messagesJson = (r: { messages: readonly ChatMessage[] }) => JSON.stringify(r.messages.map((m) => ChatMessage.toJSON(m)));
/** True when request `b`'s messages extend request `a`'s byte for byte (what a provider's prefix cache needs). */
const extendsPrefix = (a: CompleteRequest, b: CompleteRequest) => messagesJson(b).startsWith(messagesJson(a).slice(0, -1));
const toolResults = (events: Event[]) => events.flatMap((e) => (e.payload?.$case === "toolResult" ? [{ seq: e.seq, ...e.payload.value }] : []));
const completed = (events: Event[]) => expect(events.at(-1)!.payload).toMatchObject({ $case: "turnEnd", value: { reason: "completed" } });

describe("compaction", () => {
  it("compaction - minimal mode never prunes or summarizes: an earlier message past the threshold reaches the model whole", async () => {
    const text = `remember this: ${"lorem ipsum dolor sit amet ".repeat(1_500)}`;
    summaryReply = () => ({ content: "SUMMARY" });
    stepReply = () => ({ content: "done" });
    for (const mode of ["standard", "minimal"]) {
      requests = [];
      const { sessionId } = await runTurn({ contextWindowTokens: 8_000, pruneAt: 0.5, summarizeAt: 0.5 }, text, mode);
      await bus.request(LoopRpc.SubmitMessage, { tenant: "local", sessionId, text: "and now?" });
      const events = await waitFor("the second turn's end", async () => {
        const all = await readAll(bus.nc, bus.names, { tenant: "local", sessionId });
        return all.filter((e) => e.type === "turn/end").length === 2 && all;
      }, { timeoutMs: 20_000, intervalMs: 50 });
      await loop?.stop();
      loop = undefined;
      completed(events);
      // The same session in standard mode is summarized: what minimal leaves out is real.
      expect(requests.some(isSummary)).toBe(mode === "standard");
      if (mode === "minimal") {
        expect(events.some((e) => e.payload?.$case === "contextSummarized" || e.payload?.$case === "contextPruned")).toBe(false);
        expect(requests.at(-1)!.messages.filter((m) => m.role === Role.ROLE_USER).map((m) => m.content)).toEqual([text, "and now?"]);
      }
    }
  });

  it("compaction - a 120 KB tool result is spilled: the log keeps a preview and the reference, the object store the whole, and read returns later lines", async () => {
    stepReply = (i) => [
      { calls: [emit("big_1", 120_000, "row")] },
      { calls: [{ id: "read_1", name: "read", args: { path: "tack-spill:big_1", offset: 1000, limit: 3 } }] },
      { content: "done" },
    ][i]!;
    const { sessionId, events } = await runTurn({}, "print the big table");
    completed(events);
    const whole = bashResult(120_000, "row");
    const [spilled, read] = toolResults(events);
    const preview = whole.slice(0, 3_999); // the first 40 whole lines (4,000 bytes) fit in the 4,096-character preview
    expect(spilled).toMatchObject({
      callId: "big_1", isError: false, spillObject: `local.${sessionId}.big_1`, fullBytes: Buffer.byteLength(whole),
      content: `${preview}\n\n[Result too large for the context: ${Buffer.byteLength(whole)} bytes in total, the ${Buffer.byteLength(whole) - 4_000} bytes after this preview are not shown. `
        + 'It has 1201 lines; read the rest with the read tool, path "tack-spill:big_1", offset 41.]',
    });
    const bucket = (await SpillBucket.open(bus.nc, bus.names))!;
    expect(Buffer.from((await bucket.get({ tenant: "local", sessionId }, "big_1"))!).toString()).toBe(whole);
    // The model saw the preview, never the whole; then read the spilled lines through the tools service.
    expect(requests[1]!.messages.at(-1)!.content).toBe(spilled!.content);
    const line = (n: number) => `${String(n).padStart(6)}\trow ${String(n).padStart(6, "0")} `.padEnd(106, "x");
    expect(read).toMatchObject({ callId: "read_1", isError: false, content: `${line(1000)}\n${line(1001)}\n${line(1002)}\n\n(showing lines 1000-1002 of 1201; read more with offset=1003)` });
    // Another session, or the same session id under another tenant, cannot read it.
    for (const address of [{ tenant: "local", sessionId: "someoneelse" }, { tenant: "other", sessionId }]) {
      const response = await bus.request(ToolsRpc.CallTool, CallToolRequest.fromPartial({
        ...address, callId: "c", name: "read", arguments: JSON.stringify({ path: "tack-spill:big_1" }), workspace, sandboxMode: "workspace-write",
      }));
      expect(response).toMatchObject({ isError: true, content: expect.stringMatching(/^No spilled result tack-spill:big_1 in this session/) });
    }
  });

  it("compaction - old large results are pruned to head and tail in the model's view, as derived from the log, which keeps them whole", async () => {
    stepReply = (i) => (i < 3 ? { calls: [emit(`e${i}`, 9_000, `r${i}`)] } : { content: "done" });
    const { events } = await runTurn({ contextWindowTokens: 10_000, pruneAt: 0.5, pruneKeep: 0.3, pruneMinimum: 0.05, summarizeAt: 0.95 }, "emit three times");
    completed(events);
    const results = toolResults(events);
    expect(results.map((r) => r.content)).toEqual([0, 1, 2].map((i) => bashResult(9_000, `r${i}`)));
    const prunes = events.flatMap((e) => (e.payload?.$case === "contextPruned" ? [e] : []));
    expect(prunes).toHaveLength(1);
    const secondAssistant = events.filter((e) => e.type === "assistant/message")[1]!;
    const original = bashResult(9_000, "r0");
    const shortened = pruneText(original, 4_096, 1_024);
    expect(prunes[0]!.payload).toEqual({ $case: "contextPruned", value: {
      upToSeq: secondAssistant.seq, headChars: 4_096, tailChars: 1_024, resultsPruned: 1, charsSaved: original.length - shortened.length,
    } });
    // It was logged in step 4, before that step's model call, which sees head + marker + tail of the oldest result only.
    const step4 = events.findIndex((e) => e.payload?.$case === "stepStart" && e.payload.value.step === 4);
    expect(events.findIndex((e) => e === prunes[0]) - step4).toBeGreaterThan(0);
    const last = requests.at(-1)!;
    expect(last.messages.filter((m) => m.role === Role.ROLE_TOOL).map((m) => m.content)).toEqual([shortened, results[1]!.content, results[2]!.content]);
    expect(shortened).toMatch(/^r0 000001 x+\n[^]*\n\n\[\.\.\. \d+ characters of this tool result left out to save context; run the tool again if you need them \.\.\.\]\n\n[^]*exit code: 0$/);
    // The request sent equals a fresh derivation from the log (the final assistant message aside).
    const derived = deriveRequest(events);
    expect(messagesJson({ messages: derived.messages.slice(0, -1) })).toBe(messagesJson(last));
    expect([extendsPrefix(requests[0]!, requests[1]!), extendsPrefix(requests[1]!, requests[2]!), extendsPrefix(requests[2]!, requests[3]!)]).toEqual([true, true, false]);
  });

  it("compaction - at the summarize threshold a summary replaces the conversation; the log keeps the originals and records range, model and cost", async () => {
    stepReply = (i) => (i < 4 ? { calls: [emit(`e${i}`, 4_000, `s${i}`)] } : { content: "done" });
    const usage = { inputMissTokens: 5_000, inputHitTokens: 400, outputTokens: 60, reasoningTokens: 0 };
    summaryReply = () => ({ content: "SUMMARY: the user asked to emit four times; four results came back.", usage, costUsd: 0.0012, model: "scripted-summarizer" });
    // 6,000 tokens fit the first six tools; tools appended to the standard list since are in every request too (4 characters a token).
    const first = ["read", "write", "edit", "glob", "grep", "bash"];
    const appended = listTools("standard").filter((t) => !first.includes(t.name)).reduce((n, t) => n + t.name.length + t.description.length + t.parametersJson.length, 0);
    const spentBefore = await new Budgets(bus, {}).tenantSpend("local");
    const { events } = await runTurn({ contextWindowTokens: 6_000 + Math.ceil(appended / 4 / 0.8), pruneAt: 0.8, summarizeAt: 0.8 }, "emit four times");
    completed(events);
    // The automatic summary's cost counts against the tenant's budget, as a step's does (the steps here cost nothing).
    expect(await new Budgets(bus, {}).tenantSpend("local") - spentBefore).toBeCloseTo(0.0012, 10);
    expect(requests.map(isSummary)).toEqual([false, false, false, false, true, false]);
    const summarized = events.find((e) => e.payload?.$case === "contextSummarized")!;
    const summary = events.find((e) => e.surface?.origin === "compaction:summary")!;
    const firstUser = events.find((e) => e.type === "user/message")!;
    const lastResult = toolResults(events).at(-1)!;
    expect(summarized.payload).toEqual({ $case: "contextSummarized", value: {
      fromSeq: firstUser.seq, toSeq: lastResult.seq, summarySeq: summary.seq, model: "scripted-summarizer", usage, costUsd: 0.0012, requestedBy: "",
    } });
    expect(summary.surface).toEqual({ kind: Surface_Kind.KIND_REPLACE, replaceFromSeq: firstUser.seq, replaceToSeq: lastResult.seq, sourceSeqs: [], origin: "compaction:summary" });
    expect(summary.payload).toEqual({ $case: "userMessage", value: { text: `${SUMMARY_HEADING}SUMMARY: the user asked to emit four times; four results came back.` } });
    // The summary request is the step's request plus the instruction, so it extends the previous request byte for byte.
    expect(extendsPrefix(requests[3]!, requests[4]!)).toBe(true);
    // The next request carries the summary in place of the whole range.
    expect(requests[5]!.messages.map((m) => [m.role, m.content])).toEqual([[Role.ROLE_USER, `${SUMMARY_HEADING}SUMMARY: the user asked to emit four times; four results came back.`]]);
    // The summary's reply is neither an assistant message nor its chunks; the originals are all still in the log.
    const texts = events.flatMap((e) => (e.payload?.$case === "assistantChunks" ? e.payload.value.deltas.map((d) => d.text) : e.payload?.$case === "assistantMessage" ? [e.payload.value.content] : []));
    expect(texts.filter((t) => t.includes("SUMMARY"))).toEqual([]);
    expect(firstUser.payload).toEqual({ $case: "userMessage", value: { text: "emit four times" } });
    expect(toolResults(events).map((r) => r.content)).toEqual([0, 1, 2, 3].map((i) => bashResult(4_000, `s${i}`)));
    expect(events.filter((e) => e.type === "assistant/message")).toHaveLength(5);
  });

  it("compaction - over 30 steps the prefix chain breaks exactly where the log records a compaction", async () => {
    const STEPS = 30;
    stepReply = (i) => (i < STEPS - 1 ? { calls: [emit(`e${i}`, 8_000, `p${i}`)] } : { content: "done" });
    summaryReply = (i) => ({ content: `Summary ${i + 1}: the files emitted so far were read.` });
    const { events } = await runTurn({ contextWindowTokens: 8_000, pruneAt: 0.5, pruneKeep: 0.15, pruneMinimum: 0.02, summarizeAt: 0.8, stepLimit: STEPS + 5 }, "emit many times");
    completed(events);
    const steps = requests.filter((r) => !isSummary(r));
    expect(steps).toHaveLength(STEPS);
    // Compaction events by step, from the log.
    const compactions = new Map<number, string[]>();
    let step = 0;
    for (const e of events) {
      if (e.payload?.$case === "stepStart") step = e.payload.value.step;
      if (e.type.startsWith("context/")) compactions.set(step, [...(compactions.get(step) ?? []), e.type]);
    }
    const kinds = [...compactions.values()].flat();
    expect(kinds.filter((k) => k === "context/pruned").length).toBeGreaterThanOrEqual(2);
    expect(kinds.filter((k) => k === "context/summarized").length).toBeGreaterThanOrEqual(2);
    for (let i = 1; i < STEPS; i++) {
      expect(extendsPrefix(steps[i - 1]!, steps[i]!), `step ${i + 1}: compaction ${compactions.get(i + 1)?.join(", ") ?? "none"}`).toBe(!compactions.has(i + 1));
      expect(steps[i]!.systemPrompt).toBe(steps[0]!.systemPrompt);
      expect(JSON.stringify(steps[i]!.tools)).toBe(JSON.stringify(steps[0]!.tools));
    }
    // Each summary request is the model's view at that point (after any prune) plus the instruction.
    const summaries = events.filter((e) => e.surface?.origin === "compaction:summary");
    expect(summaries.length).toBe(requests.filter(isSummary).length);
    requests.filter(isSummary).forEach((r, i) => {
      const view = deriveRequest(events.slice(0, events.indexOf(summaries[i]!))).messages;
      expect(messagesJson(r)).toBe(messagesJson({ messages: [...view, ChatMessage.fromPartial({ role: Role.ROLE_USER, content: SUMMARY_INSTRUCTION })] }));
    });
  });
});

describe("compaction asked for", () => {
  it("compaction - CompactSession summarizes now with the person's instructions: the same events as at the threshold; refused while a turn runs; then nothing to compact", async () => {
    stepReply = () => ({ content: "done" });
    summaryReply = () => ({ content: "SUMMARY of the work", costUsd: 0.002, model: "scripted-summary" });
    const { sessionId, events } = await runTurn({}, `first task ${"with details ".repeat(50)}`);
    const compact = (instructions = "") => bus.request(LoopRpc.CompactSession, { tenant: "local", sessionId, compactedBy: "test", instructions });
    const view = deriveRequest(events).messages;
    const projection = new Projection();
    for (const e of events) projection.apply(e);
    const entries = projection.entries();

    const done = await compact("keep the file names");
    expect(done).toMatchObject({ compacted: true, note: "", fromSeq: entries[0]!.seq, toSeq: entries.at(-1)!.seq, seq: events.length + 2, costUsd: 0.002 });
    expect(done.tokensAfter).toBeLessThan(done.tokensBefore);
    // The summary request is the model's view plus the instruction, with the person's words in it.
    const asked = requests.filter(isSummary);
    expect(asked).toHaveLength(1);
    expect(messagesJson(asked[0]!)).toBe(messagesJson({ messages: [...view, ChatMessage.fromPartial({ role: Role.ROLE_USER, content: compactInstruction("keep the file names") })] }));
    expect(asked[0]!.messages.at(-1)!.content).toMatch(/The user's instructions for the summary: keep the file names$/);
    const after = await readAll(bus.nc, bus.names, { tenant: "local", sessionId });
    expect(after.slice(events.length).map((e) => e.type)).toEqual(["user/message", "context/summarized"]);
    expect(after.at(-2)!.surface).toMatchObject({ kind: Surface_Kind.KIND_REPLACE, replaceFromSeq: done.fromSeq, replaceToSeq: done.toSeq, origin: "compaction:summary" });
    expect(after.at(-1)!.payload).toMatchObject({ $case: "contextSummarized", value: { fromSeq: done.fromSeq, toSeq: done.toSeq, summarySeq: events.length + 1, model: "scripted-summary", costUsd: 0.002, requestedBy: "test" } });
    expect(deriveRequest(after).messages.map((m) => m.content)).toEqual([`${SUMMARY_HEADING}SUMMARY of the work`]);

    expect(await compact()).toMatchObject({ compacted: false, seq: 0, note: expect.stringContaining("nothing to compact") });
    expect(await readAll(bus.nc, bus.names, { tenant: "local", sessionId })).toHaveLength(after.length);

    // A turn holds the session: the compaction is refused, and the turn goes on.
    let open!: () => void;
    llmGate = new Promise((resolve) => (open = resolve));
    await bus.request(LoopRpc.SubmitMessage, { tenant: "local", sessionId, text: "next" });
    const refused = await compact().then(() => undefined, (error: unknown) => error as { code: string; message: string; retryable: boolean });
    expect(refused).toMatchObject({ code: "loop.compact_busy", retryable: true, message: expect.stringContaining("wait for the turn to end or cancel it") });
    open();
    llmGate = Promise.resolve();
    const second = await waitFor("the second turn's end", async () => {
      const all = await readAll(bus.nc, bus.names, { tenant: "local", sessionId });
      return all.filter((e) => e.type === "turn/end").length === 2 && all;
    }, { timeoutMs: 20_000, intervalMs: 50 });
    completed(second);
    // The next turn's request starts from the summary.
    expect(requests.at(-1)!.messages[0]!.content).toBe(`${SUMMARY_HEADING}SUMMARY of the work`);
  });
});

describe("Compactor", () => {
  const settings: CompactionSettings = {
    spillBytes: 1_000, spillPreviewChars: 100, contextWindowTokens: 10_000, contextWindows: { "deepseek:big": 1_000_000 }, pruneAt: 0.5,
    pruneHeadChars: 4_096, pruneTailChars: 1_024, pruneKeep: 0.3, pruneMinimum: 0.05, summarizeAt: 0.8,
  };
  const address = { tenant: "local", sessionId: "unit" };
  const quiet: Logger = { info: () => undefined, warn: () => undefined, error: () => undefined, child: () => quiet };
  const spills = () => SpillBucket.ensure(bus.nc, bus.names);

  it("Compactor - a result up to the threshold is logged as it is; one byte more is spilled (bytes, not characters)", async () => {
    const c = new Compactor(settings, address, spills, quiet);
    expect(await c.spill("a", "é".repeat(500))).toEqual({ content: "é".repeat(500), spillObject: "", fullBytes: 0 });
    const over = await c.spill("b", `${"é".repeat(500)}x`);
    expect(over).toMatchObject({ spillObject: "local.unit.b", fullBytes: 1_001 });
    // No line break in the head: the preview is cut at 100 characters.
    expect(over.content.startsWith(`${"é".repeat(100)}\n\n[Result too large for the context: 1001 bytes in total, the 801 bytes after this preview`)).toBe(true);
    expect(over.content).toContain('It has 1 line; read the rest with the read tool, path "tack-spill:b", offset 1.]');
  });

  it("Compactor - when the object store cannot take the result, the model still gets the preview and a way forward", async () => {
    const c = new Compactor(settings, address, () => Promise.reject(new Error("object store down")), quiet);
    const result = await c.spill("c", `${"line\n".repeat(300)}`);
    expect(result).toEqual({
      spillObject: "", fullBytes: 1_500,
      content: `${"line\n".repeat(19)}line\n\n[Result too large for the context: 1500 bytes in total, and the 1400 bytes after this preview could not be stored. `
        + "Run the command again with its output redirected to a file, then read that file in parts.]",
    });
  });

  it("Compactor - tokens are characters / 4 until the provider reports more per character; windows are per model", () => {
    const c = new Compactor(settings, address, spills, quiet);
    const request = { model: "m", systemPrompt: "s".repeat(400), tools: [], temperature: 0, maxTokens: 1, messages: [ChatMessage.fromPartial({ role: Role.ROLE_USER, content: "u".repeat(600) })] };
    expect(c.estimate(request)).toBe(250);
    c.observe(request, { inputMissTokens: 10, inputHitTokens: 0, outputTokens: 1, reasoningTokens: 0 });
    expect(c.estimate(request)).toBe(250); // fewer reported tokens never lower the estimate below characters / 4
    c.observe(request, { inputMissTokens: 300, inputHitTokens: 300, outputTokens: 1, reasoningTokens: 0 });
    expect(c.estimate(request)).toBe(600); // e.g. Chinese text: about a token per character
    expect([c.windowOf("deepseek:big"), c.windowOf("other:model")]).toEqual([1_000_000, 10_000]);
  });
});
