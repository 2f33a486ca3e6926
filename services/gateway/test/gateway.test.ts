import { createHash, randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import SQLite from "better-sqlite3";
import { createParser } from "eventsource-parser";
import { SpanKind, trace } from "@opentelemetry/api";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from "@opentelemetry/sdk-trace-base";
import { Bus, LoopRpc, rpcSubject } from "@tack/bus";
import { readAll } from "@tack/log";
import { ensurePropagation } from "@tack/telemetry";
import { MAX_BODY_BYTES, startGateway, type Gateway } from "@tack/gateway-service";
import { waitFor } from "@tack/testkit";
import { GatewayStack, RealLoop } from "./real-loop.js";

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const KEY_ACME = `acme-${randomBytes(16).toString("hex")}`;
const KEY_GLOBEX = `globex-${randomBytes(16).toString("hex")}`;

ensurePropagation();
const spans = new InMemorySpanExporter();
trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] }));

let stack: GatewayStack;
let namespace: string;
let bus: Bus;
let loop: RealLoop;
let gateway: Gateway;
let dir: string;
let workspace: string;

beforeAll(async () => {
  stack = await GatewayStack.start({
    name: "gateway", keys: { acme: KEY_ACME, globex: KEY_GLOBEX }, keepaliveMs: 200,
    // Both tenants may use every sandbox mode; limits are tested in policy.test.ts.
    policy: { max_sandbox_mode: "danger-full-access" },
  });
  ({ bus, loop, gateway, dir, workspace, namespace } = stack);
});

afterAll(async () => {
  await stack?.stop();
});

/** Calls the gateway with a key (default acme's) and a JSON body. */
async function call(method: string, path: string, options: { key?: string | null; body?: unknown; raw?: string; headers?: Record<string, string> } = {}) {
  const headers: Record<string, string> = { ...options.headers };
  const key = options.key === undefined ? KEY_ACME : options.key;
  if (key !== null) headers.authorization = `Bearer ${key}`;
  let body: string | undefined = options.raw;
  if (options.body !== undefined) body = JSON.stringify(options.body);
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(`${gateway.url}${path}`, { method, headers, body });
  const text = await res.text();
  return { status: res.status, headers: res.headers, json: text ? JSON.parse(text) : undefined };
}

async function createSession(body: Record<string, unknown> = {}, key?: string) {
  const res = await call("POST", "/v1/sessions", { key, body: { workspace, model: loop.model, ...body } });
  expect(res.status, JSON.stringify(res.json)).toBe(201);
  return res.json as { id: string; tenant: string; subject: string; created_at: string };
}

interface Frame {
  id?: string;
  event?: string;
  data?: string;
  comment?: string;
}

/** The frames of a Server-Sent Events body, parsed by eventsource-parser: messages and comments, in order. */
async function* frames(res: Response): AsyncGenerator<Frame> {
  const queue: Frame[] = [];
  const parser = createParser({
    onEvent: ({ id, event, data }) => queue.push({ id, event, data }),
    onComment: (comment) => queue.push({ comment }),
  });
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      parser.feed(value);
      while (queue.length > 0) yield queue.shift()!;
    }
  } finally {
    reader.releaseLock();
  }
}

/** Opens an event stream and collects events (into `options.into`, if given, as they arrive) until `until` says stop; then disconnects. */
async function readEvents(id: string, options: { query?: string; lastEventId?: string; until: (events: Frame[]) => boolean; into?: Frame[] }): Promise<Frame[]> {
  const abort = new AbortController();
  const headers: Record<string, string> = { authorization: `Bearer ${KEY_ACME}` };
  if (options.lastEventId) headers["last-event-id"] = options.lastEventId;
  const res = await fetch(`${gateway.url}/v1/sessions/${id}/events${options.query ?? ""}`, { headers, signal: abort.signal });
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
  const events: Frame[] = options.into ?? [];
  try {
    for await (const frame of frames(res)) {
      if (frame.comment !== undefined) continue;
      events.push(frame);
      if (options.until(events)) break;
    }
  } finally {
    abort.abort();
  }
  return events;
}

/** Posts a message and waits for the turn it starts in the real loop to end. */
async function post(id: string, text: string) {
  const res = await call("POST", `/v1/sessions/${id}/messages`, { body: { text } });
  expect(res.status, JSON.stringify(res.json)).toBe(202);
  await loop.idle("acme", id);
  return res.json as { seq: number; turn: number };
}

/** The session's log as the loop wrote it. */
function logOf(id: string, tenant = "acme") {
  return readAll(bus.nc, bus.names, { tenant, sessionId: id });
}

function waitForSpan(name: string, match: (span: ReadableSpan) => boolean = () => true): Promise<ReadableSpan> {
  return waitFor(`span ${name} to end`, () => spans.getFinishedSpans().find((s) => s.name === name && match(s)), { timeoutMs: 2_000, intervalMs: 20 });
}

describe("gateway", () => {
  it("health - answers without a key", async () => {
    const res = await call("GET", "/healthz", { key: null });
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ status: "ok" });
  });

  it("auth - a missing key is refused with how to send one", async () => {
    const res = await call("GET", "/v1/sessions", { key: null });
    expect(res.status).toBe(401);
    expect(res.json.error.code).toBe("gateway.missing_api_key");
    expect(res.json.error.message).toContain("Authorization: Bearer <key>");
    expect(res.headers.get("www-authenticate")).toMatch(/^Bearer/);
  });

  it("auth - a wrong key and a non-Bearer header are refused", async () => {
    const wrong = await call("GET", "/v1/sessions", { key: "not-the-key" });
    expect(wrong.status).toBe(401);
    expect(wrong.json.error.code).toBe("gateway.invalid_api_key");
    expect(wrong.json.error.message).toContain("Authorization: Bearer <key>");
    const basic = await call("GET", "/v1/sessions", { key: null, headers: { authorization: `Basic ${Buffer.from(`u:${KEY_ACME}`).toString("base64")}` } });
    expect(basic.status).toBe(401);
    expect(basic.json.error.code).toBe("gateway.malformed_authorization");
  });

  it("auth - the right key opens /v1, also on unknown routes it gates first", async () => {
    expect((await call("GET", "/v1/sessions")).status).toBe(200);
    expect((await call("GET", "/v1/nothing", { key: null })).status).toBe(401);
    expect((await call("GET", "/v1/nothing")).status).toBe(404);
  });

  it("auth - the index stores only SHA-256 hashes of the keys", () => {
    const sqlite = new SQLite(join(dir, "index.db"), { readonly: true });
    try {
      const rows = sqlite.prepare("select hash, tenant from api_keys order by tenant").all() as { hash: string; tenant: string }[];
      expect(rows).toEqual([
        { hash: createHash("sha256").update(KEY_ACME).digest("hex"), tenant: "acme" },
        { hash: createHash("sha256").update(KEY_GLOBEX).digest("hex"), tenant: "globex" },
      ]);
      const dump = JSON.stringify(sqlite.prepare("select * from api_keys").all());
      expect(dump).not.toContain(KEY_ACME);
    } finally {
      sqlite.close();
    }
  });

  it("routes - an unknown route is 404 and a wrong method is 405 with Allow", async () => {
    const missing = await call("GET", "/nothing");
    expect(missing.status).toBe(404);
    expect(missing.json.error.code).toBe("gateway.route_not_found");
    const method = await call("DELETE", "/v1/sessions");
    expect(method.status).toBe(405);
    expect(method.headers.get("allow")).toBe("POST, GET");
  });

  it("create - missing, relative and nonexistent workspaces are refused by name", async () => {
    const before = loop.subjects.length;
    const missing = await call("POST", "/v1/sessions", { body: { model: "scripted:/x.json" } });
    expect(missing.status).toBe(400);
    expect(missing.json.error).toMatchObject({ code: "gateway.invalid_request" });
    expect(missing.json.error.message).toContain("give exactly one of workspace");
    const both = await call("POST", "/v1/sessions", { body: { workspace: dir, workspace_id: "ws_0123456789abcdef0123", model: "scripted:/x.json" } });
    expect(both.status).toBe(400);
    expect(both.json.error.message).toContain("give exactly one of workspace");
    const unknownId = await call("POST", "/v1/sessions", { body: { workspace_id: "ws_0123456789abcdef0123", model: "scripted:/x.json" } });
    expect(unknownId.status).toBe(404);
    expect(unknownId.json.error.code).toBe("gateway.workspace_not_found");

    const relative = await call("POST", "/v1/sessions", { body: { workspace: "project", model: "scripted:/x.json" } });
    expect(relative.status).toBe(400);
    expect(relative.json.error.message).toContain('workspace: must be an absolute host path, got "project"');

    const gone = join(dir, "no-such-dir");
    const nonexistent = await call("POST", "/v1/sessions", { body: { workspace: gone, model: "scripted:/x.json" } });
    expect(nonexistent.status).toBe(400);
    expect(nonexistent.json.error.code).toBe("gateway.workspace_not_found");
    expect(nonexistent.json.error.message).toContain(gone);

    const file = join(dir, "a-file");
    writeFileSync(file, "x");
    const notDir = await call("POST", "/v1/sessions", { body: { workspace: file, model: "scripted:/x.json" } });
    expect(notDir.status).toBe(400);
    expect(notDir.json.error.code).toBe("gateway.workspace_not_directory");
    expect(loop.subjects.length).toBe(before);
  });

  it("create - every invalid field is named", async () => {
    const res = await call("POST", "/v1/sessions", { body: { workspace, model: "nocolon", sandbox_mode: "yolo", approval_policy: 3, extra: true } });
    expect(res.status).toBe(400);
    expect(Object.keys(res.json.error.details).sort()).toEqual(["(body)", "approval_policy", "model", "sandbox_mode"]);
    expect(res.json.error.message).toContain('sandbox_mode: Invalid option: expected one of "read-only"|"workspace-write"|"danger-full-access"');
    expect(res.json.error.message).toContain("model: must be <provider>:<model>");
    expect(res.json.error.message).toContain('Unrecognized key: "extra"');
  });

  it("create - malformed JSON is refused with line and column", async () => {
    const res = await call("POST", "/v1/sessions", { raw: `{"workspace": "${workspace}",\n  "model": scripted}` });
    expect(res.status).toBe(400);
    expect(res.json.error.code).toBe("gateway.malformed_json");
    // V8's own words (the hand-written grammar walk that located every error is gone with the old router).
    expect(res.json.error.message).toMatch(/^request body is not valid JSON: Unexpected token 's'/);
    const cut = await call("POST", "/v1/sessions", { raw: '{"workspace": "/x"' });
    expect(cut.json.error.message).toBe("request body is not valid JSON: Expected ',' or '}' after property value at line 1, column 19");
    const empty = await call("POST", "/v1/sessions", { raw: "" });
    expect(empty.status).toBe(400);
    expect(empty.json.error.message).toContain("found the end of the body");
  });

  it("create - a body over 1 MiB is refused with 413, announced or chunked", async () => {
    const big = JSON.stringify({ workspace, model: "scripted:/x.json", title: "x".repeat(MAX_BODY_BYTES) });
    const announced = await call("POST", "/v1/sessions", { raw: big });
    expect(announced.status).toBe(413);
    expect(announced.json.error.code).toBe("gateway.body_too_large");

    // Without Content-Length the gateway counts bytes as they arrive.
    const chunked = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = httpRequest(`${gateway.url}/v1/sessions`, { method: "POST", headers: { authorization: `Bearer ${KEY_ACME}`, "transfer-encoding": "chunked" } }, (res) => {
        let body = "";
        res.setEncoding("utf8").on("data", (c: string) => (body += c)).on("end", () => resolve({ status: res.statusCode!, body }));
      });
      req.on("error", reject);
      const chunk = "x".repeat(64 * 1024);
      const write = (left: number) => {
        if (left === 0 || req.destroyed) return req.end();
        if (req.write(chunk)) setImmediate(() => write(left - 1));
        else req.once("drain", () => write(left - 1));
      };
      write(20);
    });
    expect(chunked.status).toBe(413);
    expect(JSON.parse(chunked.body).error.code).toBe("gateway.body_too_large");
  });

  it("sessions - create, get and list newest first, per tenant", async () => {
    const a1 = await createSession({ title: "first" });
    // Newest first needs distinct creation times.
    await waitFor("the clock to pass the first session's creation time", () => Date.now() > Date.parse(a1.created_at), { intervalMs: 1 });
    const a2 = await createSession({ title: "second", sandbox_mode: "read-only", approval_policy: "never" });
    const b1 = await createSession({ title: "globex's" }, KEY_GLOBEX);
    expect(a1).toMatchObject({
      tenant: "acme", title: "first", model: loop.model, mode: "standard", workspace,
      sandbox_mode: "workspace-write", approval_policy: "ask", archived: false, subject: bus.names.logSubject("acme", a1.id),
    });
    expect(b1.tenant).toBe("globex");

    const got = await call("GET", `/v1/sessions/${a2.id}`);
    expect(got.status).toBe(200);
    const events = await logOf(a2.id);
    expect(got.json).toMatchObject({ id: a2.id, sandbox_mode: "read-only", approval_policy: "never", last_seq: events.at(-1)!.seq });
    expect(events[0]!.type).toBe("session/created");
    expect(events.map((e) => e.type)).not.toContain("user/message");

    const list = await call("GET", "/v1/sessions?limit=200");
    const ids = (list.json.sessions as { id: string }[]).map((s) => s.id);
    expect(ids.indexOf(a2.id)).toBeLessThan(ids.indexOf(a1.id));
    expect(ids).not.toContain(b1.id);
    const page = await call("GET", "/v1/sessions?limit=1&offset=1");
    expect(page.json).toMatchObject({ limit: 1, offset: 1 });
    expect(page.json.sessions[0].id).toBe(ids[1]);
    const bad = await call("GET", "/v1/sessions?limit=0&offset=x");
    expect(bad.status).toBe(400);
    expect(bad.json.error.message).toBe("invalid query: limit: must be at least 1; offset: must be a number");

    // Another tenant's session does not exist for this key.
    for (const [method, path] of [["GET", ""], ["GET", "/events?follow=0"], ["POST", "/messages"]] as const) {
      const other = await call(method, `/v1/sessions/${b1.id}${path}`, { body: method === "POST" ? { text: "hi" } : undefined });
      expect(other.status).toBe(404);
      expect(other.json.error.code).toBe("gateway.session_not_found");
    }
  });

  it("create - a model the llm service does not know is the loop's 400 with the llm's message", async () => {
    const res = await call("POST", "/v1/sessions", { body: { workspace, model: "fail:model" } });
    expect(res.status).toBe(400);
    expect(res.json.error).toMatchObject({ code: "llm.unknown_model", message: expect.stringContaining('unknown model "fail:model"') });
  });

  it("create - a loop failure behind the gateway is passed on with its code and a request id, not its message", async () => {
    // With no llm service the loop cannot check the model; its message names the bus subject.
    await loop.stopLlm();
    try {
      const res = await call("POST", "/v1/sessions", { body: { workspace, model: loop.model } });
      expect(res.status).toBe(503);
      const id = res.json.error.request_id;
      expect(res.json.error).toEqual({ code: "loop.llm_unavailable", message: `the loop service cannot serve this request right now; retry shortly, and start Tack with \`tack up\` if it persists (request id ${id})`, request_id: id });
      expect(JSON.stringify(res.json)).not.toContain(".llm.check");
    } finally {
      await loop.stop();
      loop = await RealLoop.start(NATS_URL, namespace);
    }
  });

  it("messages - posts to the owner, or to any loop when the session has no owner", async () => {
    const session = await createSession();
    const created = (await logOf(session.id)).at(-1)!.seq;
    loop.subjects.length = 0;
    const hello = await post(session.id, "hello");
    expect(hello).toEqual({ seq: created + 1, turn: 1 });
    expect(loop.subjects).toEqual([rpcSubject(bus.names.namespace, LoopRpc.SubmitMessage.at({ session: session.id }))]);

    // A fresh loop replica owns nothing: the owner subject has no responders, the queue subject claims it.
    await loop.stop();
    loop = await RealLoop.start(NATS_URL, namespace);
    const again = await post(session.id, "again");
    const andAgain = await post(session.id, "and again");
    expect([again.turn, andAgain.turn]).toEqual([2, 3]);
    expect(loop.subjects).toEqual([rpcSubject(bus.names.namespace, LoopRpc.SubmitMessage), rpcSubject(bus.names.namespace, LoopRpc.SubmitMessage.at({ session: session.id }))]);
    const events = await logOf(session.id);
    const messages = events.filter((e) => e.payload?.$case === "userMessage").map((e) => [e.seq, e.payload?.$case === "userMessage" && e.payload.value.text]);
    expect(messages).toEqual([[hello.seq, "hello"], [again.seq, "again"], [andAgain.seq, "and again"]]);
    expect(events.filter((e) => e.type === "turn/end")).toHaveLength(3);
  });

  it("messages - invalid text is refused and nothing is logged", async () => {
    const session = await createSession();
    const logged = (await logOf(session.id)).length;
    for (const [body, message] of [
      [{ text: "" }, "text: must not be empty"],
      [{ text: "  \n" }, "text: must not be empty"],
      [{}, "text: is required"],
      [{ text: "x".repeat(100_001) }, "text: must be at most 100,000 characters"],
    ] as const) {
      const res = await call("POST", `/v1/sessions/${session.id}/messages`, { body });
      expect(res.status).toBe(400);
      expect(res.json.error.message).toContain(message);
    }
    expect(await logOf(session.id)).toHaveLength(logged);
    const unknown = await call("POST", "/v1/sessions/nope/messages", { body: { text: "hi" } });
    expect(unknown.status).toBe(404);
  });

  it("approvals - a decision goes to the session's owner and is logged with the caller's tenant as decider", async () => {
    const session = await createSession({ sandbox_mode: "read-only", model: loop.askModel });
    const asked = await loop.ask("acme", session.id);
    loop.subjects.length = 0;
    const res = await call("POST", `/v1/sessions/${session.id}/approvals/${asked}`, { body: { decision: "allow_once" } });
    expect(res.status, JSON.stringify(res.json)).toBe(200);
    expect(res.json).toEqual({ seq: expect.any(Number) });
    expect(loop.subjects).toEqual([rpcSubject(bus.names.namespace, LoopRpc.DecideApproval.at({ session: session.id }))]);
    const events = await logOf(session.id);
    expect(events.find((e) => e.seq === res.json.seq)!.payload).toEqual({ $case: "approvalDecided", value: {
      callId: "call_0_0", decision: "allow_once", decidedBy: "acme",
      // The key that decided: a start key is named TACK_API_KEY; its id is its hash's first 12 hex digits.
      decidedByKey: "TACK_API_KEY", decidedByKeyId: createHash("sha256").update(KEY_ACME).digest("hex").slice(0, 12),
    } });
    await loop.idle("acme", session.id);
  });

  it("approvals - with no owner, any loop claims the session and takes the decision", async () => {
    const session = await createSession({ sandbox_mode: "read-only", model: loop.askModel });
    await loop.ask("acme", session.id);
    await loop.stop();
    loop = await RealLoop.start(NATS_URL, namespace);
    const res = await call("POST", `/v1/sessions/${session.id}/approvals/call_0_0`, { body: { decision: "reject" } });
    expect(res.status, JSON.stringify(res.json)).toBe(200);
    expect(loop.subjects).toEqual([rpcSubject(bus.names.namespace, LoopRpc.DecideApproval)]);
    const events = await logOf(session.id);
    expect(events.find((e) => e.seq === res.json.seq)!.payload).toMatchObject({ value: { decision: "reject", decidedBy: "acme" } });
  });

  it("approvals - a call with nothing pending is 404, also once it was decided", async () => {
    const session = await createSession({ sandbox_mode: "read-only", model: loop.askModel });
    const unknown = await call("POST", `/v1/sessions/${session.id}/approvals/call_9`, { body: { decision: "allow_once" } });
    expect(unknown.status).toBe(404);
    expect(unknown.json.error).toMatchObject({ code: "loop.no_pending_approval", message: expect.stringContaining("call_9") });
    await loop.ask("acme", session.id);
    expect((await call("POST", `/v1/sessions/${session.id}/approvals/call_0_0`, { body: { decision: "reject" } })).status).toBe(200);
    await loop.idle("acme", session.id);
    const again = await call("POST", `/v1/sessions/${session.id}/approvals/call_0_0`, { body: { decision: "allow_once" } });
    expect(again.status).toBe(404);
  });

  it("approvals - the body, the key and the tenant are checked before the loop is asked", async () => {
    const session = await createSession({ sandbox_mode: "read-only", model: loop.askModel });
    const other = await createSession({}, KEY_GLOBEX);
    await loop.ask("acme", session.id);
    loop.subjects.length = 0;
    const path = `/v1/sessions/${session.id}/approvals/call_0_0`;
    for (const [body, message] of [
      [{}, "decision: is required: allow_once or reject"],
      [{ decision: "yes" }, 'decision: must be "allow_once" or "reject", got "yes"'],
      [{ decision: "reject", by: "me" }, 'Unrecognized key: "by"'],
    ] as const) {
      const res = await call("POST", path, { body });
      expect(res.status).toBe(400);
      expect(res.json.error.code).toBe("gateway.invalid_request");
      expect(res.json.error.message).toContain(message);
    }
    expect((await call("POST", path, { key: null, body: { decision: "reject" } })).status).toBe(401);
    const foreign = await call("POST", `/v1/sessions/${other.id}/approvals/call_0_0`, { body: { decision: "reject" } });
    expect(foreign.status).toBe(404);
    expect(foreign.json.error.code).toBe("gateway.session_not_found");
    expect((await call("GET", path)).status).toBe(405);
    expect(loop.subjects).toEqual([]);
  });

  it("sandbox mode - a change goes to the session's owner, is logged and indexed; a refusal is 409", async () => {
    const session = await createSession({ sandbox_mode: "danger-full-access" });
    const created = (await logOf(session.id)).at(-1)!.seq;
    loop.subjects.length = 0;
    const res = await call("POST", `/v1/sessions/${session.id}/sandbox_mode`, { body: { mode: "read-only" } });
    expect(res.status, JSON.stringify(res.json)).toBe(200);
    expect(res.json).toEqual({ seq: created + 1, sandbox_mode: "read-only" });
    expect(loop.subjects).toEqual([rpcSubject(bus.names.namespace, LoopRpc.SetSandboxMode.at({ session: session.id }))]);
    const events = await readAll(bus.nc, bus.names, { tenant: "acme", sessionId: session.id });
    expect(events.at(-1)!.payload).toEqual({ $case: "sandboxMode", value: { mode: "read-only", changedBy: "acme" } });
    expect((await call("GET", `/v1/sessions/${session.id}`)).json.sandbox_mode).toBe("read-only");
    // The sandbox lists a process still running in the danger-full-access container: the loop refuses to narrow.
    loop.processes = [{ pid: 42, command: "sleep 1000" }];
    try {
      const refused = await call("POST", `/v1/sessions/${session.id}/sandbox_mode`, { body: { mode: "workspace-write" } });
      expect(refused.status).toBe(409);
      expect(refused.json.error).toEqual({
        code: "loop.mode_change_refused", message: expect.stringContaining("pid 42 sleep 1000"), details: { mode: "workspace-write", wider_mode: "danger-full-access", pids: "42" },
      });
      expect(refused.json.error.message).toMatch(/^cannot change the sandbox mode to workspace-write: a process started under the wider mode danger-full-access is still running/);
    } finally {
      loop.processes = [];
    }
  });

  it("sandbox mode - the body, the key and the tenant are checked before the loop is asked", async () => {
    const session = await createSession();
    const other = await createSession({}, KEY_GLOBEX);
    loop.subjects.length = 0;
    const path = `/v1/sessions/${session.id}/sandbox_mode`;
    for (const [body, message] of [
      [{}, "mode: is required: read-only, workspace-write, danger-full-access"],
      [{ mode: "full" }, 'mode: must be one of read-only, workspace-write, danger-full-access, got "full"'],
    ] as const) {
      const res = await call("POST", path, { body });
      expect(res.status).toBe(400);
      expect(res.json.error.message).toContain(message);
    }
    expect((await call("POST", path, { key: null, body: { mode: "read-only" } })).status).toBe(401);
    const foreign = await call("POST", `/v1/sessions/${other.id}/sandbox_mode`, { body: { mode: "read-only" } });
    expect(foreign.status).toBe(404);
    expect(loop.subjects).toEqual([]);
  });

  it("events - follow=0 sends from a seq to the current end and ends", async () => {
    const session = await createSession();
    const sent: number[] = [];
    for (const text of ["one", "two", "three"]) sent.push((await post(session.id, text)).seq);
    const res = await fetch(`${gateway.url}/v1/sessions/${session.id}/events?follow=0&from=${sent[0]}`, { headers: { authorization: `Bearer ${KEY_ACME}` } });
    const all: Frame[] = [];
    for await (const frame of frames(res)) all.push(frame);
    const logged = (await logOf(session.id)).filter((e) => e.seq >= sent[0]!);
    expect(all.map((f) => [f.id, f.event])).toEqual(logged.map((e) => [String(e.seq), e.type]));
    expect(all.filter((f) => f.event === "user/message").map((f) => Number(f.id))).toEqual(sent);
    expect(JSON.parse(all[0]!.data!)).toMatchObject({ seq: sent[0], type: "user/message", source: "gateway", userMessage: { text: "one" } });

    const bad = await call("GET", `/v1/sessions/${session.id}/events?from=zero`);
    expect(bad.status).toBe(400);
    expect(bad.json.error.message).toBe('from must be the first seq to send (an integer ≥ 1), got "zero"');
  });

  it("events - a reconnect with Last-Event-ID resumes without gaps or repeats", async () => {
    const session = await createSession();
    for (let i = 1; i <= 4; i++) await post(session.id, `before ${i}`);
    const first = await readEvents(session.id, { until: (e) => e.length === 3 });
    expect(first.map((f) => Number(f.id))).toEqual([1, 2, 3]);
    // The server ends its reader when the client goes away.
    await waitForSpan("gateway GET /v1/sessions/:id/events", (s) => s.attributes["tack.session_id"] === session.id);

    for (let i = 1; i <= 3; i++) await post(session.id, `while away ${i}`);
    const received: Frame[] = [];
    const away = (await logOf(session.id)).at(-1)!.seq;
    const isLive = (f: Frame) => f.event === "user/message" && JSON.parse(f.data!).userMessage.text === "live";
    const resumed = readEvents(session.id, { lastEventId: first.at(-1)!.id, until: (e) => isLive(e.at(-1)!), into: received });
    // Once the stream has caught up on what was logged while away, append live.
    await waitFor(`the resumed stream to catch up to seq ${away}`, () => received.at(-1)?.id === String(away), { timeoutMs: 5_000, intervalMs: 10 });
    const live = await post(session.id, "live");
    const second = await resumed;
    const seqs = [...first, ...second].map((f) => Number(f.id));
    expect(seqs).toEqual(Array.from({ length: live.seq }, (_, i) => i + 1));
  });

  it("events - an idle follow stream sends keepalive comments", async () => {
    const session = await createSession();
    const next = (await logOf(session.id)).at(-1)!.seq + 1;
    const abort = new AbortController();
    const res = await fetch(`${gateway.url}/v1/sessions/${session.id}/events?from=${next}`, { headers: { authorization: `Bearer ${KEY_ACME}` }, signal: abort.signal });
    try {
      const first = await frames(res).next();
      expect(first.value).toEqual({ comment: "keepalive" });
    } finally {
      abort.abort();
    }
  });

  it("tracing - the request span continues an incoming traceparent and parents the bus request", async () => {
    const traceId = randomBytes(16).toString("hex");
    const parentId = randomBytes(8).toString("hex");
    const res = await call("POST", "/v1/sessions", {
      body: { workspace, model: loop.model },
      headers: { traceparent: `00-${traceId}-${parentId}-01` },
    });
    expect(res.status).toBe(201);
    const server = await waitForSpan("gateway POST /v1/sessions", (s) => s.spanContext().traceId === traceId);
    expect(server.kind).toBe(SpanKind.SERVER);
    expect(server.parentSpanContext?.spanId).toBe(parentId);
    expect(server.attributes).toMatchObject({ "http.response.status_code": 201, "tack.tenant": "acme" });
    const client = await waitForSpan(`request ${rpcSubject(bus.names.namespace, LoopRpc.CreateSession)}`, (s) => s.spanContext().traceId === traceId);
    expect(client.parentSpanContext?.spanId).toBe(server.spanContext().spanId);
    const handled = await waitForSpan(`handle ${rpcSubject(bus.names.namespace, LoopRpc.CreateSession)}`, (s) => s.spanContext().traceId === traceId);
    expect(handled.parentSpanContext?.spanId).toBe(client.spanContext().spanId);
  });

  it("errors - with no loop running, create and post answer 503 saying how to start one", async () => {
    const session = await createSession();
    await loop.stop();
    try {
      const create = await call("POST", "/v1/sessions", { body: { workspace, model: loop.model } });
      expect(create.status).toBe(503);
      expect(create.json.error).toMatchObject({ code: "bus.no_responders", message: `no loop service answers; start Tack with \`tack up\` (request id ${create.json.error.request_id})` });
      const message = await call("POST", `/v1/sessions/${session.id}/messages`, { body: { text: "anyone?" } });
      expect(message.status).toBe(503);
      expect(message.json.error.code).toBe("bus.no_responders");
      expect((await logOf(session.id)).map((e) => e.type)).not.toContain("user/message");
    } finally {
      loop = await RealLoop.start(NATS_URL, namespace);
    }
  });

  it("auth - keys not configured at the next start stop working", async () => {
    const file = join(dir, "rotation.db");
    const options = { natsUrl: NATS_URL, namespace, port: 0, sqlitePath: file };
    const old = await startGateway({ ...options, apiKeys: [{ key: "old-key", tenant: "acme" }] });
    await old.stop();
    const rotated = await startGateway({ ...options, apiKeys: [{ key: "new-key", tenant: "acme" }] });
    try {
      const get = (key: string) => fetch(`${rotated.url}/v1/sessions`, { headers: { authorization: `Bearer ${key}` } }).then((r) => r.status);
      expect(await get("old-key")).toBe(401);
      expect(await get("new-key")).toBe(200);
    } finally {
      await rotated.stop();
    }
  });

  it("stop - ends following event streams and closes", async () => {
    const session = await createSession();
    const other = await startGateway({ natsUrl: NATS_URL, namespace, port: 0, sqlitePath: join(dir, "index.db"), apiKeys: [{ key: KEY_ACME, tenant: "acme" }] });
    const res = await fetch(`${other.url}/v1/sessions/${session.id}/events`, { headers: { authorization: `Bearer ${KEY_ACME}` } });
    const stream = frames(res);
    expect((await stream.next()).value).toMatchObject({ id: "1", event: "session/created" });
    // The rest of what the loop logged at creation arrives before the stream goes idle.
    for (const event of (await logOf(session.id)).slice(1)) expect((await stream.next()).value).toMatchObject({ id: String(event.seq), event: event.type });
    const started = Date.now();
    await other.stop();
    expect(Date.now() - started).toBeLessThan(2_000);
    expect((await stream.next()).done).toBe(true);
  });

  it("options - a missing key is refused at start", async () => {
    await expect(startGateway({ natsUrl: NATS_URL, namespace, port: 0, sqlitePath: ":memory:", apiKeys: [] }))
      .rejects.toMatchObject({ code: "gateway.bad_options", message: expect.stringContaining("TACK_API_KEY") });
  });
});
