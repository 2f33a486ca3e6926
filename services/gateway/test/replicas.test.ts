// Two gateway replicas on one PostgreSQL index and one NATS namespace serve the same sessions and
// keys: what one creates, the other reads, lists, uses and revokes.
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createParser } from "eventsource-parser";
import { Bus } from "@tack/bus";
import { compileOperatorConfig, type OperatorConfig } from "@tack/config";
import { ensureLogStream, readAll } from "@tack/log";
import { removeNamespace } from "@tack/testkit";
import { startGateway, type Gateway, type GatewayOptions } from "@tack/gateway-service";
import { RealLoop } from "./real-loop.js";
import { createTestDatabase, type TestDatabase } from "./postgres.js";

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const namespace = `t${randomBytes(5).toString("hex")}`;
const ADMIN = `acme-admin-${randomBytes(16).toString("hex")}`;
const GLOBEX = `globex-${randomBytes(16).toString("hex")}`;

let dir: string;
let workspace: string;
let operator: OperatorConfig;
let database: TestDatabase;
let bus: Bus;
let loop: RealLoop;
let a: Gateway;
let b: Gateway;

function options(): GatewayOptions {
  return {
    natsUrl: NATS_URL, namespace, port: 0, postgresUrl: database.url, keepaliveMs: 200, operator,
    apiKeys: [{ key: ADMIN, tenant: "acme" }, { key: GLOBEX, tenant: "globex", role: "member" }],
  };
}

beforeAll(async () => {
  dir = realpathSync(mkdtempSync(join(tmpdir(), "tack-replicas-")));
  workspace = join(dir, "project");
  mkdirSync(workspace);
  operator = compileOperatorConfig({
    tenants: Object.fromEntries(["acme", "globex"].map((t) => [t, { workspace_roots: [dir], max_sandbox_mode: "danger-full-access" }])),
  }, { stateDir: join(dir, "state"), baseDir: dir, source: undefined });
  database = await createTestDatabase("replicas");
  bus = await Bus.connect({ url: NATS_URL, namespace, name: "replicas-test" });
  await ensureLogStream(bus.nc, bus.names);
  loop = await RealLoop.start(NATS_URL, namespace);
  // Both start at once on the new database: one migrates it, the other waits for the lock and finds it done.
  [a, b] = await Promise.all([startGateway(options()), startGateway(options())]);
});

afterAll(async () => {
  await a?.stop();
  await b?.stop();
  await loop?.stop();
  if (bus) await removeNamespace(bus.nc, namespace).catch(() => undefined);
  await bus?.close();
  await database?.drop();
  rmSync(dir, { recursive: true, force: true });
});

async function call(gateway: Gateway, method: string, path: string, key: string, body?: unknown) {
  const headers: Record<string, string> = { authorization: `Bearer ${key}` };
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(`${gateway.url}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, json: text && res.headers.get("content-type")?.startsWith("application/json") ? JSON.parse(text) : undefined, text };
}

describe("gateway replicas on one PostgreSQL index", () => {
  it("replicas - both answer their health check on the shared index", async () => {
    for (const gateway of [a, b]) {
      const res = await fetch(`${gateway.url}/healthz`);
      expect(res.status).toBe(200);
    }
  });

  it("replicas - a session created through one is read, listed and used through the other", async () => {
    const created = await call(a, "POST", "/v1/sessions", ADMIN, { workspace, model: loop.model, title: "shared" });
    expect(created.status, created.text).toBe(201);
    const id = created.json.id as string;

    const got = await call(b, "GET", `/v1/sessions/${id}`, ADMIN);
    expect(got.status, got.text).toBe(200);
    const logged = await readAll(bus.nc, bus.names, { tenant: "acme", sessionId: id });
    expect(got.json).toMatchObject({ id, tenant: "acme", title: "shared", workspace, created_at: created.json.created_at, last_seq: logged.at(-1)!.seq });
    const listed = await call(b, "GET", "/v1/sessions", ADMIN);
    expect((listed.json.sessions as { id: string }[]).map((s) => s.id)).toContain(id);

    const posted = await call(b, "POST", `/v1/sessions/${id}/messages`, ADMIN, { text: "hello from b" });
    expect(posted.status, posted.text).toBe(202);
    await loop.idle("acme", id);
    const events = await call(a, "GET", `/v1/sessions/${id}/events?follow=0`, ADMIN);
    expect(events.status).toBe(200);
    // The real loop ran the turn the message started: the other replica serves all of it.
    const types: (string | undefined)[] = [];
    createParser({ onEvent: (message) => types.push(message.event) }).feed(events.text);
    expect(types[0]).toBe("session/created");
    expect(types).toContain("user/message");
    expect(types).toContain("assistant/message");
    expect(types.at(-1)).toBe("turn/end");

    const mode = await call(b, "POST", `/v1/sessions/${id}/sandbox_mode`, ADMIN, { mode: "read-only" });
    expect(mode.status, mode.text).toBe(200);
    expect((await call(a, "GET", `/v1/sessions/${id}`, ADMIN)).json.sandbox_mode).toBe("read-only");

    // Another tenant sees it through neither.
    for (const gateway of [a, b]) expect((await call(gateway, "GET", `/v1/sessions/${id}`, GLOBEX)).status).toBe(404);
    expect((await call(a, "GET", "/v1/admin/tenants", ADMIN)).json.tenants[0].usage.sessions).toBe(1);
  });

  it("replicas - a key created through one works through the other, and a revocation through the other ends it at once on both", async () => {
    const created = await call(a, "POST", "/v1/admin/keys", ADMIN, { name: "ci", role: "member" });
    expect(created.status, created.text).toBe(201);
    const { key, id } = created.json as { key: string; id: string };

    const listed = await call(b, "GET", "/v1/sessions", key);
    expect(listed.status, listed.text).toBe(200);
    expect(listed.json.sessions.length).toBe(1);
    const keys = await call(b, "GET", "/v1/admin/keys", ADMIN);
    expect(keys.json.keys).toContainEqual(expect.objectContaining({ id, name: "ci", role: "member", source: "api", revoked_at: null }));

    const revoked = await call(b, "DELETE", `/v1/admin/keys/${id}`, ADMIN);
    expect(revoked.status, revoked.text).toBe(200);
    for (const gateway of [a, b]) {
      const refused = await call(gateway, "GET", "/v1/sessions", key);
      expect(refused.status).toBe(401);
      expect(refused.json.error.code).toBe("gateway.invalid_api_key");
    }
  });

  it("replicas - a replica restarted keeps what the other created, and the keys created over the API", async () => {
    const created = await call(b, "POST", "/v1/admin/keys", ADMIN, { name: "survivor" });
    expect(created.status).toBe(201);
    await a.stop();
    a = await startGateway(options());
    expect((await call(a, "GET", "/v1/sessions", created.json.key)).status).toBe(200);
    const sessions = await call(a, "GET", "/v1/sessions", ADMIN);
    expect(sessions.json.sessions.map((s: { title: string }) => s.title)).toEqual(["shared"]);
  });

  it("replicas - a session archived through one is seen so through the other at once, though both keep rows for a second", async () => {
    const created = await call(a, "POST", "/v1/sessions", ADMIN, { workspace, model: loop.model, title: "cached" });
    expect(created.status, created.text).toBe(201);
    const id = created.json.id as string;
    // Both have read the row now (and would use it for a second unless told of a change).
    for (const gateway of [a, b]) expect((await call(gateway, "GET", `/v1/sessions/${id}`, ADMIN)).json.archived).toBe(false);
    expect((await call(b, "POST", `/v1/sessions/${id}/archive`, ADMIN, { archived: true })).status).toBe(200);
    expect((await call(a, "GET", `/v1/sessions/${id}`, ADMIN)).json.archived).toBe(true);
    expect((await call(a, "POST", `/v1/sessions/${id}/archive`, ADMIN, { archived: false })).status).toBe(200);
    expect((await call(b, "GET", `/v1/sessions/${id}`, ADMIN)).json.archived).toBe(false);
  });
});
