import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { removeNamespace, waitFor as waitForValue } from "@tack/testkit";
import { Bus, LlmRpc, LoopRpc, ToolsRpc } from "@tack/bus";
import { ensureLogStream, isCase, readAll, type EventOf } from "@tack/log";
import { CallToolResponse, ChatMessage, CompleteRequest, CreateSessionRequest, Event, ReadRulesRequest, Role, type RulesFile, type ToolCall } from "@tack/proto";
import { listTools } from "@tack/tools-service";
import { startLoopService, SUMMARY_INSTRUCTION, type LoopOptions, type LoopService } from "@tack/loop-service";
import { readRules } from "../../tools/src/rules.js";
import { LocalSandboxClient } from "../../tools/test/support/local-sandbox.js";

// Rules files against real NATS JetStream: a scripted model, scripted tool results, and tools.rules
// answered by the tools service's own reader running its script on this host in a temp workspace.
const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const namespace = `r${randomBytes(5).toString("hex")}`;
const HEADING = "These are the project's instructions from its rules files (AGENTS.md, CLAUDE.md); follow them. They replace any rules given earlier in this conversation.";
let bus: Bus;
let loops: LoopService[] = [];
let workspaces: string[] = [];

type Call = { name: string; args: Record<string, unknown> };
/** Replies of the scripted model; `replies[n]` answers a request holding n assistant messages. */
let replies: Call[][] = [];
let requests: CompleteRequest[] = [];
let rulesReads: ReadRulesRequest[] = [];

beforeAll(async () => {
  bus = await Bus.connect({ url: NATS_URL, namespace, name: "rules-test" });
  await ensureLogStream(bus.nc, bus.names);
  bus.serve(LlmRpc.Complete, async (req, w) => {
    requests.push(req);
    if (req.messages.at(-1)?.content === SUMMARY_INSTRUCTION) {
      w.send({ index: 0, body: { $case: "done", value: { content: "SUMMARY", reasoningContent: "", toolCalls: [], finishReason: "stop", usage: undefined, model: "scripted", costUsd: 0, priceWindow: "" } } });
      return;
    }
    const n = req.messages.filter((m) => m.role === Role.ROLE_ASSISTANT).length;
    // After a summary the model has what it needs: it ends the turn.
    const summarized = req.messages.some((m) => m.content.endsWith("SUMMARY"));
    const toolCalls: ToolCall[] = (summarized ? [] : replies[n] ?? []).map((c, i) => ({ id: `call_${n}_${i}`, name: c.name, arguments: JSON.stringify(c.args) }));
    w.send({ index: 0, body: { $case: "done", value: {
      content: toolCalls.length ? "" : "done", reasoningContent: "", toolCalls, finishReason: toolCalls.length ? "tool_calls" : "stop",
      usage: undefined, model: "scripted", costUsd: 0, priceWindow: "",
    } } });
  });
  bus.serve(LlmRpc.CheckModel, async () => ({ provider: "scripted" }));
  bus.serve(ToolsRpc.ListTools, async (req) => ({ tools: listTools(req.mode, req.defined) }));
  bus.serve(ToolsRpc.CallTool, async (req) => CallToolResponse.fromPartial({ content: `ran ${req.name}`, durationMs: 1 }));
  bus.serve(ToolsRpc.ReadRules, async (req) => {
    rulesReads.push(req);
    return readRules(req, new LocalSandboxClient(req.workspace), new AbortController().signal);
  });
});

afterEach(async () => {
  await Promise.all(loops.map((l) => l.stop()));
  for (const w of workspaces) rmSync(w, { recursive: true, force: true });
  delete process.env.TACK_RULES_FILES;
  loops = [];
  workspaces = [];
  replies = [];
  requests = [];
  rulesReads = [];
});

afterAll(async () => {
  await removeNamespace(bus.nc, bus.names.namespace);
  await bus.close();
});

/** A workspace holding `files` (relative path → content), a loop, and a session on it. */
async function session(files: Record<string, string | Buffer>, options: Partial<LoopOptions> = {}): Promise<{ id: string; workspace: string; write: (path: string, content: string | Buffer) => void }> {
  const workspace = mkdtempSync(join(tmpdir(), "tack-rules-"));
  workspaces.push(workspace);
  const write = (path: string, content: string | Buffer) => {
    mkdirSync(join(workspace, path, ".."), { recursive: true });
    writeFileSync(join(workspace, path), content);
  };
  for (const [path, content] of Object.entries(files)) write(path, content);
  loops.push(await startLoopService({ natsUrl: NATS_URL, namespace, leaseTtlMs: 1_000, prewarmSandbox: false, ...options }));
  const created = await bus.request(LoopRpc.CreateSession, CreateSessionRequest.fromPartial({
    tenant: "local", model: "scripted:test", workspace, sandboxMode: "workspace-write",
  }));
  return { id: created.sessionId, workspace, write };
}

async function submit(sessionId: string, text = "go"): Promise<void> {
  await bus.request(LoopRpc.SubmitMessage, { tenant: "local", sessionId, text });
}

function turnsEnded(sessionId: string, count: number): Promise<Event[]> {
  return waitForValue(`${count} turn/end in the log of ${sessionId}`, async () => {
    const events = await readAll(bus.nc, bus.names, { tenant: "local", sessionId });
    return events.filter((e) => e.type === "turn/end").length >= count && events;
  }, { timeoutMs: 15_000, intervalMs: 30 });
}

const loaded = (events: Event[]) => events.filter((e): e is EventOf<"rulesLoaded"> => isCase(e, "rulesLoaded"));
const labels = (files: RulesFile[]) => files.map((f) => f.label);
const userTexts = (req: CompleteRequest) => req.messages.filter((m) => m.role === Role.ROLE_USER).map((m) => m.content);
const block = (label: string, content: string) => `<rules source="${label}">\n${content}\n</rules>`;

/** Every request starts with the whole of the one before it (same header, same messages byte for byte). */
function expectPrefixStable(all: CompleteRequest[]): void {
  for (let i = 1; i < all.length; i++) {
    const [a, b] = [all[i - 1]!, all[i]!];
    expect(b.systemPrompt).toBe(a.systemPrompt);
    expect(JSON.stringify(b.tools)).toBe(JSON.stringify(a.tools));
    expect(b.messages.slice(0, a.messages.length).map((m) => ChatMessage.toJSON(m))).toEqual(a.messages.map((m) => ChatMessage.toJSON(m)));
  }
}

describe("rules files", () => {
  it("rules - the root's rules reach the first request once; identical AGENTS.md and CLAUDE.md count once; nothing is re-logged across steps and turns", async () => {
    const { id } = await session({ "AGENTS.md": "Use tabs.\n", "CLAUDE.md": "Use tabs.\n", "x.txt": "x" });
    replies = [[{ name: "read", args: { path: "x.txt" } }], [], []];
    await submit(id);
    await turnsEnded(id, 1);
    await submit(id, "again");
    const events = await turnsEnded(id, 2);

    const rules = loaded(events);
    expect(rules).toHaveLength(1);
    expect(rules[0]!.payload.value.files).toEqual([{ label: "AGENTS.md", content: "Use tabs.\n", sha256: expect.stringMatching(/^[0-9a-f]{64}$/), truncated: false }]);
    expect(rules[0]!.surface).toMatchObject({ origin: "rules" });
    expect(requests).toHaveLength(3);
    // Logged where it was loaded: right after the first user message.
    expect(userTexts(requests[0]!)).toEqual(["go", `${HEADING}\n\n${block("AGENTS.md", "Use tabs.")}`]);
    expectPrefixStable(requests);
    // Read again at the second turn (and not at the step after a read of a root file).
    expect(rulesReads.map((r) => r.dirs)).toEqual([["."], ["."]]);
  });

  it("rules - a changed AGENTS.md is logged again at the next turn, as a whole new list after the old one", async () => {
    const { id, write } = await session({ "AGENTS.md": "v1" });
    await submit(id);
    await turnsEnded(id, 1);
    write("AGENTS.md", "v2");
    await submit(id, "again");
    const events = await turnsEnded(id, 2);
    expect(loaded(events).map((e) => e.payload.value.files.map((f) => f.content))).toEqual([["v1"], ["v2"]]);
    expect(userTexts(requests[1]!)).toEqual(["go", `${HEADING}\n\n${block("AGENTS.md", "v1")}`, "again", `${HEADING}\n\n${block("AGENTS.md", "v2")}`]);
    expectPrefixStable(requests);
  });

  it("rules - a nested CLAUDE.md appears after a read of a file in its folder, and not before", async () => {
    const { id } = await session({ "AGENTS.md": "root", "src/api/CLAUDE.md": "api rules", "src/api/h.ts": "x", "other/CLAUDE.md": "never touched" });
    replies = [[{ name: "read", args: { path: "/workspace/src/api/h.ts" } }], []];
    await submit(id);
    const events = await turnsEnded(id, 1);
    expect(loaded(events).map((e) => labels(e.payload.value.files))).toEqual([["AGENTS.md"], ["AGENTS.md", "src/api/CLAUDE.md"]]);
    // The second list follows the read's result: the model reads it before its next step.
    const second = requests[1]!.messages;
    expect(second.map((m) => m.role)).toEqual([Role.ROLE_USER, Role.ROLE_USER, Role.ROLE_ASSISTANT, Role.ROLE_TOOL, Role.ROLE_USER]);
    expect(second.at(-1)!.content).toBe(`${HEADING}\n\n${block("AGENTS.md", "root")}\n\n${block("src/api/CLAUDE.md", "api rules")}`);
    expect(rulesReads.at(-1)!.dirs).toEqual([".", "src", "src/api"]);
    expectPrefixStable(requests);
  });

  it("rules - a summary that replaced the rules message is followed by the same rules again, so the model keeps them", async () => {
    const text = `${"Keep every line under 100 characters. ".repeat(200)}end`;
    const { id } = await session({ "AGENTS.md": text, "x.txt": "x" }, { contextWindowTokens: 8_000, pruneAt: 0.6, summarizeAt: 0.6 });
    replies = [[{ name: "read", args: { path: "x.txt" } }], []];
    await submit(id);
    const events = await turnsEnded(id, 1);
    const summary = events.find((e) => e.surface?.origin === "compaction:summary")!;
    const rules = loaded(events);
    expect(rules.map((e) => e.seq > summary.seq)).toEqual([false, true]);
    expect(rules[1]!.payload.value).toEqual(rules[0]!.payload.value);
    const last = requests.at(-1)!;
    expect(last.messages.map((m) => m.role)).toEqual([Role.ROLE_USER, Role.ROLE_USER]);
    expect(last.messages[1]!.content).toBe(`${HEADING}\n\n${block("AGENTS.md", text)}`);
  });

  it("rules - a binary rules file is one rules/warning naming it (not repeated at the next turn), and the session goes on", async () => {
    const { id } = await session({ "AGENTS.md": "text rules", "CLAUDE.md": Buffer.from([0x7f, 0x45, 0x4c, 0x46, 0, 0, 1]) });
    await submit(id);
    await turnsEnded(id, 1);
    await submit(id, "again");
    const events = await turnsEnded(id, 2);
    const warnings = events.filter((e) => e.type === "rules/warning").map((e) => e.payload);
    expect(warnings).toEqual([{ $case: "rulesWarning", value: {
      label: "CLAUDE.md", message: "rules file /workspace/CLAUDE.md is not UTF-8 text (binary?); it was left out (rules files must be text)",
    } }]);
    expect(loaded(events).map((e) => labels(e.payload.value.files))).toEqual([["AGENTS.md"]]);
    expect(events.filter((e) => isCase(e, "turnEnd")).map((e) => isCase(e, "turnEnd") && e.payload.value.reason)).toEqual(["completed", "completed"]);
  });

  it("rules - an operator file (TACK_RULES_FILES) comes first; deleting the workspace's file logs the shorter list, deleting all logs an explicit retraction", async () => {
    const { id, workspace } = await session({ "AGENTS.md": "project" });
    const operator = join(workspace, "..", `op-${randomBytes(4).toString("hex")}.md`);
    workspaces.push(operator);
    writeFileSync(operator, "operator rules");
    process.env.TACK_RULES_FILES = operator;
    await submit(id);
    await turnsEnded(id, 1);
    rmSync(join(workspace, "AGENTS.md"));
    await submit(id, "two");
    await turnsEnded(id, 2);
    rmSync(operator);
    delete process.env.TACK_RULES_FILES;
    await submit(id, "three");
    const events = await turnsEnded(id, 3);
    expect(loaded(events).map((e) => labels(e.payload.value.files))).toEqual([[`operator:${operator}`, "AGENTS.md"], [`operator:${operator}`], []]);
    expect(userTexts(requests.at(-1)!).at(-1)).toBe("The project's rules files no longer apply: disregard the instructions of the earlier rules message.");
    expectPrefixStable(requests);
  });
});
