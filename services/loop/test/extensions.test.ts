import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { removeNamespace, waitFor as waitForValue } from "@tack/testkit";
import { Bus, LlmRpc, LoopRpc, McpRpc, TackError, ToolsRpc } from "@tack/bus";
import { ensureLogStream, isCase, readAll, skillsCatalogText, type EventOf } from "@tack/log";
import { CallMcpToolRequest, CallToolRequest, CallToolResponse, ChatMessage, CompleteRequest, CreateSessionRequest, Event, ListMcpToolsResponse, Role, SubmitMessageResponse, type ToolCall } from "@tack/proto";
import { listTools } from "@tack/tools-service";
import { startSkillsService, type SkillsService } from "@tack/skills-service";
import { startLoopService, type LoopService } from "@tack/loop-service";

// Skills and MCP tools in the loop against real NATS JetStream and the real skills service (files in
// temp folders). The model is scripted; the tools service and the MCP bridge are answered on the bus
// by the test (the bridge itself has its own tests against real MCP servers; test/e2e/extensions.test.ts
// runs them together).
const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const namespace = `x${randomBytes(5).toString("hex")}`;
let bus: Bus;
let skills: SkillsService;
let home: string;
let loops: LoopService[] = [];
let workspaces: string[] = [];

type Call = { name: string; args: Record<string, unknown> };
/** Replies of the scripted model; `replies[n]` answers a request holding n assistant messages. */
let replies: Call[][] = [];
let requests: CompleteRequest[] = [];
let toolCalls: CallToolRequest[] = [];
let mcpCalls: CallMcpToolRequest[] = [];
/** What a `write` call writes on the host (the test stands in for the sandbox). */
let onWrite: ((req: CallToolRequest) => void) | undefined;

const MCP_TOOLS = [
  { publicName: "mcp__kb__search", server: "kb", tool: "search", description: "Search the knowledge base.", parametersJson: '{"type":"object","properties":{"q":{"type":"string"}}}', approval: "never" },
  { publicName: "mcp__deploy__ship", server: "deploy", tool: "ship", description: "Ship a build.", parametersJson: '{"type":"object","properties":{"env":{"type":"string"}}}', approval: "ask" },
];

beforeAll(async () => {
  bus = await Bus.connect({ url: NATS_URL, namespace, name: "extensions-test" });
  await ensureLogStream(bus.nc, bus.names);
  home = mkdtempSync(join(tmpdir(), "tack-ext-home-"));
  // A long debounce: a catalog that changes at once after a write shows the loop's invalidate did it, not the watcher.
  skills = await startSkillsService({ natsUrl: NATS_URL, namespace, home, operatorRoots: [], debounceMs: 60_000 });
  bus.serve(LlmRpc.Complete, async (req, w) => {
    requests.push(req);
    const n = req.messages.filter((m) => m.role === Role.ROLE_ASSISTANT).length;
    const calls: ToolCall[] = (replies[n] ?? []).map((c, i) => ({ id: `call_${n}_${i}`, name: c.name, arguments: JSON.stringify(c.args) }));
    w.send({ index: 0, body: { $case: "done", value: {
      content: calls.length ? "" : "done", reasoningContent: "", toolCalls: calls, finishReason: calls.length ? "tool_calls" : "stop",
      usage: undefined, model: "scripted", costUsd: 0, priceWindow: "",
    } } });
  });
  bus.serve(LlmRpc.CheckModel, async () => ({ provider: "scripted" }));
  bus.serve(ToolsRpc.ListTools, async (req) => ({ tools: listTools(req.mode, req.defined) }));
  bus.serve(ToolsRpc.CallTool, async (req) => {
    toolCalls.push(req);
    if (req.name === "write") onWrite?.(req);
    return CallToolResponse.fromPartial({ content: `ran ${req.name}`, durationMs: 1 });
  });
  bus.serve(ToolsRpc.ReadRules, async () => ({ files: [] }));
  bus.serve(McpRpc.ListTools, async () => ListMcpToolsResponse.fromPartial({
    tools: MCP_TOOLS,
    servers: [
      { name: "kb", state: "ready", error: "", tools: ["mcp__kb__search"], warnings: [], source: "user:~/.tack/mcp.json", transport: "stdio" },
      { name: "deploy", state: "ready", error: "", tools: ["mcp__deploy__ship"], warnings: ['MCP server "deploy" changed tool "ship" (description)'], source: "workspace:.mcp.json", transport: "http" },
      { name: "broken", state: "failed", error: "exited at start with code 1", tools: [], warnings: [], source: "workspace:.mcp.json", transport: "stdio" },
    ],
  }));
  bus.serve(McpRpc.CallTool, async (req) => {
    mcpCalls.push(req);
    return { content: `found for ${req.argumentsJson}\n[image: image/png, 3 KB]`, isError: false, rawJson: '{"content":[{"type":"text","text":"found"},{"type":"image","mimeType":"image/png","data":"AAAA"}]}', durationMs: 2, server: req.publicName.split("__")[1]!, tool: req.publicName.split("__")[2]! };
  });
});

afterEach(async () => {
  await Promise.all(loops.map((l) => l.stop()));
  for (const w of workspaces) rmSync(w, { recursive: true, force: true });
  loops = [];
  workspaces = [];
  replies = [];
  requests = [];
  toolCalls = [];
  mcpCalls = [];
  onWrite = undefined;
});

afterAll(async () => {
  await skills.stop();
  rmSync(home, { recursive: true, force: true });
  await removeNamespace(bus.nc, bus.names.namespace);
  await bus.close();
});

const skill = (description: string, extra = "") => `---\ndescription: ${description}\n${extra}---\nBody of the skill.\n`;

async function session(files: Record<string, string>, options: { mode?: string; approvalPolicy?: string } = {}): Promise<{ id: string; workspace: string }> {
  const workspace = mkdtempSync(join(tmpdir(), "tack-ext-"));
  workspaces.push(workspace);
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(join(workspace, path, ".."), { recursive: true });
    writeFileSync(join(workspace, path), content);
  }
  loops.push(await startLoopService({ natsUrl: NATS_URL, namespace, leaseTtlMs: 1_000, prewarmSandbox: false, approvalTimeoutMs: 20_000 }));
  const created = await bus.request(LoopRpc.CreateSession, CreateSessionRequest.fromPartial({
    tenant: "local", model: "scripted:test", workspace, sandboxMode: "workspace-write", mode: options.mode ?? "", approvalPolicy: options.approvalPolicy ?? "",
  }));
  return { id: created.sessionId, workspace };
}

function submit(sessionId: string, text = "go"): Promise<SubmitMessageResponse> {
  return bus.request(LoopRpc.SubmitMessage, { tenant: "local", sessionId, text });
}

function turnsEnded(sessionId: string, count: number): Promise<Event[]> {
  return waitForValue(`${count} turn/end in the log of ${sessionId}`, async () => {
    const events = await readAll(bus.nc, bus.names, { tenant: "local", sessionId });
    return events.filter((e) => e.type === "turn/end").length >= count && events;
  }, { timeoutMs: 15_000, intervalMs: 30 });
}

const of = <C extends NonNullable<Event["payload"]>["$case"]>(events: Event[], c: C) => events.filter((e): e is EventOf<C> => isCase(e, c));
const toolNames = (req: CompleteRequest) => req.tools.map((t) => t.name);
const resultOf = (events: Event[], callId: string) => of(events, "toolResult").find((e) => e.payload.value.callId === callId)?.payload.value;

describe("skills and MCP tools in the loop", () => {
  it("extensions - one tool list in a stable order; the catalog is logged once while its digest stays; warnings once; the skill tool loads a body", async () => {
    const { id } = await session({
      ".claude/skills/deploy/SKILL.md": skill("Deploy the service to staging."),
      ".claude/skills/deploy/run.sh": "#!/bin/sh\n",
      ".claude/skills/broken/SKILL.md": "no front matter",
      ".tack/skills/private.md": skill("Only for people.", "disable-model-invocation: true\n"),
    });
    replies = [[{ name: "skill", args: { name: "deploy" } }, { name: "skill", args: { name: "private" } }, { name: "mcp__kb__search", args: { q: "x" } }], []];
    await submit(id);
    await turnsEnded(id, 1);
    replies = [[], [], []];
    await submit(id, "again");
    const events = await turnsEnded(id, 2);

    const service = listTools("standard").map((t) => t.name);
    expect(toolNames(requests[0]!)).toEqual([...service, "skill", "mcp__deploy__ship", "mcp__kb__search"]);
    for (const r of requests) expect(toolNames(r)).toEqual(toolNames(requests[0]!));
    expect(of(events, "requestHeader")).toHaveLength(1);

    const catalogs = of(events, "skillsCatalog");
    expect(catalogs).toHaveLength(1);
    const names = catalogs[0]!.payload.value.skills.map((s) => [s.name, s.source, s.modelInvocable]);
    expect(names).toEqual(expect.arrayContaining([["deploy", "workspace:.claude/skills", true], ["private", "workspace:.tack/skills", false], ["write-skill", "bundled", true]]));
    // The model reads the catalog right after the first user message, without the user-only skill.
    const first = requests[0]!.messages.filter((m) => m.role === Role.ROLE_USER).map((m) => m.content);
    expect(first).toEqual(["go", skillsCatalogText(catalogs[0]!.payload.value.skills)]);
    expect(first[1]).toContain("- deploy: Deploy the service to staging.");
    expect(first[1]).not.toContain("private");

    const warnings = of(events, "skillsWarning");
    expect(warnings).toHaveLength(1);
    expect(warnings[0]!.payload.value.source).toMatch(/\.claude\/skills\/broken\/SKILL\.md$/);
    expect(warnings[0]!.payload.value.message).toContain('field "description"');
    const mcpWarnings = of(events, "mcpWarning").map((e) => [e.payload.value.server, e.payload.value.message]);
    expect(mcpWarnings).toEqual([["deploy", 'MCP server "deploy" changed tool "ship" (description)'], ["broken", "exited at start with code 1"]]);

    const loaded = resultOf(events, "call_0_0")!;
    expect(loaded.isError).toBe(false);
    expect(loaded.content).toContain("Body of the skill.");
    expect(loaded.content).toContain("/workspace/.claude/skills/deploy");
    expect(loaded.content).toContain("run.sh");
    const refused = resultOf(events, "call_0_1")!;
    expect(refused.isError).toBe(true);
    expect(refused.content).toMatch(/private/);
    // Neither skill call went to the tools service; the MCP call went to the bridge with the session's identity.
    expect(toolCalls).toHaveLength(0);
    expect(mcpCalls.map((c) => [c.publicName, c.argumentsJson, c.sessionId, c.tenant, c.sandboxMode])).toEqual([["mcp__kb__search", '{"q":"x"}', id, "local", "workspace-write"]]);
    expect(resultOf(events, "call_0_2")!.content).toContain("[image: image/png, 3 KB]");
    const raw = of(events, "mcpResult");
    expect(raw.map((e) => [e.payload.value.callId, e.payload.value.server, e.payload.value.tool])).toEqual([["call_0_2", "kb", "search"]]);
    expect(JSON.parse(raw[0]!.payload.value.rawJson).content[1].data).toBe("AAAA");
    // The prefix stays byte-identical from request to request.
    for (let i = 1; i < requests.length; i++) {
      const [a, b] = [requests[i - 1]!, requests[i]!];
      expect(b.messages.slice(0, a.messages.length).map((m) => ChatMessage.toJSON(m))).toEqual(a.messages.map((m) => ChatMessage.toJSON(m)));
    }
  });

  it("extensions - writing a skill file makes the next step's catalog hold it at once (a new catalog event), not after the watcher", async () => {
    const { id, workspace } = await session({ ".claude/skills/a/SKILL.md": skill("First skill.") });
    onWrite = (req) => {
      const { path, content } = JSON.parse(req.arguments) as { path: string; content: string };
      const host = join(workspace, path.replace(/^\/workspace\//, ""));
      mkdirSync(join(host, ".."), { recursive: true });
      writeFileSync(host, content);
    };
    replies = [[{ name: "write", args: { path: "/workspace/.claude/skills/b/SKILL.md", content: skill("Second skill.") } }], []];
    await submit(id);
    const events = await turnsEnded(id, 1);
    const catalogs = of(events, "skillsCatalog");
    expect(catalogs).toHaveLength(2);
    expect(catalogs[0]!.payload.value.skills.map((s) => s.name)).not.toContain("b");
    expect(catalogs[1]!.payload.value.skills.map((s) => s.name)).toContain("b");
    expect(catalogs[1]!.payload.value.digest).not.toBe(catalogs[0]!.payload.value.digest);
    expect(requests[1]!.messages.at(-1)!.content).toContain("- b: Second skill.");
  });

  it("extensions - /name runs a skill the user may run: its body follows the message; unknown names stay plain text; a model-only skill is refused", async () => {
    const { id } = await session({
      ".claude/skills/review/SKILL.md": skill("Review a change."),
      ".claude/skills/auto/SKILL.md": skill("Model only.", "user-invocable: false\n"),
    });
    replies = [[], [], []];
    await submit(id, "/review the last commit");
    let events = await turnsEnded(id, 1);
    const invoked = of(events, "skillInvoked");
    expect(invoked.map((e) => [e.payload.value.name, e.payload.value.arguments, e.payload.value.source, e.payload.value.location]))
      .toEqual([["review", "the last commit", "workspace:.claude/skills", "/workspace/.claude/skills/review"]]);
    const user = of(events, "userMessage")[0]!;
    expect(invoked[0]!.seq).toBe(user.seq + 1);
    const texts = requests[0]!.messages.filter((m) => m.role === Role.ROLE_USER).map((m) => m.content);
    expect(texts[0]).toBe("/review the last commit");
    expect(texts[1]).toContain("The user ran the skill /review");
    expect(texts[1]).toContain("Body of the skill.");

    await submit(id, "/tmp is full");
    events = await turnsEnded(id, 2);
    expect(of(events, "skillInvoked")).toHaveLength(1);

    const refused = await submit(id, "/auto").then(() => undefined, (error: unknown) => error);
    expect(refused).toBeInstanceOf(TackError);
    expect((refused as TackError).code).toBe("skills.user_not_allowed");
    events = await readAll(bus.nc, bus.names, { tenant: "local", sessionId: id });
    expect(of(events, "userMessage").map((e) => e.payload.value.text)).toEqual(["/review the last commit", "/tmp is full"]);
  });

  it("extensions - an MCP tool whose approval is ask waits for a person (not counted as the turn's escalation); never-policy refuses it unasked", async () => {
    const { id } = await session({});
    replies = [[{ name: "mcp__deploy__ship", args: { env: "staging" } }], [{ name: "mcp__deploy__ship", args: { env: "prod" } }], []];
    await submit(id);
    const asked = await waitForValue("approval/asked", async () => {
      const events = await readAll(bus.nc, bus.names, { tenant: "local", sessionId: id });
      return of(events, "approvalAsked")[0];
    }, { timeoutMs: 15_000, intervalMs: 30 });
    expect(asked.payload.value).toMatchObject({ callId: "call_0_0", toolName: "mcp__deploy__ship", operation: 'mcp__deploy__ship {"env":"staging"}', kind: "tool", requestedMode: "" });
    expect(mcpCalls).toHaveLength(0);
    await bus.request(LoopRpc.DecideApproval.at({ session: id }), { tenant: "local", sessionId: id, callId: "call_0_0", decision: "allow_once", decidedBy: "tester" });
    // The second call asks again (per call), then is rejected.
    await waitForValue("second approval/asked", async () => {
      const events = await readAll(bus.nc, bus.names, { tenant: "local", sessionId: id });
      return of(events, "approvalAsked").length === 2;
    }, { timeoutMs: 15_000, intervalMs: 30 });
    await bus.request(LoopRpc.DecideApproval.at({ session: id }), { tenant: "local", sessionId: id, callId: "call_1_0", decision: "reject", decidedBy: "tester" });
    const events = await turnsEnded(id, 1);
    expect(mcpCalls.map((c) => c.argumentsJson)).toEqual(['{"env":"staging"}']);
    expect(resultOf(events, "call_0_0")!.content).toMatch(/^Approved once by the user: this call ran\.\nfound for/);
    expect(resultOf(events, "call_1_0")!.content).toMatch(/^Rejected by the user: the call to mcp__deploy__ship was turned down/);

    const never = await session({}, { approvalPolicy: "never" });
    replies = [[{ name: "mcp__deploy__ship", args: {} }], []];
    await submit(never.id);
    const denied = await turnsEnded(never.id, 1);
    expect(of(denied, "approvalAsked")).toHaveLength(0);
    expect(of(denied, "approvalDecided").map((e) => e.payload.value.decidedBy)).toEqual(["policy:never"]);
    expect(resultOf(denied, "call_0_0")!.content).toMatch(/^Rejected by policy/);
  });

  it("extensions - minimal mode has only its own tools: no skill tool, no MCP tools, no catalog", async () => {
    const { id } = await session({ ".claude/skills/deploy/SKILL.md": skill("Deploy.") }, { mode: "minimal" });
    replies = [[]];
    await submit(id, "/deploy");
    const events = await turnsEnded(id, 1);
    expect(toolNames(requests[0]!)).toEqual(listTools("minimal").map((t) => t.name));
    expect(of(events, "skillsCatalog")).toHaveLength(0);
    expect(of(events, "skillInvoked")).toHaveLength(0);
  });
});
