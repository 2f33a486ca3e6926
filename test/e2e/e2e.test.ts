// End to end: every service as its own process (the launcher `tack up` uses), the machine's
// NATS JetStream, real Docker sandboxes, driven through the gateway's HTTP API.
import { execFileSync } from "node:child_process";
import { chownSync, mkdtempSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Bus } from "@tack/bus";
import { removeNamespace, waitFor } from "@tack/testkit";
import { launch, type Launched } from "@tack/cli";
import { RECOVERY_TEXT } from "@tack/loop-service";
import { sseJson } from "./support/sse.js";

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const namespace = `e2e${randomBytes(4).toString("hex")}`;
const work = mkdtempSync(join(tmpdir(), "tack-e2e-"));
let tack: Launched;
let otlp: Server;
let otlpUrl: string;
const spans: Array<{ service: string; traceId: string; spanId: string; parentSpanId: string; name: string }> = [];

/** An event as the gateway sends it: the payload sits under its case name (e.g. `toolResult`). */
type EventJson = { seq: number; type: string } & Record<string, Record<string, unknown> | undefined>;

function workspace(name: string): string {
  const dir = join(work, name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "hello.txt"), "hello from the host\n");
  if (process.getuid?.() === 0) {
    chownSync(dir, 1000, 1000);
    chownSync(join(dir, "hello.txt"), 1000, 1000);
  }
  return dir;
}

// The services' state directory; the llm service reads scripts only from its `scripts/` (and the bundled examples/).
const stateDir = join(work, "data");
const scripts = join(stateDir, "scripts");

function script(name: string, replies: unknown[]): string {
  mkdirSync(scripts, { recursive: true });
  const file = join(scripts, `${name}.json`);
  writeFileSync(file, JSON.stringify({ replies }));
  return file;
}

async function api(path: string, init: RequestInit & { json?: unknown } = {}): Promise<Response> {
  const headers: Record<string, string> = { authorization: `Bearer ${tack.apiKey}`, ...(init.headers as Record<string, string> | undefined) };
  if (init.json !== undefined) headers["content-type"] = "application/json";
  return fetch(`${tack.gatewayUrl}${path}`, { ...init, headers, body: init.json === undefined ? init.body : JSON.stringify(init.json) });
}

async function createSession(model: string, ws: string): Promise<string> {
  const r = await api("/v1/sessions", { method: "POST", json: { workspace: ws, model } });
  expect(r.status, await r.clone().text()).toBe(201);
  return ((await r.json()) as { id: string }).id;
}

async function events(id: string): Promise<EventJson[]> {
  const r = await api(`/v1/sessions/${id}/events?follow=0`);
  const text = await r.text();
  return sseJson<EventJson>(text);
}

/** The session's log once `done` holds for it; a timeout names `what` and the event types read last. */
function logWhen(id: string, what: string, done: (e: EventJson[]) => boolean, timeoutMs = 60_000): Promise<EventJson[]> {
  return waitFor(`${what} in session ${id}`, async () => {
    const e = await events(id);
    if (done(e)) return e;
    throw new Error(`log so far: ${e.map((x) => x.type).join(", ")}`);
  }, { timeoutMs });
}

const turnEnded = (n: number) => (e: EventJson[]) => e.filter((x) => x.type === "turn/end").length >= n;

beforeAll(async () => {
  // A local OTLP/HTTP receiver (JSON encoding) collecting every span the services export.
  otlp = createServer((req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => { body += c.toString(); });
    req.on("end", () => {
      try {
        const data = JSON.parse(body) as { resourceSpans: Array<{ resource: { attributes: Array<{ key: string; value: { stringValue?: string } }> }; scopeSpans: Array<{ spans: Array<{ traceId: string; spanId: string; parentSpanId?: string; name: string }> }> }> };
        for (const rs of data.resourceSpans ?? []) {
          const service = rs.resource.attributes.find((a) => a.key === "service.name")?.value.stringValue ?? "";
          for (const ss of rs.scopeSpans) for (const s of ss.spans) spans.push({ service, traceId: s.traceId, spanId: s.spanId, parentSpanId: s.parentSpanId ?? "", name: s.name });
        }
      } catch { /* not JSON: ignore */ }
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  await new Promise<void>((r) => otlp.listen(0, "127.0.0.1", r));
  otlpUrl = `http://127.0.0.1:${(otlp.address() as { port: number }).port}`;
  tack = await launch({
    dataDir: stateDir, natsUrl: NATS_URL, namespace,
    env: { TACK_LEASE_TTL_MS: "2000", OTEL_EXPORTER_OTLP_ENDPOINT: otlpUrl, TACK_STATE_DIR: stateDir },
  });
}, 120_000);

afterAll(async () => {
  await tack?.stop();
  const bus = await Bus.connect({ url: NATS_URL, namespace, name: "e2e-cleanup" });
  await removeNamespace(bus.nc, namespace);
  await bus.close();
  otlp?.close();
  rmSync(work, { recursive: true, force: true });
});

describe("end to end", () => {
  it("e2e - a scripted run ends with a tool result produced inside the session's container", async () => {
    const ws = workspace("run");
    const id = await createSession(`scripted:${script("run", [
      { content: "Listing.", tool_calls: [{ name: "bash", arguments: { command: "ls /workspace; id -u; hostname" } }] },
      { content: "Done." },
    ])}`, ws);
    const posted = await api(`/v1/sessions/${id}/messages`, { method: "POST", json: { text: "list the files" } });
    expect(posted.status).toBe(202);
    const log = await logWhen(id, "turn 1 to end", turnEnded(1));
    const result = log.find((e) => e.type === "tool/result")!.toolResult!;
    const [listing, uid, host] = String(result.content).split("\n");
    expect(listing).toBe("hello.txt");
    expect(uid).toBe("1000");
    // The session's container (claimed from the warm pool or started cold) is named after the session and mode.
    const container = execFileSync("docker", ["ps", "-q", "--no-trunc", "--filter", `name=tack-${namespace}-${id}.`]).toString().trim();
    expect(container).toMatch(/^[0-9a-f]{64}$/);
    expect(container.startsWith(String(host))).toBe(true);
    expect(log.map((e) => e.seq)).toEqual(log.map((_, i) => i + 1));
    expect(log.at(-1)!.turnEnd).toMatchObject({ reason: "completed" });
  });

  it("e2e - the API reports context use by part in the model's tokens, calibrated by reported usage, and cost per turn", async () => {
    const ws = workspace("context");
    const id = await createSession(`scripted:${script("context", [
      { tool_calls: [{ name: "read", arguments: { path: "hello.txt" } }] },
      { content: "It says hello." },
    ])}`, ws);
    await api(`/v1/sessions/${id}/messages`, { method: "POST", json: { text: "what does hello.txt say?" } });
    await logWhen(id, "turn 1 to end", turnEnded(1));
    const r = await api(`/v1/sessions/${id}/context`);
    expect(r.status).toBe(200);
    const ctx = (await r.json()) as { tokenizer: string; tokens: { system_prompt: number; tools: number; conversation: number; total: number }; calibration: { ratio: number } | null };
    expect(ctx.tokenizer).toBe("deepseek-v3");
    expect(ctx.tokens.system_prompt).toBeGreaterThan(50);
    expect(ctx.tokens.tools).toBeGreaterThan(ctx.tokens.system_prompt);
    expect(ctx.tokens.conversation).toBeGreaterThan(10);
    expect(ctx.tokens.total).toBe(ctx.tokens.system_prompt + ctx.tokens.tools + ctx.tokens.conversation);
    // The scripted provider reports usage with the same tokenizer, so the calibration is exact.
    expect(ctx.calibration?.ratio).toBe(1);
    const session = (await (await api(`/v1/sessions/${id}`)).json()) as { usage: { cost_usd: number; tokens: { input_miss: number }; turns: unknown[] } };
    expect(session.usage.tokens.input_miss).toBeGreaterThan(ctx.tokens.total);
    expect(session.usage.turns).toEqual([{ turn: 1, cost_usd: 0 }]);
  });

  it("e2e - replay re-runs a recorded session with no key: same tool calls, really executed again", async () => {
    const ws = workspace("recorded");
    const id = await createSession(`scripted:${script("recorded", [
      { reasoning: "Count the lines.", content: "Counting.", tool_calls: [{ name: "bash", arguments: { command: "wc -l < hello.txt" } }] },
      { content: "One line." },
    ])}`, ws);
    await api(`/v1/sessions/${id}/messages`, { method: "POST", json: { text: "how many lines in hello.txt?" } });
    const recorded = await logWhen(id, "turn 1 to end", turnEnded(1));
    // The recording is the log as JSON lines, exactly what `tack events <id> --json` prints.
    const file = join(scripts, "recording.jsonl");
    writeFileSync(file, recorded.map((e) => JSON.stringify(e)).join("\n"));
    const replayed = await createSession(`replay:${file}`, workspace("replayed"));
    await api(`/v1/sessions/${replayed}/messages`, { method: "POST", json: { text: "how many lines in hello.txt?" } });
    const log = await logWhen(replayed, "turn 1 to end", turnEnded(1));
    const assistant = (events: EventJson[]) => events.filter((e) => e.type === "assistant/message").map((e) => [e.assistantMessage!.content, e.assistantMessage!.toolCalls]);
    expect(assistant(log)).toEqual(assistant(recorded));
    expect(log.find((e) => e.type === "tool/result")!.toolResult!.content).toMatch(/^1\n/);
    expect(log.at(-1)!.turnEnd).toMatchObject({ reason: "completed" });
  });

  it("e2e - killing the loop (SIGKILL) during a tool call: the session resumes, nothing duplicated or lost", async () => {
    const ws = workspace("crash");
    const id = await createSession(`scripted:${script("crash", [
      { tool_calls: [{ name: "bash", arguments: { command: "sleep 4; echo slow > slow.txt" } }, { name: "bash", arguments: { command: "echo fast" } }] },
      { content: "Recovered." },
    ])}`, ws);
    await api(`/v1/sessions/${id}/messages`, { method: "POST", json: { text: "do two things" } });
    await logWhen(id, "a tool call", (e) => e.filter((x) => x.type === "tool/call").length >= 1, 20_000);
    await tack.kill("loop", "SIGKILL");
    await tack.start("loop");
    const log = await logWhen(id, "turn 1 to end", turnEnded(1));
    const types = log.map((e) => e.type);
    expect(types).toContain("session/recovered");
    const results = log.filter((e) => e.type === "tool/result").map((e) => e.toolResult!);
    // Every call has exactly one result; the slow one was in flight when the loop died.
    expect(results.map((r) => r.callId).sort()).toEqual(["call_0_0", "call_0_1"]);
    const slow = results.find((r) => r.callId === "call_0_0")!;
    expect(slow.content).toBe(RECOVERY_TEXT.mayHaveRun);
    expect(slow.synthesized).toBe(true);
    expect(log.map((e) => e.seq)).toEqual(log.map((_, i) => i + 1));
    expect(log.at(-1)!.turnEnd).toMatchObject({ reason: "completed" });
    // The session keeps working on the new loop process.
    await api(`/v1/sessions/${id}/messages`, { method: "POST", json: { text: "again" } });
    const after = await logWhen(id, "turn 2 to end", turnEnded(2));
    expect(after.map((e) => e.seq)).toEqual(after.map((_, i) => i + 1));
  });

  it("e2e - one trace per turn holds spans from gateway, loop, llm, tools, sandbox, skills and mcp", async () => {
    const ws = workspace("trace");
    const id = await createSession(`scripted:${script("trace", [
      { tool_calls: [{ name: "bash", arguments: { command: "true" } }] },
      { content: "ok" },
    ])}`, ws);
    const traceId = randomBytes(16).toString("hex");
    const parent = randomBytes(8).toString("hex");
    const r = await api(`/v1/sessions/${id}/messages`, { method: "POST", json: { text: "trace me" }, headers: { traceparent: `00-${traceId}-${parent}-01` } });
    expect(r.status).toBe(202);
    await logWhen(id, "turn 1 to end", turnEnded(1));
    const services = () => new Set(spans.filter((s) => s.traceId === traceId).map((s) => s.service));
    const turnSpan = () => spans.some((s) => s.traceId === traceId && s.name === "loop.turn");
    // Spans are exported in batches, after the turn.
    await waitFor("spans of seven services and the loop's turn span in the trace", () => {
      if (services().size >= 7 && turnSpan()) return true;
      throw new Error(`services so far: ${[...services()].sort().join(", ") || "none"}; turn span: ${turnSpan()}`);
    }, { timeoutMs: 15_000, intervalMs: 200 });
    // The loop asks the skills service for the catalog and the MCP service for its tools at the turn's start.
    expect([...services()].sort()).toEqual(["tack-gateway", "tack-llm", "tack-loop", "tack-mcp", "tack-sandbox", "tack-skills", "tack-tools"]);
    const gatewaySpan = spans.find((s) => s.traceId === traceId && s.service === "tack-gateway" && s.parentSpanId === parent);
    expect(gatewaySpan?.name).toBe("gateway POST /v1/sessions/:id/messages");
    expect(turnSpan()).toBe(true);
  });

  it("e2e - an unknown model or a missing script is refused at creation with the fix, and nothing is logged", async () => {
    const ws = workspace("badmodel");
    const r = await api("/v1/sessions", { method: "POST", json: { workspace: ws, model: "nosuch:model" } });
    expect(r.status).toBe(400);
    const body = (await r.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("llm.unknown_model");
    expect(body.error.message).toMatch(/unknown model "nosuch:model"; use one of: scripted:FILE, .*deepseek:MODEL/);
    const missing = await api("/v1/sessions", { method: "POST", json: { workspace: ws, model: `scripted:${join(scripts, "absent.json")}` } });
    expect(missing.status).toBe(400);
    expect(((await missing.json()) as { error: { message: string } }).error.message).toMatch(/cannot read script .*absent.json \(ENOENT\)/);
    // A file outside the script directories is refused without a byte of it.
    const outside = await api("/v1/sessions", { method: "POST", json: { workspace: ws, model: "scripted:/etc/passwd" } });
    expect(outside.status).toBe(400);
    const refused = (await outside.json()) as { error: { code: string; message: string } };
    expect(refused.error).toMatchObject({ code: "llm.bad_script", message: expect.stringContaining("outside the script directories") });
    expect(JSON.stringify(refused)).not.toContain("root:");
    const list = (await (await api("/v1/sessions")).json()) as { sessions: Array<{ workspace: string }> };
    expect(list.sessions.length).toBeGreaterThan(0);
    expect(list.sessions.filter((s) => s.workspace === ws)).toHaveLength(0);
  });
});
