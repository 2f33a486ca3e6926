// One contract, two transports: the OpenAPI document against the routes the server has, and the
// same operations through a real grpc-js client (auth in metadata, tenants, catalogue statuses,
// events streamed and resumed), plus archive, list filters with cursors and export over REST.
import { createHash, randomBytes } from "node:crypto";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { credentials, Metadata, type ClientReadableStream, type ServiceError } from "@grpc/grpc-js";
import { Bus, LoopRpc, rpcSubject } from "@tack/bus";
import { readAll } from "@tack/log";
import { gatewayV1, healthV1, type Event } from "@tack/proto";
import { CONTRACT, type Gateway } from "@tack/gateway-service";
import { GatewayStack, type RealLoop } from "./real-loop.js";

const KEY_ACME = `acme-${randomBytes(16).toString("hex")}`;
const KEY_GLOBEX = `globex-${randomBytes(16).toString("hex")}`;

let stack: GatewayStack;
let bus: Bus;
let loop: RealLoop;
let gateway: Gateway;
let client: InstanceType<typeof gatewayV1.GatewayClient>;
let dir: string;
let workspace: string;

beforeAll(async () => {
  stack = await GatewayStack.start({ name: "contract", keys: { acme: KEY_ACME, globex: KEY_GLOBEX }, globexRole: "member", grpc: true, keepaliveMs: 200 });
  ({ bus, loop, gateway, dir, workspace } = stack);
  client = new gatewayV1.GatewayClient(`127.0.0.1:${gateway.grpcPort}`, credentials.createInsecure());
});

afterAll(async () => {
  client?.close();
  await stack?.stop();
});

function metadata(key: string | null = KEY_ACME): Metadata {
  const m = new Metadata();
  if (key !== null) m.set("authorization", `Bearer ${key}`);
  return m;
}

/** One unary gRPC call: resolves with the response or rejects with the ServiceError. */
function rpc<Req, Res>(name: string, request: Req, key: string | null = KEY_ACME): Promise<Res> {
  const method = (client as unknown as Record<string, (r: Req, m: Metadata, cb: (e: ServiceError | null, v: Res) => void) => void>)[name]!.bind(client);
  return new Promise((resolve, reject) => method(request, metadata(key), (error, value) => (error ? reject(error) : resolve(value))));
}

async function rejected(promise: Promise<unknown>): Promise<ServiceError> {
  try {
    await promise;
  } catch (error) {
    return error as ServiceError;
  }
  throw new Error("the call succeeded");
}

async function rest(method: string, path: string, body?: unknown, key: string | null = KEY_ACME) {
  const headers: Record<string, string> = {};
  if (key !== null) headers.authorization = `Bearer ${key}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(`${gateway.url}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : undefined, headers: res.headers };
}

/** Collects events of a gRPC stream until `until` says stop, then cancels it. */
function collect(stream: ClientReadableStream<Event>, until: (events: Event[]) => boolean): Promise<Event[]> {
  const events: Event[] = [];
  return new Promise((resolve, reject) => {
    stream.on("data", (event: Event) => {
      events.push(event);
      if (until(events)) {
        stream.cancel();
        resolve(events);
      }
    });
    stream.on("error", (error: ServiceError) => (error.code === 1 ? resolve(events) : reject(error)));
    stream.on("end", () => resolve(events));
  });
}

describe("contract", () => {
  it("openapi - served without a key, OpenAPI 3.1, every route the server has is in it and every $ref resolves", async () => {
    const res = await rest("GET", "/v1/openapi.json", undefined, null);
    expect(res.status).toBe(200);
    const doc = res.json as { openapi: string; info: { title: string; version: string }; paths: Record<string, Record<string, { operationId: string; responses: Record<string, unknown>; parameters?: { name: string; in: string }[] }>>; components: { schemas: Record<string, unknown>; securitySchemes: Record<string, unknown> } };
    expect(doc.openapi).toBe("3.1.0");
    expect(doc.info.title).toBeTruthy();
    expect(doc.components.securitySchemes.apiKey).toMatchObject({ type: "http", scheme: "bearer" });
    const ids = new Set<string>();
    for (const [path, item] of Object.entries(doc.paths)) {
      expect(path).toMatch(/^\/[a-z0-9_/{}.]*$/);
      for (const [method, op] of Object.entries(item)) {
        expect(["get", "post", "delete"]).toContain(method);
        expect(op.operationId).toBeTruthy();
        expect(ids.has(op.operationId), `operationId ${op.operationId} twice`).toBe(false);
        ids.add(op.operationId);
        expect(Object.keys(op.responses).some((s) => /^2\d\d$/.test(s)), `${method} ${path} has a success response`).toBe(true);
        // Every {param} of the path is declared as a path parameter.
        for (const [, name] of path.matchAll(/\{(\w+)\}/g)) expect(op.parameters?.some((p) => p.name === name && p.in === "path"), `${path}: ${name}`).toBe(true);
      }
    }
    // Every route the server answers (REST) is documented, and every documented one is served.
    const served = gateway.routes.map((r) => `${r.method.toLowerCase()} ${r.url.replace(/:(\w+)/g, "{$1}")}`).sort();
    const documented = Object.entries(doc.paths).flatMap(([path, item]) => Object.keys(item).map((m) => `${m} ${path}`)).sort();
    expect(served).toEqual(documented);
    // Every rpc of the contract is an operation of the document.
    expect(CONTRACT.operations.map((o) => o.rpc).filter((r) => !ids.has(r))).toEqual([]);
    const refs = [...JSON.stringify(doc).matchAll(/"\$ref":"#\/components\/schemas\/(\w+)"/g)].map((m) => m[1]!);
    expect(refs.length).toBeGreaterThan(20);
    for (const ref of refs) expect(doc.components.schemas[ref], ref).toBeDefined();
  });

  it("grpc - the key is required in metadata and checked like REST", async () => {
    const none = await rejected(rpc("listSessions", gatewayV1.ListSessionsRequest.fromPartial({}), null));
    expect(none.code, none.details).toBe(16);
    expect(none.details).toContain("Authorization: Bearer <key>");
    expect(none.metadata.get("tack-error-code")).toEqual(["gateway.missing_api_key"]);
    const wrong = await rejected(rpc("listSessions", gatewayV1.ListSessionsRequest.fromPartial({}), "nope"));
    expect(wrong.code).toBe(16);
    expect(wrong.metadata.get("tack-error-code")).toEqual(["gateway.invalid_api_key"]);
    const member = await rejected(rpc("listKeys", {}, KEY_GLOBEX));
    expect(member.code).toBe(7);
    expect(member.details).toContain("gRPC ListKeys needs an admin key of tenant globex");
  });

  it("grpc - the standard health service answers SERVING for the server and the gateway's service, without a key", async () => {
    const health = new healthV1.HealthClient(`127.0.0.1:${gateway.grpcPort}`, credentials.createInsecure());
    try {
      const check = (service: string) => new Promise<healthV1.HealthCheckResponse>((resolve, reject) => health.check({ service }, (e: ServiceError | null, v: healthV1.HealthCheckResponse) => (e ? reject(e) : resolve(v))));
      expect((await check("")).status).toBe(healthV1.HealthCheckResponse_ServingStatus.SERVING);
      expect((await check(CONTRACT.service)).status).toBe(healthV1.HealthCheckResponse_ServingStatus.SERVING);
    } finally {
      health.close();
    }
  });

  it("grpc - create, get, message and decide through gRPC; REST sees the same session; another tenant's is NOT_FOUND", async () => {
    const created = await rpc<gatewayV1.CreateSessionRequest, gatewayV1.Session>("createSession", { workspace, model: loop.askWideModel, mode: "", planMode: false, approvalPolicy: "", title: "over grpc" });
    expect(created).toMatchObject({ tenant: "acme", title: "over grpc", mode: "standard", sandboxMode: "workspace-write", approvalPolicy: "ask", workspace, archived: false });
    expect((await rest("GET", `/v1/sessions/${created.id}`)).json).toMatchObject({ id: created.id, title: "over grpc" });
    const log = () => readAll(bus.nc, bus.names, { tenant: "acme", sessionId: created.id });
    const lastSeq = (await log()).at(-1)!.seq;
    const got = await rpc<gatewayV1.GetSessionRequest, gatewayV1.SessionDetail>("getSession", { id: created.id });
    expect(got).toMatchObject({ id: created.id, lastSeq, mode: "standard", planMode: false, waiting: [], usage: { costUsd: 0 } });
    // The scripted model's first reply asks to run bash in danger-full-access: the loop parks it.
    expect(await rpc("submitMessage", { id: created.id, text: "hello" })).toEqual({ seq: lastSeq + 1, turn: 1 });
    const askedSeq = await loop.asked("acme", created.id);
    const detail = await rpc<gatewayV1.GetSessionRequest, gatewayV1.SessionDetail>("getSession", { id: created.id });
    expect(detail.waiting).toMatchObject([{ kind: "approval", callId: "call_0_0", tool: "bash", seq: askedSeq }]);
    const decided = await rpc<gatewayV1.DecideApprovalRequest, { seq: number }>("decideApproval", { id: created.id, callId: "call_0_0", decision: "allow_once" });
    const decision = (await log()).find((e) => e.seq === decided.seq);
    expect(decision?.payload).toEqual({ $case: "approvalDecided", value: {
      callId: "call_0_0", decision: "allow_once", decidedBy: "acme", decidedByKey: "TACK_API_KEY", decidedByKeyId: createHash("sha256").update(KEY_ACME).digest("hex").slice(0, 12),
    } });
    await loop.idle("acme", created.id);
    const length = (await log()).length;

    const foreign = await rejected(rpc("getSession", { id: created.id }, KEY_GLOBEX));
    expect(foreign.code).toBe(5);
    expect(foreign.metadata.get("tack-error-code")).toEqual(["gateway.session_not_found"]);
    expect((await rejected(rpc("submitMessage", { id: created.id, text: "hi" }, KEY_GLOBEX))).code).toBe(5);
    expect(await log()).toHaveLength(length);
  });

  it("grpc - requests are validated by the same schemas: INVALID_ARGUMENT naming the field, nothing asked of the loop", async () => {
    const session = await rpc<gatewayV1.CreateSessionRequest, gatewayV1.Session>("createSession", { workspace, model: loop.model, mode: "", planMode: false, approvalPolicy: "", title: "" });
    loop.subjects.length = 0;
    const empty = await rejected(rpc("submitMessage", { id: session.id, text: "" }));
    expect(empty.code).toBe(3);
    expect(empty.details).toBe("invalid request body: text: is required: the message to send");
    const blank = await rejected(rpc("submitMessage", { id: session.id, text: "  " }));
    expect(blank.details).toBe("invalid request body: text: must not be empty");
    const decision = await rejected(rpc("decideApproval", { id: session.id, callId: "c", decision: "maybe" }));
    expect(decision.details).toBe('invalid request body: decision: must be "allow_once" or "reject", got "maybe"');
    const model = await rejected(rpc("createSession", { workspace, model: "nocolon", mode: "", planMode: false, approvalPolicy: "", title: "" }));
    expect(model.details).toContain("model: must be <provider>:<model>");
    const loopFailure = await rejected(rpc("createSession", { workspace, model: "fail:model", mode: "", planMode: false, approvalPolicy: "", title: "" }));
    // The loop checks the model with the llm service and passes its refusal on: the catalogue's
    // status for llm.unknown_model, its code in metadata, and its message (a caller error).
    expect(loopFailure.code).toBe(3);
    expect(loopFailure.metadata.get("tack-error-code")).toEqual(["llm.unknown_model"]);
    expect(loopFailure.details).toContain('unknown model "fail:model"');
    expect(loop.subjects).toEqual([rpcSubject(bus.names.namespace, LoopRpc.CreateSession)]);
  });

  it("grpc - events stream from a seq, follow live appends, and resume after the last seq received", async () => {
    const session = await rpc<gatewayV1.CreateSessionRequest, gatewayV1.Session>("createSession", { workspace, model: loop.model, mode: "", planMode: false, approvalPolicy: "", title: "" });
    // Each message starts a turn of the real loop; the next is sent once it ended.
    const sent: number[] = [];
    for (const text of ["one", "two", "three"]) {
      sent.push((await rpc<gatewayV1.SubmitMessageRequest, { seq: number }>("submitMessage", { id: session.id, text })).seq);
      await loop.idle("acme", session.id);
    }
    const logged = await readAll(bus.nc, bus.names, { tenant: "acme", sessionId: session.id });
    const upToNow = await collect(client.streamEvents({ id: session.id, from: String(sent[0]), follow: "0" }, metadata()), () => false);
    expect(upToNow.map((e) => [e.seq, e.type])).toEqual(logged.filter((e) => e.seq >= sent[0]!).map((e) => [e.seq, e.type]));
    expect(upToNow.filter((e) => e.type === "user/message").map((e) => e.seq)).toEqual(sent);

    const live: Event[] = [];
    const isLive = (e: Event) => e.payload?.$case === "userMessage" && e.payload.value.text === "live";
    const following = collect(client.streamEvents({ id: session.id, from: "", follow: "" }, metadata()), (events) => {
      live.splice(0, live.length, ...events);
      return events.some(isLive);
    });
    await new Promise((resolve) => setTimeout(resolve, 300));
    const liveSeq = (await rpc<gatewayV1.SubmitMessageRequest, { seq: number }>("submitMessage", { id: session.id, text: "live" })).seq;
    expect((await following).map((e) => e.seq)).toEqual(Array.from({ length: liveSeq }, (_, i) => i + 1));
    await loop.idle("acme", session.id);
    const resumed = await collect(client.streamEvents({ id: session.id, from: String(live.at(-1)!.seq - 1), follow: "0" }, metadata()), () => false);
    expect(resumed.slice(0, 2).map((e) => e.seq)).toEqual([liveSeq - 1, liveSeq]);
    expect(resumed[1]!.payload).toEqual({ $case: "userMessage", value: expect.objectContaining({ text: "live" }) });

    const bad = await rejected(collect(client.streamEvents({ id: session.id, from: "zero", follow: "" }, metadata()), () => false));
    expect(bad.code).toBe(3);
    expect(bad.details).toBe('from must be the first seq to send (an integer ≥ 1), got "zero"');
    const foreign = await rejected(collect(client.streamEvents({ id: session.id, from: "", follow: "0" }, metadata(KEY_GLOBEX)), () => false));
    expect(foreign.code).toBe(5);
  });

  it("sessions - archive hides from the list unless archived=true; filters by workspace and time; cursor pages; export bundles the log", async () => {
    const other = join(dir, "other");
    mkdirSync(other);
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const res = await rest("POST", "/v1/sessions", { workspace: other, model: loop.model, title: `s${i}` });
      expect(res.status).toBe(201);
      ids.push(res.json.id);
      await new Promise((resolve) => setTimeout(resolve, 3));
    }
    const archived = await rpc<gatewayV1.ArchiveSessionRequest, gatewayV1.Session>("archiveSession", { id: ids[0]! });
    expect(archived.archived).toBe(true);
    const visible = await rest("GET", `/v1/sessions?workspace=${encodeURIComponent(other)}`);
    expect(visible.json.sessions.map((s: { id: string }) => s.id)).toEqual(ids.slice(1).reverse());
    const onlyArchived = await rest("GET", `/v1/sessions?workspace=${encodeURIComponent(other)}&archived=true`);
    expect(onlyArchived.json.sessions.map((s: { id: string }) => s.id)).toEqual([ids[0]]);
    expect((await rest("POST", `/v1/sessions/${ids[0]}/archive`, { archived: false })).json.archived).toBe(false);

    // Pages of two by cursor: every session once, newest first, no cursor on the last page.
    const seen: string[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 5; page++) {
      const res = await rest("GET", `/v1/sessions?workspace=${encodeURIComponent(other)}&limit=2${cursor ? `&cursor=${cursor}` : ""}`);
      expect(res.status).toBe(200);
      seen.push(...res.json.sessions.map((s: { id: string }) => s.id));
      cursor = res.json.next_cursor;
      if (!cursor) break;
    }
    expect(seen).toEqual([...ids].reverse());
    const first = (await rest("GET", `/v1/sessions/${ids[2]}`)).json.created_at as string;
    const before = await rest("GET", `/v1/sessions?workspace=${encodeURIComponent(other)}&created_before=${encodeURIComponent(first)}`);
    expect(before.json.sessions.map((s: { id: string }) => s.id)).toEqual([ids[1], ids[0]]);
    const after = await rest("GET", `/v1/sessions?workspace=${encodeURIComponent(other)}&created_after=${encodeURIComponent(first)}`);
    expect(after.json.sessions.map((s: { id: string }) => s.id)).toEqual([ids[4], ids[3]]);
    const badTime = await rest("GET", "/v1/sessions?created_before=yesterday");
    expect(badTime.status).toBe(400);
    expect(badTime.json.error.message).toBe("invalid query: created_before: must be an ISO-8601 time such as 2025-01-31T12:00:00Z");
    const badCursor = await rest("GET", "/v1/sessions?cursor=abc");
    expect(badCursor.status).toBe(400);
    expect(badCursor.json.error.code).toBe("gateway.invalid_query");

    await rest("POST", `/v1/sessions/${ids[1]}/messages`, { text: "to export" });
    await loop.idle("acme", ids[1]!);
    const logged = await readAll(bus.nc, bus.names, { tenant: "acme", sessionId: ids[1]! });
    expect(logged.map((e) => e.type)).toContain("user/message");
    const exported = await rest("GET", `/v1/sessions/${ids[1]}/export`);
    expect(exported.status).toBe(200);
    expect(exported.json).toMatchObject({ format: "tack.session-bundle/v1", session: { id: ids[1], workspace: other }, objects: [] });
    expect(exported.json.events.map((e: { seq: number; type: string }) => [e.seq, e.type])).toEqual(logged.map((e) => [e.seq, e.type]));
    const overGrpc = await rpc<gatewayV1.ExportSessionRequest, gatewayV1.SessionBundle>("exportSession", { id: ids[1]! });
    expect(overGrpc.events.map((e) => e.type)).toEqual(logged.map((e) => e.type));
    expect((await rest("GET", `/v1/sessions/${ids[1]}/export`, undefined, KEY_GLOBEX)).status).toBe(404);
  });
});
