// REST and gRPC answer the same data: each operation answers its response message once; gRPC
// sends it, REST writes it with the generated encoder (src/gen/rest-json.ts). And a bundle whose
// object data is not base64 is refused by the request schema (SpillObject's @pattern) with a 400.
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { credentials, Metadata, type ServiceError } from "@grpc/grpc-js";
import { gatewayV1 } from "@tack/proto";
import { restGetContextResponse, restListAuditResponse, restListSessionsResponse, restListWorkspacesResponse, restSessionBundle, restSessionDetail, restTodo } from "../src/gen/rest-json.js";
import { GatewayStack } from "./real-loop.js";

const KEY = `acme-${randomBytes(16).toString("hex")}`;
let stack: GatewayStack;
let client: InstanceType<typeof gatewayV1.GatewayClient>;

beforeAll(async () => {
  stack = await GatewayStack.start({ name: "rest-grpc", keys: { acme: KEY, globex: `globex-${randomBytes(16).toString("hex")}` }, grpc: true });
  client = new gatewayV1.GatewayClient(`127.0.0.1:${stack.gateway.grpcPort}`, credentials.createInsecure());
});

afterAll(async () => {
  client?.close();
  await stack?.stop();
});

/** One unary gRPC call by method name. */
function rpc<Res>(name: keyof typeof gatewayV1.GatewayService, request: unknown): Promise<Res> {
  const metadata = new Metadata();
  metadata.set("authorization", `Bearer ${KEY}`);
  const method = Reflect.get(client, name) as (r: unknown, m: Metadata, cb: (e: ServiceError | null, v: Res) => void) => void;
  return new Promise((resolve, reject) => method.call(client, request, metadata, (error, value) => (error ? reject(error) : resolve(value))));
}

/** One REST call: its status and its body as text (compared byte for byte). */
async function rest(method: string, path: string, body?: unknown): Promise<{ status: number; text: string }> {
  const headers: Record<string, string> = { authorization: `Bearer ${KEY}` };
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(`${stack.gateway.url}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: res.status, text: await res.text() };
}

describe("rest and grpc", () => {
  it("give the same data: the REST body is byte for byte the encoder's form of the gRPC message (sessions, a session, its context, todos, export, audit, workspaces)", async () => {
    const created = await rest("POST", "/v1/sessions", { workspace: stack.workspace, model: stack.loop.model, title: "both" });
    expect(created.status, created.text).toBe(201);
    const { id } = JSON.parse(created.text) as { id: string };
    const same = async <Res>(path: string, name: keyof typeof gatewayV1.GatewayService, request: unknown, encode: (m: Res) => unknown) => {
      const overRest = await rest("GET", path);
      expect(overRest.status, overRest.text).toBe(200);
      expect(overRest.text).toBe(JSON.stringify(encode(await rpc<Res>(name, request))));
      return JSON.parse(overRest.text) as Record<string, unknown>;
    };
    const detail = await same(`/v1/sessions/${id}`, "getSession", { id }, restSessionDetail);
    expect(detail).toMatchObject({ id, title: "both", plan_mode: false, todos: [], waiting: [], usage: { cost_usd: 0 } });
    expect(await same(`/v1/sessions/${id}/context`, "getContext", { id }, restGetContextResponse)).toEqual({ session: id, tokens: null, note: expect.any(String) });
    expect(await same(`/v1/sessions/${id}/todos`, "getTodos", { id }, (m: gatewayV1.GetTodosResponse) => ({ todos: m.todos.map(restTodo) }))).toEqual({ todos: [] });
    const list = await same("/v1/sessions?limit=1", "listSessions", { limit: 1, offset: 0 }, restListSessionsResponse);
    expect(list).toMatchObject({ limit: 1, offset: 0 });
    expect(list).not.toHaveProperty("next_cursor");
    await same(`/v1/sessions/${id}/export`, "exportSession", { id }, restSessionBundle);
    await same("/v1/workspaces", "listWorkspaces", {}, restListWorkspacesResponse);

    // A call waiting for a person (the scripted model asks to widen the sandbox), then decided: an audit record.
    const asking = JSON.parse((await rest("POST", "/v1/sessions", { workspace: stack.workspace, model: stack.loop.askWideModel })).text) as { id: string };
    expect((await rest("POST", `/v1/sessions/${asking.id}/messages`, { text: "hello" })).status).toBe(202);
    await stack.loop.asked("acme", asking.id);
    const waiting = await same(`/v1/sessions/${asking.id}`, "getSession", { id: asking.id }, restSessionDetail);
    expect(waiting.waiting).toEqual([expect.objectContaining({ kind: "approval", call_id: "call_0_0", tool: "bash", approval_kind: "sandbox" })]);
    expect(waiting.waiting).not.toContainEqual(expect.objectContaining({ plan: expect.anything() }));
    const decided = await rest("POST", `/v1/sessions/${asking.id}/approvals/call_0_0`, { decision: "reject" });
    expect(decided.status, decided.text).toBe(200);
    await stack.loop.idle("acme", asking.id);
    const audit = await same("/v1/audit?limit=5", "listAudit", { limit: 5, offset: 0 }, restListAuditResponse);
    // `details` is JSON text in the message and the object itself over REST.
    expect(audit.records).toEqual([expect.objectContaining({ action: "approval.decide", session_id: asking.id, key_name: "TACK_API_KEY", details: expect.any(Object) })]);
  }, 60_000);

  it("a bundle whose object data is not base64 is refused with a 400 naming the field; nothing is imported", async () => {
    const created = await rest("POST", "/v1/sessions", { workspace: stack.workspace, model: stack.loop.model });
    const { id } = JSON.parse(created.text) as { id: string };
    const bundle = JSON.parse((await rest("GET", `/v1/sessions/${id}/export`)).text) as Record<string, unknown>;
    const before = JSON.parse((await rest("GET", "/v1/sessions")).text) as { sessions: unknown[] };
    for (const objects of [[{ name: `acme.${id}.x`, data: "not base64!" }], [{ name: `acme.${id}.x` }], [{ name: "", data: "AAAA" }]]) {
      const refused = await rest("POST", "/v1/sessions/import", { ...bundle, objects });
      expect(refused.status, refused.text).toBe(400);
      const { error } = JSON.parse(refused.text) as { error: { code: string; message: string; details: Record<string, string> } };
      expect(error.code).toBe("gateway.invalid_request");
      expect(Object.keys(error.details)[0]).toMatch(/^objects\.0\.(data|name)$/);
    }
    const bad = JSON.parse((await rest("POST", "/v1/sessions/import", { ...bundle, objects: [{ name: "o", data: "not base64!" }] })).text) as { error: { message: string } };
    expect(bad.error.message).toContain("objects.0.data: must be the object's bytes in base64");
    expect((JSON.parse((await rest("GET", "/v1/sessions")).text) as { sessions: unknown[] }).sessions).toHaveLength(before.sessions.length);
  }, 60_000);
});
