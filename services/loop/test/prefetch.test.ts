import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createHash, randomBytes } from "node:crypto";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { removeNamespace, waitFor } from "@tack/testkit";
import { Bus, LlmRpc, LoopRpc, McpRpc, SandboxRpc, SkillsRpc, TackError, ToolsRpc } from "@tack/bus";
import { ensureLogStream, readAll } from "@tack/log";
import { CallToolResponse, ChatMessage, CompleteRequest, CreateSessionRequest, ListMcpToolsResponse, Role, RunHookResponse, SkillCatalogResponse, SubmitMessageResponse, type Event, type ToolCall } from "@tack/proto";
import { listTools } from "@tack/tools-service";
import { FIRST_STEP_FRESH_MS } from "../src/session.js";
import { startLoopService, type LoopService } from "@tack/loop-service";

// What a new session reads at its creation (alongside the sandbox pre-warm): the hooks snapshot,
// the tool list, and the first step's rules, skills catalog and MCP tools. Real NATS JetStream and
// the real loop; the model, the tools service (hooks files, hook runs, rules), the skills service,
// the MCP bridge and the sandbox are answered on the bus by the test, which counts each request.
const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const namespace = `p${randomBytes(5).toString("hex")}`;
const workspace = mkdtempSync(join(tmpdir(), "tack-prefetch-"));
let bus: Bus;
let loops: LoopService[] = [];

const HOOKS = JSON.stringify({ hooks: {
  SessionStart: [{ hooks: [{ type: "command", command: "echo started" }] }],
  UserPromptSubmit: [{ hooks: [{ type: "command", command: "echo ticket TACK-1" }] }],
  PreToolUse: [{ matcher: "Task", hooks: [{ type: "command", command: "true" }] }],
} });
const AGENTS = "Run the tests before you say you are done.\n";
const CATALOG = SkillCatalogResponse.fromPartial({
  entries: [{ name: "review", description: "Review a change.", source: { root: "workspace" }, modelInvocable: true, userInvocable: true }], digest: "d1",
});
const MCP = ListMcpToolsResponse.fromPartial({
  tools: [{ publicName: "mcp__kb__search", server: "kb", tool: "search", description: "Search.", parametersJson: '{"type":"object"}', approval: "never" }],
  servers: [{ name: "kb", state: "ready", error: "", tools: ["mcp__kb__search"], warnings: [], source: "workspace:.mcp.json", transport: "stdio" }],
});

/** Requests each service got, by subject name. */
let counts: Record<string, number> = {};
let requests: CompleteRequest[] = [];
/** How long the hooks files read takes (the exec in the sandbox). */
let hookReadMs = 0;
const count = (name: string) => {
  counts[name] = (counts[name] ?? 0) + 1;
};

beforeAll(async () => {
  bus = await Bus.connect({ url: NATS_URL, namespace, name: "prefetch-test" });
  await ensureLogStream(bus.nc, bus.names);
  bus.serve(LlmRpc.Complete, async (req, w) => {
    requests.push(req);
    const n = req.messages.filter((m) => m.role === Role.ROLE_ASSISTANT).length;
    // Each turn: one step with a bash call, then a reply.
    const calls: ToolCall[] = n % 2 === 0 ? [{ id: `call_${n}_0`, name: "bash", arguments: JSON.stringify({ command: "true" }) }] : [];
    w.send({ index: 0, body: { $case: "done", value: {
      content: calls.length ? "" : "done", reasoningContent: "", toolCalls: calls, finishReason: calls.length ? "tool_calls" : "stop",
      usage: undefined, model: "scripted", costUsd: 0, priceWindow: "",
    } } });
  });
  bus.serve(LlmRpc.CheckModel, async () => ({ provider: "scripted" }));
  bus.serve(ToolsRpc.ListTools, async (req) => {
    count(`toolsList:${req.mode}`);
    return { tools: listTools(req.mode, req.defined) };
  });
  bus.serve(ToolsRpc.CallTool, async (req) => CallToolResponse.fromPartial({ content: `ran ${req.name}`, durationMs: 1 }));
  bus.serve(ToolsRpc.ReadHooksConfig, async () => {
    count("hookConfig");
    await new Promise((r) => setTimeout(r, hookReadMs));
    return { files: [{ path: ".claude/settings.json", content: Buffer.from(HOOKS), error: "" }] };
  });
  bus.serve(ToolsRpc.RunHook, async (req) => {
    count("hookRun");
    return RunHookResponse.fromPartial({ exitCode: 0, stdout: req.command.replace(/^echo /, ""), durationMs: 1 });
  });
  bus.serve(ToolsRpc.ReadRules, async () => {
    count("rules");
    return { files: [{ path: "AGENTS.md", content: Buffer.from(AGENTS), bytes: Buffer.byteLength(AGENTS), sha256: createHash("sha256").update(AGENTS).digest("hex"), error: "" }] };
  });
  bus.serve(SkillsRpc.Catalog, async () => {
    count("skillsCatalog");
    return CATALOG;
  });
  bus.serve(McpRpc.ListTools, async () => {
    count("mcpList");
    return MCP;
  });
  bus.serve(SandboxRpc.EnsureSandbox, async () => {
    count("sandboxEnsure");
    return { containerId: "c1", created: false, runtime: "runc" };
  });
});

afterEach(async () => {
  await Promise.all(loops.map((l) => l.stop()));
  loops = [];
  counts = {};
  requests = [];
  hookReadMs = 0;
});

afterAll(async () => {
  await removeNamespace(bus.nc, bus.names.namespace);
  await bus.close();
  rmSync(workspace, { recursive: true, force: true });
});

async function startLoop(prewarmSandbox = true): Promise<LoopService> {
  const loop = await startLoopService({ natsUrl: NATS_URL, namespace, leaseTtlMs: 1_000, prewarmSandbox });
  loops.push(loop);
  return loop;
}

async function create(): Promise<string> {
  const r = await bus.request(LoopRpc.CreateSession, CreateSessionRequest.fromPartial({ tenant: "local", model: "scripted:test", workspace }));
  return r.sessionId;
}

/**
 * Sends a message. Right after a turn's `turn/end` is logged the loop may still be closing that
 * turn (the Stop hook, its bookkeeping) and refuses with `loop.busy` (retryable): sent again then.
 */
async function submit(sessionId: string, text: string): Promise<SubmitMessageResponse> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    try {
      return await bus.request(LoopRpc.SubmitMessage, { tenant: "local", sessionId, text });
    } catch (error) {
      if (!(error instanceof TackError && error.code === "loop.busy") || Date.now() > deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
}

function turnEnds(sessionId: string, turns: number): Promise<Event[]> {
  return waitFor(`${turns} turn/end event(s) of ${sessionId}`, async () => {
    const events = await readAll(bus.nc, bus.names, { tenant: "local", sessionId });
    return events.filter((e) => e.type === "turn/end").length >= turns && events;
  }, { timeoutMs: 15_000, intervalMs: 25 });
}

/** The events as the session's readers see them, without what differs between two sessions (ids, times). */
function shape(events: Event[], sessionId: string): unknown[] {
  return events.map((e) => JSON.parse(JSON.stringify({ type: e.type, payload: e.payload, surface: e.surface, source: e.source }).replaceAll(sessionId, "<id>")) as unknown)
    .map((e) => {
      const value = (e as { payload: { value: Record<string, unknown> } }).payload.value;
      for (const key of ["durationMs", "createdAtMs"]) delete value[key];
      return e;
    });
}

/** What the provider receives: system prompt, tools and messages, serialized. */
const sent = (r: CompleteRequest) => JSON.stringify({ system: r.systemPrompt, tools: r.tools, messages: r.messages.map((m) => ChatMessage.toJSON(m)) });

describe("reads at session creation", () => {
  it("prefetch - hooks, tools, rules, skills and MCP tools are read at creation and used by the first turn; the log and the requests are the same as without", async () => {
    await startLoop(true);
    const id = await create();
    // Started at creation, before any message.
    await waitFor("the reads at creation", async () => ["hookConfig", "toolsList:standard", "rules", "skillsCatalog", "mcpList", "sandboxEnsure"].every((k) => counts[k] === 1), { timeoutMs: 5_000, intervalMs: 10 });
    await submit(id, "go");
    await turnEnds(id, 1);
    // Nothing read again for the first turn: its first step took what creation read (its second step asks the extensions as every step does).
    expect(counts).toMatchObject({ hookConfig: 1, "toolsList:standard": 1, rules: 1, skillsCatalog: 2, mcpList: 2 });
    await submit(id, "again");
    const events = await turnEnds(id, 2);
    // The hooks are the session's snapshot: not read again at the next turn; the rules are, at each turn.
    expect(counts).toMatchObject({ hookConfig: 1, "toolsList:standard": 1, rules: 2, skillsCatalog: 4, mcpList: 4 });
    const withReads = { events: shape(events, id), requests: requests.map(sent) };
    expect(events.filter((e) => e.type === "hook/invoked").map((e) => e.payload?.$case === "hookInvoked" && e.payload.value.hookEvent)).toEqual(["SessionStart", "UserPromptSubmit", "UserPromptSubmit"]);
    expect(events.filter((e) => e.type === "hook/warning")).toHaveLength(1);
    await Promise.all(loops.map((l) => l.stop()));
    loops = [];
    requests = [];
    counts = {};

    // The same session on a loop that reads nothing at creation: the same events in the same order, the same requests byte for byte.
    await startLoop(false);
    const plain = await create();
    await new Promise((r) => setTimeout(r, 100));
    expect(counts).toEqual({});
    await submit(plain, "go");
    await turnEnds(plain, 1);
    await submit(plain, "again");
    const plainEvents = await turnEnds(plain, 2);
    expect(shape(plainEvents, plain)).toEqual(withReads.events);
    expect(requests.map(sent)).toEqual(withReads.requests);
    expect(withReads.requests[0]).toContain("mcp__kb__search");
    expect(withReads.requests[0]).toContain("Run the tests before you say you are done.");
  });

  it("prefetch - a message that arrives while the hooks files are still being read waits for that read, and nothing is read twice", async () => {
    await startLoop(true);
    hookReadMs = 400;
    const id = await create();
    const sentAt = Date.now();
    await submit(id, "go");
    const events = await turnEnds(id, 1);
    expect(counts.hookConfig).toBe(1);
    const start = events.find((e) => e.type === "turn/start")!;
    const firstHook = events.find((e) => e.type === "hook/invoked")!;
    // The hooks ran once the read (started at creation, 400 ms) was done, after the turn started.
    expect(firstHook.seq).toBeGreaterThan(start.seq);
    expect(Date.now() - sentAt).toBeGreaterThanOrEqual(300);
    expect(events.filter((e) => e.type === "hook/context").map((e) => e.payload?.$case === "hookContext" && e.payload.value.text)).toEqual(["started", "ticket TACK-1"]);
  });

  it("prefetch - a first message later than FIRST_STEP_FRESH_MS has the rules and extensions read again; the hooks snapshot stays", async () => {
    await startLoop(true);
    const id = await create();
    await waitFor("the reads at creation", async () => counts.rules === 1 && counts.skillsCatalog === 1 && counts.hookConfig === 1, { timeoutMs: 5_000, intervalMs: 10 });
    await new Promise((r) => setTimeout(r, FIRST_STEP_FRESH_MS + 200));
    await submit(id, "go");
    await turnEnds(id, 1);
    expect(counts).toMatchObject({ hookConfig: 1, rules: 2, skillsCatalog: 3, mcpList: 3, "toolsList:standard": 1 });
  }, 30_000);

  it("prefetch - a mode changed between creation and the first message gets that mode's tools, not the list read at creation", async () => {
    await startLoop(true);
    const id = await create();
    await waitFor("the reads at creation", async () => counts["toolsList:standard"] === 1 && counts.skillsCatalog === 1, { timeoutMs: 5_000, intervalMs: 10 });
    await bus.request(LoopRpc.SetSessionMode, { tenant: "local", sessionId: id, mode: "minimal", changedBy: "test" });
    await submit(id, "go");
    const events = await turnEnds(id, 1);
    const header = events.find((e) => e.payload?.$case === "requestHeader")!;
    const names = header.payload?.$case === "requestHeader" ? header.payload.value.tools.map((t) => t.name) : [];
    expect(names).toEqual(listTools("minimal").map((t) => t.name));
    expect(events.some((e) => e.type === "skills/catalog")).toBe(false);
  });

  it("prefetch - a session another loop takes over reads its hooks again (the snapshot is rebuilt there) and runs them", async () => {
    await startLoop(true);
    const id = await create();
    await submit(id, "go");
    await turnEnds(id, 1);
    expect(counts.hookConfig).toBe(1);
    // This loop goes away (its leases released), another one gets the next message.
    await loops[0]!.stop();
    loops = [];
    await startLoop(true);
    await submit(id, "again");
    let events = await turnEnds(id, 2);
    expect(counts.hookConfig).toBe(2);
    const invoked = () => events.filter((e) => e.type === "hook/invoked").map((e) => e.payload?.$case === "hookInvoked" && e.payload.value.hookEvent);
    expect(invoked()).toEqual(["SessionStart", "UserPromptSubmit", "UserPromptSubmit"]);
    await submit(id, "once more");
    events = await turnEnds(id, 3);
    expect(counts.hookConfig).toBe(2);
    expect(invoked()).toEqual(["SessionStart", "UserPromptSubmit", "UserPromptSubmit", "UserPromptSubmit"]);
  });
});
