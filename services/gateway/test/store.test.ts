// The gateway's SQL index on both dialects it supports: every query of the store, the audit log
// and the workspace index runs the same tests on SQLite (the local default) and on PostgreSQL
// (a throwaway database on the server at 127.0.0.1:5432).
import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sql, type Kysely } from "kysely";
import { AuditLog } from "../src/audit.js";
import { openDatabase, parseIndexSetting, readPasswordFile, redactUrl, withPassword, type Database, type IndexLocation } from "../src/db.js";
import type { ResolvedKey } from "../src/keys.js";
import { SessionIndex, type KeyRow, type SessionRow } from "../src/store.js";
import { WorkspaceIndex } from "../src/workspaces.js";
import { createTestDatabase, POSTGRES_ADMIN_URL, type TestDatabase } from "./postgres.js";

const MIGRATIONS = ["0001_index", "0002_keys_roles", "0003_audit", "0004_workspaces", "0005_audit_key_name"];
const sha = (text: string) => createHash("sha256").update(text).digest("hex");

/** A place for one index: `location()` names a fresh one, `cleanup()` removes them all. */
interface Backend {
  readonly name: "sqlite" | "postgres";
  location(): Promise<IndexLocation>;
  cleanup(): Promise<void>;
}

function sqliteBackend(): Backend {
  let dir: string | undefined;
  let n = 0;
  return {
    name: "sqlite",
    location: async () => {
      dir ??= mkdtempSync(join(tmpdir(), "tack-store-"));
      return { sqlitePath: join(dir, `index-${n++}.db`) };
    },
    cleanup: async () => {
      if (dir) rmSync(dir, { recursive: true, force: true });
    },
  };
}

function postgresBackend(): Backend {
  const databases: TestDatabase[] = [];
  return {
    name: "postgres",
    location: async () => {
      const database = await createTestDatabase("store");
      databases.push(database);
      return { postgresUrl: database.url };
    },
    cleanup: async () => {
      for (const database of databases) await database.drop();
    },
  };
}

const at = (minute: number, second = 0) => `2025-01-01T00:${String(minute).padStart(2, "0")}:${String(second).padStart(2, "0")}.000Z`;

function session(id: string, tenant: string, created: string, fields: Partial<SessionRow> = {}): SessionRow {
  return {
    id, tenant, title: `title of ${id}`, model: "scripted:/x.json", mode: "standard", workspace: "/w", sandbox_mode: "workspace-write",
    approval_policy: "ask", created_at: created, updated_at: created, archived: 0, ...fields,
  };
}

function configured(label: string, tenant: string, source: "config" | "env" = "config", role: "admin" | "member" = "admin"): ResolvedKey {
  return { hash: sha(label), tenant, role, name: label, source };
}

describe.each([{ make: sqliteBackend }, { make: postgresBackend }])("store on $make.name", ({ make }) => {
  const backend = make();
  let db: Kysely<Database>;
  let index: SessionIndex;

  beforeAll(async () => {
    db = await openDatabase(await backend.location());
    index = new SessionIndex(db);
    await index.replaceConfiguredKeys([configured("acme-admin", "acme"), configured("globex-admin", "globex")], ["acme", "globex", "initech"]);
  });

  afterAll(async () => {
    await db?.destroy();
    await backend.cleanup();
  });

  it(`${backend.name} - migrations: a new index gets every migration, opening it again runs none`, async () => {
    const applied = await sql<{ name: string }>`select name from kysely_migration order by name`.execute(db);
    expect(applied.rows.map((r) => r.name)).toEqual(MIGRATIONS);
    const tables = (await db.introspection.getTables()).map((t) => t.name).sort();
    expect(tables).toEqual(["api_keys", "audit", "sessions", "tenants", "workspaces"]);
    const location = await backend.location();
    const first = await openDatabase(location);
    await first.destroy();
    const again = await openDatabase(location);
    try {
      const rows = await sql<{ name: string; timestamp: string }>`select name, timestamp from kysely_migration order by name`.execute(again);
      expect(rows.rows.map((r) => r.name)).toEqual(MIGRATIONS);
    } finally {
      await again.destroy();
    }
  });

  it(`${backend.name} - keys: configured keys replace the last set, API keys stay, a configured key takes over an equal API key`, async () => {
    const location = await backend.location();
    const own = await openDatabase(location);
    const keys = new SessionIndex(own);
    try {
      await keys.replaceConfiguredKeys([configured("a", "acme"), configured("b", "acme", "env"), configured("g", "globex", "config", "member")], ["initech"]);
      await keys.insertKey({ hash: sha("api-1"), tenant: "acme", role: "member", name: "ci", source: "api", created_at: at(1), revoked_at: null });
      await keys.insertKey({ hash: sha("a2"), tenant: "acme", role: "member", name: "soon config", source: "api", created_at: at(1), revoked_at: null });
      expect((await keys.activeKeys()).map((k) => k.hash).sort()).toEqual([sha("a"), sha("b"), sha("g"), sha("api-1"), sha("a2")].sort());

      // The next start lists a, the API key a2 (now the operator's), and no longer b or g.
      await keys.replaceConfiguredKeys([configured("a", "acme"), configured("a2", "acme")], []);
      const active = await keys.activeKeys();
      expect(active.map((k) => k.hash).sort()).toEqual([sha("a"), sha("a2"), sha("api-1")].sort());
      const listed = await keys.listKeys("acme");
      expect(listed.find((k) => k.hash === sha("a2"))).toMatchObject({ source: "config", role: "admin", name: "a2" });
      expect(listed.find((k) => k.hash === sha("api-1"))).toMatchObject({ source: "api", name: "ci", created_at: at(1) });
      // Tenants once created stay (sessions and audit records name them).
      const tenants = await own.selectFrom("tenants").select("id").orderBy("id").execute();
      expect(tenants.map((t) => t.id)).toEqual(["acme", "globex", "initech"]);
      // Twice the same set changes nothing.
      await keys.replaceConfiguredKeys([configured("a", "acme"), configured("a2", "acme")], []);
      expect((await keys.activeKeys()).length).toBe(3);
    } finally {
      await own.destroy();
    }
  });

  it(`${backend.name} - keys: list oldest first, find by hex prefix only, revoke once`, async () => {
    const rows: KeyRow[] = [
      { hash: sha("k2"), tenant: "initech", role: "member", name: "second", source: "api", created_at: at(2), revoked_at: null },
      { hash: sha("k1"), tenant: "initech", role: "admin", name: "first ‘quoted’ 'name'", source: "api", created_at: at(1), revoked_at: null },
    ];
    for (const row of rows) await index.insertKey(row);
    expect((await index.listKeys("initech")).map((k) => k.name)).toEqual(["first ‘quoted’ 'name'", "second"]);
    expect(await index.listKeys("nobody")).toEqual([]);

    const id = sha("k1").slice(0, 12);
    expect(await index.findKeys("initech", id)).toEqual([rows[1]]);
    // Another tenant's key does not exist for this tenant; prefixes are lowercase hex only
    // (SQLite's LIKE ignores case, PostgreSQL's does not: the store never asks either).
    expect(await index.findKeys("acme", id)).toEqual([]);
    expect(await index.findKeys("initech", id.toUpperCase())).toEqual([]);
    expect(await index.findKeys("initech", "%")).toEqual([]);
    expect(await index.findKeys("initech", "_")).toEqual([]);

    await index.revokeKey(sha("k1"));
    const [revoked] = await index.findKeys("initech", id);
    expect(revoked!.revoked_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    await new Promise((resolve) => setTimeout(resolve, 5));
    await index.revokeKey(sha("k1"));
    expect((await index.findKeys("initech", id))[0]!.revoked_at).toBe(revoked!.revoked_at);
    expect(await index.stillActive([sha("k1"), sha("k2"), sha("unknown")])).toEqual(new Set([sha("k2")]));
    expect(await index.stillActive([])).toEqual(new Set());
    expect((await index.activeKeys()).some((k) => k.hash === sha("k1"))).toBe(false);
  });

  it(`${backend.name} - keys: a hash stored twice is refused`, async () => {
    const row: KeyRow = { hash: sha("dup"), tenant: "acme", role: "member", name: "", source: "api", created_at: at(3), revoked_at: null };
    await index.insertKey(row);
    await expect(index.insertKey(row)).rejects.toThrow(/unique|duplicate/i);
  });

  it(`${backend.name} - sessions: per tenant, newest first with limit and offset, counted as numbers`, async () => {
    const rows = [session("s-a1", "acme", at(10)), session("s-a2", "acme", at(11)), session("s-a3", "acme", at(11)), session("s-g1", "globex", at(12))];
    for (const row of rows) await index.insertSession(row);
    expect(await index.getSession("acme", "s-a1")).toEqual(rows[0]);
    expect(await index.getSession("globex", "s-a1")).toBeUndefined();
    expect(await index.getSession("ACME", "s-a1")).toBeUndefined();
    expect(await index.getSession("acme", "nope")).toBeUndefined();
    // Same creation time: the id breaks the tie, descending too.
    expect((await index.listSessions("acme", 10, 0)).map((r) => r.id)).toEqual(["s-a3", "s-a2", "s-a1"]);
    expect((await index.listSessions("acme", 2, 1)).map((r) => r.id)).toEqual(["s-a2", "s-a1"]);
    expect(await index.listSessions("acme", 10, 3)).toEqual([]);
    expect(await index.countSessions("acme")).toBe(3);
    expect(await index.countSessions("globex")).toBe(1);
    expect(await index.countSessions("initech")).toBe(0);
    expect(typeof (await index.getSession("acme", "s-a1"))!.archived).toBe("number");
  });

  it(`${backend.name} - sessions: text comes back exactly as stored`, async () => {
    const title = `naïve 'quote' "double" \\ back%slash_ 日本語 🚀 ${"x".repeat(5_000)}`;
    const row = session("s-text", "globex", at(13), { title, workspace: "/home/u/project with space" });
    await index.insertSession(row);
    expect(await index.getSession("globex", "s-text")).toEqual(row);
  });

  it(`${backend.name} - sessions: a tenant that does not exist is refused (foreign key)`, async () => {
    await expect(index.insertSession(session("s-orphan", "no-such-tenant", at(14)))).rejects.toThrow(/foreign key/i);
    expect(await index.getSession("no-such-tenant", "s-orphan")).toBeUndefined();
  });

  it(`${backend.name} - sessions: mode, sandbox mode and activity update the row and its time`, async () => {
    await index.insertSession(session("s-upd", "acme", at(15)));
    await index.setSandboxMode("s-upd", "read-only");
    const afterSandbox = (await index.getSession("acme", "s-upd"))!;
    expect(afterSandbox.sandbox_mode).toBe("read-only");
    expect(afterSandbox.updated_at > at(15)).toBe(true);
    await index.setMode("s-upd", "code");
    expect((await index.getSession("acme", "s-upd"))!.mode).toBe("code");
    await new Promise((resolve) => setTimeout(resolve, 5));
    await index.touchSession("s-upd");
    const touched = (await index.getSession("acme", "s-upd"))!;
    expect(touched.updated_at > afterSandbox.updated_at).toBe(true);
    expect(touched.created_at).toBe(at(15));
  });

  it(`${backend.name} - sessions: the retention sweep pages through idle sessions of every tenant`, async () => {
    const own = await openDatabase(await backend.location());
    const sweep = new SessionIndex(own);
    try {
      await sweep.replaceConfiguredKeys([configured("x", "acme"), configured("y", "globex")], []);
      const rows = [
        session("i3", "acme", at(1), { updated_at: at(20) }), session("i1", "globex", at(1), { updated_at: at(20) }),
        session("i2", "acme", at(1), { updated_at: at(21) }), session("i4", "globex", at(1), { updated_at: at(30) }),
      ];
      for (const row of rows) await sweep.insertSession(row);
      const first = await sweep.idleSessions(at(25), 2);
      expect(first.map((r) => r.id)).toEqual(["i1", "i3"]);
      const last = first.at(-1)!;
      const second = await sweep.idleSessions(at(25), 2, { updatedAt: last.updated_at, id: last.id });
      expect(second.map((r) => r.id)).toEqual(["i2"]);
      expect(await sweep.idleSessions(at(25), 2, { updatedAt: at(21), id: "i2" })).toEqual([]);
      expect((await sweep.idleSessions(at(59), 10)).map((r) => r.id)).toEqual(["i1", "i3", "i2", "i4"]);
    } finally {
      await own.destroy();
    }
  });

  it(`${backend.name} - audit: a deletion removes the row and is recorded once, newest first, details as JSON`, async () => {
    const audit = new AuditLog(db);
    const row = session("s-del", "globex", at(16));
    await index.insertSession(row);
    const details = { title: row.title, log_messages: 3, nested: { ok: true, list: [1, "two"] } };
    const [a, b] = await Promise.all([
      audit.removeSession(row, { kind: "api_key", keyId: "0123456789ab", keyName: "alice" }, details),
      audit.removeSession(row, { kind: "retention" }, details),
    ]);
    const records = [a, b].filter((r) => r !== undefined);
    expect(records).toHaveLength(1);
    // The key's name is kept beside its id (who deleted it), none for the sweep.
    expect(records[0]).toMatchObject(a ? { key_id: "0123456789ab", key_name: "alice" } : { key_id: null, key_name: null });
    expect(await index.getSession("globex", "s-del")).toBeUndefined();
    expect(await audit.removeSession(row, { kind: "retention" }, {})).toBeUndefined();

    await index.insertSession(session("s-del2", "globex", at(17)));
    await new Promise((resolve) => setTimeout(resolve, 5));
    const second = await audit.removeSession(session("s-del2", "globex", at(17)), { kind: "retention" }, { reason: "age" });
    const listed = await audit.list("globex", 10, 0);
    expect(listed.map((r) => r.session_id)).toEqual(["s-del2", "s-del"]);
    expect(listed[0]).toEqual(second);
    expect(listed[0]).toMatchObject({ actor: "retention", key_id: null, action: "session.delete", tenant: "globex" });
    expect(JSON.parse(listed[1]!.details)).toEqual(details);
    expect(await audit.list("globex", 1, 1)).toEqual([listed[1]]);
    expect(await audit.list("acme", 10, 0)).toEqual([]);
  });

  it(`${backend.name} - workspaces: per tenant, newest first, with the sessions working in one`, async () => {
    const workspaces = new WorkspaceIndex(db);
    const w1 = { id: "ws_1", tenant: "acme", title: "one", path: "/managed/acme/ws_1", created_at: at(18) };
    const w2 = { id: "ws_2", tenant: "acme", title: "two", path: "/managed/acme/ws_2", created_at: at(19) };
    await workspaces.insert(w1);
    await workspaces.insert(w2);
    expect(await workspaces.get("acme", "ws_1")).toEqual(w1);
    expect(await workspaces.get("globex", "ws_1")).toBeUndefined();
    expect((await workspaces.list("acme")).map((w) => w.id)).toEqual(["ws_2", "ws_1"]);
    await index.insertSession(session("s-ws1", "acme", at(20), { workspace: w1.path }));
    await index.insertSession(session("s-ws2", "acme", at(21), { workspace: w1.path }));
    expect((await workspaces.sessionsOn("acme", w1.path)).sort()).toEqual(["s-ws1", "s-ws2"]);
    expect(await workspaces.sessionsOn("globex", w1.path)).toEqual([]);
    await workspaces.remove("globex", "ws_1");
    expect(await workspaces.get("acme", "ws_1")).toEqual(w1);
    await workspaces.remove("acme", "ws_1");
    expect(await workspaces.list("acme")).toEqual([w2]);
  });

  it(`${backend.name} - transactions: a failing key replacement changes nothing`, async () => {
    const before = await index.activeKeys();
    // The first key is fine, the second has no role (NOT NULL): the whole set must roll back.
    const bad = [configured("fine", "acme"), { ...configured("broken", "acme"), role: null as unknown as "admin" }];
    await expect(index.replaceConfiguredKeys(bad, [])).rejects.toThrow();
    expect((await index.activeKeys()).map((k) => k.hash).sort()).toEqual(before.map((k) => k.hash).sort());
  });
});

describe("store on postgres - replicas and failures", () => {
  const databases: TestDatabase[] = [];
  afterAll(async () => {
    for (const database of databases) await database.drop();
  });

  it("postgres - four replicas migrating one new database at once all start, each migration runs once", async () => {
    const database = await createTestDatabase("race");
    databases.push(database);
    const opened = await Promise.all(Array.from({ length: 4 }, () => openDatabase({ postgresUrl: database.url })));
    try {
      const applied = await sql<{ name: string }>`select name from kysely_migration order by name`.execute(opened[0]!);
      expect(applied.rows.map((r) => r.name)).toEqual(MIGRATIONS);
      // And all at once they store the same configured keys without tripping over each other.
      const keys = [configured("r1", "acme"), configured("r2", "globex", "env")];
      await Promise.all(opened.map((db) => new SessionIndex(db).replaceConfiguredKeys(keys, ["acme", "globex"])));
      expect((await new SessionIndex(opened[3]!).activeKeys()).map((k) => k.hash).sort()).toEqual(keys.map((k) => k.hash).sort());
    } finally {
      await Promise.all(opened.map((db) => db.destroy()));
    }
  });

  it("postgres - an unreachable server fails at once with one line naming it and the fix", async () => {
    const port = await closedPort();
    const url = `postgres://tack:s3cret@127.0.0.1:${port}/tack`;
    const error = await openFailure(url);
    expect(error).toMatchObject({ code: "gateway.database_unavailable" });
    expect(error.message).toBe(`cannot reach the session index's PostgreSQL at 127.0.0.1:${port} (TACK_DB=postgres://tack:***@127.0.0.1:${port}/tack): ECONNREFUSED; start PostgreSQL or correct the host and port in TACK_DB`);
    expect(error.message).not.toContain("s3cret");
  });

  it("postgres - a database that does not exist and a user the server refuses are named", async () => {
    const missing = new URL(POSTGRES_ADMIN_URL);
    missing.pathname = `/tack_missing_${randomBytes(4).toString("hex")}`;
    const noDb = await openFailure(missing.toString());
    expect(noDb.code).toBe("gateway.database_unavailable");
    expect(noDb.message).toContain(`has no database "${missing.pathname.slice(1)}"; create it (createdb ${missing.pathname.slice(1)})`);

    const stranger = new URL(POSTGRES_ADMIN_URL);
    stranger.username = `nobody_${randomBytes(4).toString("hex")}`;
    const noUser = await openFailure(stranger.toString());
    expect(noUser.code).toBe("gateway.database_unavailable");
    expect(noUser.message).toContain(`refused user ${stranger.username}: role "${stranger.username}" does not exist; correct the user and password in TACK_DB`);
    expect(noUser.message).not.toContain("\n");
  });

  it("setting - TACK_DB is a SQLite path or a PostgreSQL URL; a bad URL is named with the fix, never with its password", () => {
    expect(parseIndexSetting(".tack/tack.db")).toEqual({ sqlitePath: ".tack/tack.db" });
    expect(parseIndexSetting(":memory:")).toEqual({ sqlitePath: ":memory:" });
    expect(parseIndexSetting("postgres://u:p@db:5432/tack")).toEqual({ postgresUrl: "postgres://u:p@db:5432/tack" });
    expect(parseIndexSetting("postgresql://db/tack?sslmode=require")).toEqual({ postgresUrl: "postgresql://db/tack?sslmode=require" });
    expect(parseIndexSetting("postgres:///tack?host=/run/postgresql")).toEqual({ postgresUrl: "postgres:///tack?host=/run/postgresql" });
    const problem = (setting: string) => {
      try {
        parseIndexSetting(setting);
      } catch (error) {
        return (error as Error).message;
      }
      throw new Error(`${setting} was accepted`);
    };
    expect(problem("mysql://u@db/tack")).toBe('"mysql:" is not a supported database; the index is a SQLite file path or a PostgreSQL URL (postgres://USER:PASSWORD@HOST:5432/DATABASE)');
    expect(problem("postgres://u:hunter2@db:99999/tack")).toBe("postgres://u:***@db:99999/tack is not a valid URL (a port that is not a number 1-65535, or a character that needs %-encoding in the user or password?); write it as postgres://USER:PASSWORD@HOST:5432/DATABASE");
    expect(problem("postgres://u:hunter2@db:5432")).toBe("postgres://u:***@db:5432 names no database (or more than one path segment); end it with /DATABASE, as in postgres://USER:PASSWORD@HOST:5432/DATABASE");
    expect(problem("postgres:///tack")).toContain("names no server");
    expect(problem("postgres://u:%zz@db/tack")).toContain("malformed %-escape");
    expect(problem("  ")).toContain("the value is blank");
    expect(redactUrl("postgres://u:p%40ss@db/tack")).toBe("postgres://u:***@db/tack");
    expect(withPassword("postgres://u@db:5432/tack?sslmode=require", "p@ss:/w rd")).toBe("postgres://u:p%40ss%3A%2Fw%20rd@db:5432/tack?sslmode=require");
    expect(() => withPassword("postgres://u:x@db/tack", "y")).toThrow("postgres://u:***@db/tack has a password already; give it either in the URL or in TACK_DB_PASSWORD_FILE, not both");
    expect(() => withPassword("postgres://db/tack", "y")).toThrow("names no user for the password");
    expect(redactUrl("postgres://u@db/tack")).toBe("postgres://u@db/tack");
  });
});

it("setting - TACK_DB_PASSWORD_FILE: the file's first line, a missing or empty file named", () => {
  const dir = mkdtempSync(join(tmpdir(), "tack-password-"));
  try {
    const file = join(dir, "password");
    writeFileSync(file, "s3cret\r\n");
    expect(readPasswordFile(file)).toBe("s3cret");
    writeFileSync(file, "");
    expect(() => readPasswordFile(file)).toThrow(`the PostgreSQL password file ${file} is empty; write the password into it (one line)`);
    expect(() => readPasswordFile(join(dir, "missing"))).toThrow(`cannot read the PostgreSQL password file ${join(dir, "missing")} (ENOENT); check the path`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

/** The error opening the PostgreSQL index at `url` fails with (the test fails when it opens). */
async function openFailure(url: string): Promise<Error & { code: string }> {
  const db = await openDatabase({ postgresUrl: url }).catch((error: unknown) => error as Error & { code: string });
  if (!(db instanceof Error)) {
    await db.destroy();
    throw new Error(`the index at ${url} opened`);
  }
  return db;
}

/** A loopback port nothing listens on. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
