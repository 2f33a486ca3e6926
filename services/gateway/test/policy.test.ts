// Keys, roles and tenant policy at the gateway, from the side of an attacker who holds a valid
// key of another tenant, and of a tenant that runs into each of its limits.
import { createHash, randomBytes } from "node:crypto";
import { chmodSync, mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import SQLite from "better-sqlite3";
import { createParser, type EventSourceMessage } from "eventsource-parser";
import { Bus, LoopRpc, rpcSubject } from "@tack/bus";
import { compileOperatorConfig, type OperatorConfig } from "@tack/config";
import { ensureLogStream, readAll } from "@tack/log";
import { removeNamespace, waitFor } from "@tack/testkit";
import { startGateway, type Gateway } from "@tack/gateway-service";
import { RealLoop } from "./real-loop.js";

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const namespace = `t${randomBytes(5).toString("hex")}`;
const key = (label: string) => `${label}-${randomBytes(16).toString("hex")}`;
const sha256 = (text: string) => createHash("sha256").update(text).digest("hex");

const KEYS = {
  acmeAdmin: key("acme-admin"), acmeMember: key("acme-member"), globexAdmin: key("globex-admin"), globexMember: key("globex-member"),
  narrow: key("narrow"), few: key("few"), race: key("race"), ratey: key("ratey"), local: key("local"),
};
const MEMBER_ENV = `TACK_TEST_MEMBER_KEY_${randomBytes(4).toString("hex").toUpperCase()}`;

let dir: string;
let workspace: string;
let dbFile: string;
let operator: OperatorConfig;
let bus: Bus;
let loop: RealLoop;
let gateway: Gateway;

/** The operator configuration of these tests: two ordinary tenants and one tenant per limit. */
function configure(keyFile: string): OperatorConfig {
  const roots = { workspace_roots: [dir] };
  // Tack's state lies beside the workspace, never around it: a workspace may not overlap it.
  return compileOperatorConfig({
    tenants: {
      acme: { ...roots, max_sandbox_mode: "danger-full-access" },
      globex: { ...roots, max_sandbox_mode: "danger-full-access" },
      narrow: { ...roots, max_sandbox_mode: "read-only", model_providers: ["scripted"] },
      few: { ...roots, max_sessions: 2, max_event_streams: 1 },
      race: { ...roots, max_sessions: 2 },
      ratey: { ...roots, requests_per_minute: 3 },
      local: roots,
    },
    keys: [
      { tenant: "acme", role: "admin", name: "acme ops", sha256: sha256(KEYS.acmeAdmin) },
      { tenant: "acme", role: "member", name: "acme ci", env: MEMBER_ENV },
      { tenant: "globex", role: "admin", name: "globex ops", file: keyFile },
      { tenant: "globex", name: "globex dev", sha256: sha256(KEYS.globexMember) },
      { tenant: "narrow", role: "admin", sha256: sha256(KEYS.narrow) },
      { tenant: "few", role: "admin", sha256: sha256(KEYS.few) },
      { tenant: "race", sha256: sha256(KEYS.race) },
      { tenant: "ratey", sha256: sha256(KEYS.ratey) },
    ],
  }, { stateDir: join(dir, "state"), baseDir: dir, source: join(dir, "operator.yaml") });
}

beforeAll(async () => {
  dir = realpathSync(mkdtempSync(join(tmpdir(), "tack-policy-")));
  workspace = join(dir, "project");
  mkdirSync(workspace);
  dbFile = join(dir, "index.db");
  const keyFile = join(dir, "globex.key");
  writeFileSync(keyFile, `${KEYS.globexAdmin}\n`, { mode: 0o600 });
  process.env[MEMBER_ENV] = KEYS.acmeMember;
  operator = configure(keyFile);
  bus = await Bus.connect({ url: NATS_URL, namespace, name: "policy-test" });
  await ensureLogStream(bus.nc, bus.names);
  loop = await RealLoop.start(NATS_URL, namespace);
  gateway = await startGateway({
    natsUrl: NATS_URL, namespace, port: 0, sqlitePath: dbFile, keepaliveMs: 200, operator,
    apiKeys: [{ key: KEYS.local, tenant: "local" }],
  });
});

afterAll(async () => {
  await gateway?.stop();
  await loop?.stop();
  await removeNamespace(bus.nc, namespace).catch(() => undefined);
  await bus?.close();
  delete process.env[MEMBER_ENV];
  rmSync(dir, { recursive: true, force: true });
});

/** Calls a gateway (default the shared one) with a key and a JSON body. */
async function call(method: string, path: string, as: string, body?: unknown, url = gateway.url) {
  const headers: Record<string, string> = { authorization: `Bearer ${as}` };
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(`${url}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  const json = text && res.headers.get("content-type")?.startsWith("application/json") ? JSON.parse(text) : undefined;
  return { status: res.status, headers: res.headers, json, text };
}

async function createSession(as: string, body: Record<string, unknown> = {}) {
  const res = await call("POST", "/v1/sessions", as, { workspace, model: loop.model, ...body });
  expect(res.status, JSON.stringify(res.json)).toBe(201);
  return res.json as { id: string; tenant: string; sandbox_mode: string };
}

/** Sessions of `tenant` in the index. */
function indexCount(tenant: string): number {
  const sqlite = new SQLite(dbFile, { readonly: true });
  try {
    return (sqlite.prepare("select count(*) as n from sessions where tenant = ?").get(tenant) as { n: number }).n;
  } finally {
    sqlite.close();
  }
}

const creates = () => loop.subjects.filter((s) => s === rpcSubject(bus.names.namespace, LoopRpc.CreateSession)).length;

/**
 * Opens an event stream; `next` reads the next message (eventsource-parser skips the keepalive comments),
 * undefined once the server ended the stream.
 */
async function openStream(id: string, as: string, url = gateway.url) {
  const abort = new AbortController();
  const res = await fetch(`${url}/v1/sessions/${id}/events`, { headers: { authorization: `Bearer ${as}` }, signal: abort.signal });
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  const queue: EventSourceMessage[] = [];
  const parser = createParser({ onEvent: (message) => queue.push(message) });
  const next = async (): Promise<EventSourceMessage | undefined> => {
    while (queue.length === 0) {
      const { value, done } = await reader.read();
      if (done) return undefined;
      parser.feed(value);
    }
    return queue.shift();
  };
  return { res, next, close: () => abort.abort() };
}

describe("tenants - an attacker with a valid key of another tenant", () => {
  it("keys - sha256, env and 0600-file keys all open their tenant; the index keeps hashes with role, name and source", async () => {
    for (const [as, tenant] of [[KEYS.acmeAdmin, "acme"], [KEYS.acmeMember, "acme"], [KEYS.globexAdmin, "globex"], [KEYS.globexMember, "globex"], [KEYS.local, "local"]] as const) {
      const res = await call("GET", "/v1/usage", as);
      expect(res.status, res.text).toBe(200);
      expect(res.json.tenant).toBe(tenant);
    }
    const sqlite = new SQLite(dbFile, { readonly: true });
    try {
      const rows = sqlite.prepare("select hash, tenant, role, name, source, revoked_at from api_keys where tenant in ('acme', 'globex', 'local') order by tenant, name").all();
      expect(rows).toEqual([
        { hash: sha256(KEYS.acmeMember), tenant: "acme", role: "member", name: "acme ci", source: "config", revoked_at: null },
        { hash: sha256(KEYS.acmeAdmin), tenant: "acme", role: "admin", name: "acme ops", source: "config", revoked_at: null },
        { hash: sha256(KEYS.globexMember), tenant: "globex", role: "member", name: "globex dev", source: "config", revoked_at: null },
        { hash: sha256(KEYS.globexAdmin), tenant: "globex", role: "admin", name: "globex ops", source: "config", revoked_at: null },
        { hash: sha256(KEYS.local), tenant: "local", role: "admin", name: "TACK_API_KEY", source: "env", revoked_at: null },
      ]);
      const dump = JSON.stringify(sqlite.prepare("select * from api_keys").all());
      for (const secret of Object.values(KEYS)) expect(dump).not.toContain(secret);
    } finally {
      sqlite.close();
    }
  });

  it("keys - a key file others can read refuses the start, naming chmod 600; so does an unset key variable", async () => {
    const loose = join(dir, "loose.key");
    writeFileSync(loose, "some-key\n");
    chmodSync(loose, 0o644);
    const options = { natsUrl: NATS_URL, namespace, port: 0, sqlitePath: ":memory:" };
    await expect(startGateway({ ...options, operator: configure(loose) })).rejects.toMatchObject({
      code: "gateway.bad_options", message: expect.stringContaining(`has mode 0644, so others can read it; run \`chmod 600 ${loose}\``),
    });
    const saved = process.env[MEMBER_ENV];
    delete process.env[MEMBER_ENV];
    try {
      await expect(startGateway({ ...options, operator: configure(join(dir, "globex.key")) })).rejects.toMatchObject({
        code: "gateway.bad_options", message: expect.stringContaining(`reads the key from the environment variable ${MEMBER_ENV}, which is not set`),
      });
    } finally {
      process.env[MEMBER_ENV] = saved;
    }
  });

  it("keys - an index from before roles (0001 only) is migrated and its TACK_API_KEY goes on working as an admin key", async () => {
    const file = join(dir, "before-roles.db");
    const sqlite = new SQLite(file);
    try {
      sqlite.exec(`
        create table kysely_migration (name varchar(255) not null primary key, timestamp varchar(255) not null);
        insert into kysely_migration values ('0001_index', '2026-01-01T00:00:00.000Z');
        create table tenants (id text primary key, created_at text not null);
        create table api_keys (hash text primary key, tenant text not null references tenants (id), created_at text not null);
        create table sessions (id text primary key, tenant text not null references tenants (id), title text not null, model text not null, mode text not null,
          workspace text not null, sandbox_mode text not null, approval_policy text not null, created_at text not null, updated_at text not null, archived integer not null default 0);
        insert into tenants values ('local', '2026-01-01T00:00:00.000Z');
        insert into api_keys values ('${sha256("old-key")}', 'local', '2026-01-01T00:00:00.000Z');
      `);
    } finally {
      sqlite.close();
    }
    const old = await startGateway({ natsUrl: NATS_URL, namespace, port: 0, sqlitePath: file, operator, apiKeys: [{ key: "old-key", tenant: "local" }] });
    try {
      expect((await call("GET", "/v1/admin/keys", "old-key", undefined, old.url)).json.keys).toEqual([
        { id: sha256("old-key").slice(0, 12), tenant: "local", role: "admin", name: "TACK_API_KEY", source: "env", created_at: expect.any(String), revoked_at: null },
      ]);
    } finally {
      await old.stop();
    }
  });

  it("sessions - B cannot list, read, post to, stream, decide on or change A's sessions (404) and nothing reaches A's log", async () => {
    const a = await createSession(KEYS.acmeMember, { model: loop.askModel, sandbox_mode: "read-only" });
    expect(await loop.ask("acme", a.id)).toBe("call_0_0");
    const before = loop.subjects.length;
    const logged = (await readAll(bus.nc, bus.names, { tenant: "acme", sessionId: a.id })).map((e) => e.type);
    expect(logged.at(-1)).toBe("approval/asked");
    for (const as of [KEYS.globexMember, KEYS.globexAdmin]) {
      const list = await call("GET", "/v1/sessions?limit=200", as);
      expect((list.json.sessions as { id: string }[]).map((s) => s.id)).not.toContain(a.id);
      for (const [method, path, body] of [
        ["GET", "", undefined], ["GET", "/events?follow=0", undefined], ["GET", "/events", undefined], ["GET", "/context", undefined],
        ["POST", "/messages", { text: "rm -rf /" }], ["POST", "/approvals/call_0_0", { decision: "allow_once" }], ["POST", "/sandbox_mode", { mode: "danger-full-access" }],
      ] as const) {
        const res = await call(method, `/v1/sessions/${a.id}${path}`, as, body);
        expect(res.status, `${method} ${path}: ${res.text}`).toBe(404);
        expect(res.json.error.code).toBe("gateway.session_not_found");
      }
    }
    expect(loop.subjects.length).toBe(before);
    expect((await readAll(bus.nc, bus.names, { tenant: "acme", sessionId: a.id })).map((e) => e.type)).toEqual(logged);
  });

  it("admin - a member key is refused on every admin route with 403 naming the admin role", async () => {
    for (const [method, path, body] of [
      ["POST", "/v1/admin/keys", { role: "admin" }], ["GET", "/v1/admin/keys", undefined], ["DELETE", `/v1/admin/keys/${sha256(KEYS.acmeAdmin).slice(0, 12)}`, undefined], ["GET", "/v1/admin/tenants", undefined],
    ] as const) {
      const res = await call(method, path, KEYS.acmeMember, body);
      expect(res.status, `${method} ${path}`).toBe(403);
      expect(res.json.error.code).toBe("gateway.forbidden");
      expect(res.json.error.message).toContain("needs an admin key of tenant acme; this key has the role member");
      expect(res.json.error.details).toEqual({ role_needed: "admin", role: "member" });
    }
    expect((await call("GET", "/v1/admin/keys", KEYS.acmeAdmin)).json.keys).toHaveLength(2);
  });

  it("admin - a created key is shown once, listed without key or hash, works with its role, and gets 401 once revoked", async () => {
    const created = await call("POST", "/v1/admin/keys", KEYS.acmeAdmin, { tenant: "acme", role: "member", name: "laptop" });
    expect(created.status, created.text).toBe(201);
    const newKey = created.json.key as string;
    expect(newKey).toMatch(/^tack_[A-Za-z0-9_-]{43}$/);
    expect(created.json).toMatchObject({ id: sha256(newKey).slice(0, 12), tenant: "acme", role: "member", name: "laptop", source: "api", revoked_at: null });
    expect(created.headers.get("location")).toBe(`/v1/admin/keys/${created.json.id}`);

    expect((await call("GET", "/v1/sessions", newKey)).status).toBe(200);
    expect((await call("GET", "/v1/admin/keys", newKey)).status).toBe(403);

    const list = await call("GET", "/v1/admin/keys", KEYS.acmeAdmin);
    expect(list.json.keys).toContainEqual({ id: created.json.id, tenant: "acme", role: "member", name: "laptop", source: "api", created_at: created.json.created_at, revoked_at: null });
    expect(list.text).not.toContain(newKey);
    expect(list.text).not.toContain(sha256(newKey));
    expect(list.text).not.toContain(sha256(KEYS.acmeAdmin));
    expect((list.json.keys as { id: string }[]).map((k) => k.id)).toContain(sha256(KEYS.acmeAdmin).slice(0, 12));

    const revoked = await call("DELETE", `/v1/admin/keys/${created.json.id}`, KEYS.acmeAdmin);
    expect(revoked.status, revoked.text).toBe(200);
    expect(revoked.json.revoked_at).toEqual(expect.any(String));
    const after = await call("GET", "/v1/sessions", newKey);
    expect(after.status).toBe(401);
    expect(after.json.error.code).toBe("gateway.invalid_api_key");
    const listed = await call("GET", "/v1/admin/keys", KEYS.acmeAdmin);
    expect((listed.json.keys as { id: string; revoked_at: string | null }[]).find((k) => k.id === created.json.id)?.revoked_at).toBe(revoked.json.revoked_at);
  });

  it("admin - revoking a key ends its open event streams, here and on another gateway replica", async () => {
    const created = await call("POST", "/v1/admin/keys", KEYS.acmeAdmin, { name: "streamer" });
    const newKey = created.json.key as string;
    const session = await createSession(newKey);
    const replica = await startGateway({ natsUrl: NATS_URL, namespace, port: 0, sqlitePath: dbFile, keepaliveMs: 200, operator, apiKeys: [{ key: KEYS.local, tenant: "local" }] });
    try {
      const here = await openStream(session.id, newKey);
      const there = await openStream(session.id, newKey, replica.url);
      // Both streams first send what the loop logged at creation.
      const logged = await readAll(bus.nc, bus.names, { tenant: "acme", sessionId: session.id });
      expect(logged[0]!.type).toBe("session/created");
      for (const stream of [here, there]) {
        for (const event of logged) expect(await stream.next()).toMatchObject({ id: String(event.seq), event: event.type });
      }
      expect((await call("DELETE", `/v1/admin/keys/${created.json.id}`, KEYS.acmeAdmin)).status).toBe(200);
      // The replica learns of the revocation at its next key check (every keepaliveMs).
      expect(await here.next()).toBeUndefined();
      expect(await there.next()).toBeUndefined();
      expect((await call("GET", `/v1/sessions/${session.id}/events`, newKey, undefined, replica.url)).status).toBe(401);
    } finally {
      await replica.stop();
    }
  });

  it("admin - B's admin cannot list, create keys for or revoke A's keys", async () => {
    const acmeKeyId = sha256(KEYS.acmeMember).slice(0, 12);
    const list = await call("GET", "/v1/admin/keys", KEYS.globexAdmin);
    expect(list.status).toBe(200);
    expect(new Set((list.json.keys as { tenant: string }[]).map((k) => k.tenant))).toEqual(new Set(["globex"]));
    expect(list.text).not.toContain(acmeKeyId);

    const foreign = await call("POST", "/v1/admin/keys", KEYS.globexAdmin, { tenant: "acme", role: "admin" });
    expect(foreign.status).toBe(403);
    expect(foreign.json.error).toMatchObject({ code: "gateway.forbidden", message: expect.stringContaining("creates keys of tenant globex only") });

    const revoke = await call("DELETE", `/v1/admin/keys/${acmeKeyId}`, KEYS.globexAdmin);
    expect(revoke.status).toBe(404);
    expect(revoke.json.error.code).toBe("gateway.key_not_found");
    expect((await call("GET", "/v1/sessions", KEYS.acmeMember)).status).toBe(200);

    const tenants = await call("GET", "/v1/admin/tenants", KEYS.globexAdmin);
    expect((tenants.json.tenants as { id: string }[]).map((t) => t.id)).toEqual(["globex"]);
    const acmeKeys = await call("GET", "/v1/admin/keys", KEYS.acmeAdmin);
    expect((acmeKeys.json.keys as { tenant: string }[]).every((k) => k.tenant === "acme")).toBe(true);
  });

  it("admin - keys from the configuration or TACK_API_KEY cannot be revoked over the API (409 saying where to change them)", async () => {
    const configured = await call("DELETE", `/v1/admin/keys/${sha256(KEYS.acmeMember).slice(0, 12)}`, KEYS.acmeAdmin);
    expect(configured.status).toBe(409);
    expect(configured.json.error).toMatchObject({ code: "gateway.key_not_revocable", details: { source: "config" } });
    expect(configured.json.error.message).toContain(`comes from the operator configuration (${join(dir, "operator.yaml")}); remove it from keys: there and restart the gateway`);
    const local = await call("DELETE", `/v1/admin/keys/${sha256(KEYS.local).slice(0, 12)}`, KEYS.local);
    expect(local.status).toBe(409);
    expect(local.json.error.message).toContain("is the gateway's TACK_API_KEY; change TACK_API_KEY and restart the gateway");
    expect((await call("GET", "/v1/sessions", KEYS.acmeMember)).status).toBe(200);
    expect((await call("GET", "/v1/sessions", KEYS.local)).status).toBe(200);
    expect((await call("DELETE", "/v1/admin/keys/not-an-id", KEYS.acmeAdmin)).status).toBe(404);
  });

  it("admin - tenants shows the caller's tenant with its policy and usage", async () => {
    const res = await call("GET", "/v1/admin/tenants", KEYS.few);
    expect(res.status).toBe(200);
    expect(res.json.tenants).toEqual([{
      id: "few", configured: true,
      policy: {
        workspace_roots: [dir], max_sandbox_mode: "workspace-write", max_sessions: 2, max_sandboxes: 10, max_event_streams: 1,
        requests_per_minute: 600, budget_usd: null, model_providers: null,
      },
      usage: { sessions: indexCount("few"), event_streams: 0 },
    }]);
  });
});

describe("limits - each refused with its code, status and value, creating nothing", () => {
  it("limits - max_sessions: the third session is refused with 429 and nothing reaches the loop or the index", async () => {
    await createSession(KEYS.few);
    await createSession(KEYS.few);
    const before = creates();
    const res = await call("POST", "/v1/sessions", KEYS.few, { workspace, model: loop.model });
    expect(res.status).toBe(429);
    expect(res.json).toEqual({ error: {
      code: "gateway.limit_exceeded",
      message: "tenant few may have at most 2 sessions at once (max_sessions); delete one or ask the operator to raise it",
      details: { limit: "max_sessions", value: "2" },
    } });
    expect(indexCount("few")).toBe(2);
    expect(creates()).toBe(before);
  });

  it("limits - max_sessions holds under concurrent creates", async () => {
    const results = await Promise.all([1, 2, 3, 4].map(() => call("POST", "/v1/sessions", KEYS.race, { workspace, model: loop.model })));
    expect(results.map((r) => r.status).sort()).toEqual([201, 201, 429, 429]);
    expect(indexCount("race")).toBe(2);
  });

  it("limits - max_sandbox_mode: a wider mode is refused with 403 at create and on change; omitted, the tenant's widest is used", async () => {
    const before = creates();
    const wide = await call("POST", "/v1/sessions", KEYS.narrow, { workspace, model: loop.model, sandbox_mode: "workspace-write" });
    expect(wide.status).toBe(403);
    expect(wide.json.error).toEqual({
      code: "gateway.mode_not_allowed",
      message: "tenant narrow may use sandbox modes up to read-only (max_sandbox_mode), not workspace-write; use one of read-only or ask the operator to widen it",
      details: { limit: "max_sandbox_mode", value: "read-only", requested: "workspace-write" },
    });
    expect(creates()).toBe(before);
    expect(indexCount("narrow")).toBe(0);

    const session = await createSession(KEYS.narrow);
    expect(session.sandbox_mode).toBe("read-only");
    const logged = (await readAll(bus.nc, bus.names, { tenant: "narrow", sessionId: session.id })).map((e) => e.type);
    loop.subjects.length = 0;
    const change = await call("POST", `/v1/sessions/${session.id}/sandbox_mode`, KEYS.narrow, { mode: "danger-full-access" });
    expect(change.status).toBe(403);
    expect(change.json.error).toMatchObject({ code: "gateway.mode_not_allowed", details: { limit: "max_sandbox_mode", value: "read-only", requested: "danger-full-access" } });
    expect(loop.subjects).toEqual([]);
    expect((await readAll(bus.nc, bus.names, { tenant: "narrow", sessionId: session.id })).map((e) => e.type)).toEqual(logged);
    expect((await call("GET", `/v1/sessions/${session.id}`, KEYS.narrow)).json.sandbox_mode).toBe("read-only");
  });

  it("limits - model_providers: a provider not allowed is refused with 403 before the loop is asked", async () => {
    const before = creates();
    const count = indexCount("narrow");
    for (const model of ["replay:/tmp/recording.jsonl", "deepseek:deepseek-chat"]) {
      const res = await call("POST", "/v1/sessions", KEYS.narrow, { workspace, model, sandbox_mode: "read-only" });
      expect(res.status).toBe(403);
      const provider = model.split(":")[0];
      expect(res.json.error).toEqual({
        code: "gateway.provider_not_allowed",
        message: `tenant narrow may not use the model provider ${provider} (model_providers allows scripted); use an allowed provider or ask the operator to add it`,
        details: { limit: "model_providers", value: "scripted", provider },
      });
    }
    expect(creates()).toBe(before);
    expect(indexCount("narrow")).toBe(count);
  });

  it("limits - max_event_streams: a second open stream is refused with 429 until the first closes", async () => {
    const [session] = (await call("GET", "/v1/sessions", KEYS.few)).json.sessions as { id: string }[];
    const first = await openStream(session!.id, KEYS.few);
    expect(await first.next()).toMatchObject({ event: "session/created" });
    const second = await call("GET", `/v1/sessions/${session!.id}/events`, KEYS.few);
    expect(second.status).toBe(429);
    expect(second.json.error).toEqual({
      code: "gateway.limit_exceeded",
      message: "tenant few may have at most 1 event streams open at once (max_event_streams); close one or ask the operator to raise it",
      details: { limit: "max_event_streams", value: "1" },
    });
    expect((await call("GET", "/v1/admin/tenants", KEYS.few)).json.tenants[0].usage.event_streams).toBe(1);
    first.close();
    await waitFor("the closed stream to be counted off", async () => (await call("GET", "/v1/admin/tenants", KEYS.few)).json.tenants[0].usage.event_streams === 0, { timeoutMs: 2_000, intervalMs: 20 });
    const again = await call("GET", `/v1/sessions/${session!.id}/events?follow=0`, KEYS.few);
    expect(again.status).toBe(200);
  });

  it("limits - requests_per_minute: past the bucket, 429 with retry-after; other tenants are unaffected", async () => {
    for (let i = 0; i < 3; i++) expect((await call("GET", "/v1/sessions", KEYS.ratey)).status).toBe(200);
    const res = await call("GET", "/v1/sessions", KEYS.ratey);
    expect(res.status).toBe(429);
    const retry = Number(res.headers.get("retry-after"));
    expect(retry).toBeGreaterThanOrEqual(1);
    expect(retry).toBeLessThanOrEqual(20);
    expect(res.json.error).toEqual({
      code: "gateway.limit_exceeded",
      message: `tenant ratey may make at most 3 requests per minute (requests_per_minute); retry in ${retry} s or ask the operator to raise it`,
      details: { limit: "requests_per_minute", value: "3", retry_after_seconds: String(retry) },
    });
    const create = await call("POST", "/v1/sessions", KEYS.ratey, { workspace, model: loop.model });
    expect(create.status).toBe(429);
    expect(indexCount("ratey")).toBe(0);
    expect((await call("GET", "/v1/sessions", KEYS.acmeMember)).status).toBe(200);
  });
});
