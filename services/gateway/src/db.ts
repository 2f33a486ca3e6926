import { readFileSync } from "node:fs";
import SQLite from "better-sqlite3";
import { Kysely, Migrator, PostgresDialect, SqliteDialect, sql, type Dialect, type Migration } from "kysely";
import pg from "pg";
import { TackError } from "@tack/bus";
import { logger } from "@tack/telemetry";
import { errorCode, errorMessage } from "./thrown.js";

// One schema and one set of migrations for SQLite (the local default) and PostgreSQL (shared by
// gateway replicas). Column types stay to what both have (text, integer: no boolean, no JSON, no
// timestamp types, no autoincrement), times are ISO-8601 UTC text, which sorts in time order,
// and queries use only what both understand (ON CONFLICT upserts, no RETURNING, LIKE only on
// lowercase hex, where SQLite's case-insensitive LIKE and PostgreSQL's agree).

/** A tenant: the owner of API keys and sessions. */
export interface TenantsTable {
  id: string;
  created_at: string;
}

/** An accepted API key, stored only as the hex SHA-256 of the key. */
export interface ApiKeysTable {
  hash: string;
  tenant: string;
  created_at: string;
  /** `admin` or `member` (0002). */
  role: string;
  /** A label for the admin API (0002). */
  name: string;
  /** `config` (operator file), `env` (TACK_API_KEY) or `api` (created by an admin) (0002). */
  source: string;
  /** When an admin revoked it; null while it works (0002). */
  revoked_at: string | null;
}

/** One row of the session index; the session log stays the source of truth. */
export interface SessionsTable {
  id: string;
  tenant: string;
  title: string;
  model: string;
  mode: string;
  workspace: string;
  sandbox_mode: string;
  approval_policy: string;
  created_at: string;
  updated_at: string;
  /** 0 or 1: SQLite has no boolean type. */
  archived: number;
}

/** One audit record: who did what to which session, when (0003). Kept when the session is gone. */
export interface AuditTable {
  id: string;
  tenant: string;
  /** ISO-8601 UTC. */
  at: string;
  /** `api_key` (a caller) or `retention` (the gateway's sweep). */
  actor: string;
  /** The caller's key id (never the key); null for `retention`. */
  key_id: string | null;
  /** The caller's key name when the record was made (0005); null for `retention` and older records. */
  key_name: string | null;
  /** `session.delete`, `approval.decide`, `question.answer` or `plan.decide`. */
  action: string;
  session_id: string | null;
  /** JSON object: what the action removed or changed. */
  details: string;
}

/** A Tack-managed workspace (its files live on the sandbox hosts). */
export interface WorkspacesTable {
  id: string;
  tenant: string;
  title: string;
  /** Host path on the sandbox hosts, as sessions on it name their workspace. */
  path: string;
  created_at: string;
}

/** The gateway's SQL schema as kysely sees it. */
export interface Database {
  workspaces: WorkspacesTable;
  tenants: TenantsTable;
  api_keys: ApiKeysTable;
  sessions: SessionsTable;
  audit: AuditTable;
}

// A migration sees an untyped database: it must not depend on the schema type of today.
const migrations: Record<string, Migration> = {
  "0001_index": {
    async up(db: Kysely<unknown>) {
      await db.schema.createTable("tenants")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("created_at", "text", (c) => c.notNull())
        .execute();
      await db.schema.createTable("api_keys")
        .addColumn("hash", "text", (c) => c.primaryKey())
        .addColumn("tenant", "text", (c) => c.notNull().references("tenants.id"))
        .addColumn("created_at", "text", (c) => c.notNull())
        .execute();
      await db.schema.createTable("sessions")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("tenant", "text", (c) => c.notNull().references("tenants.id"))
        .addColumn("title", "text", (c) => c.notNull())
        .addColumn("model", "text", (c) => c.notNull())
        .addColumn("mode", "text", (c) => c.notNull())
        .addColumn("workspace", "text", (c) => c.notNull())
        .addColumn("sandbox_mode", "text", (c) => c.notNull())
        .addColumn("approval_policy", "text", (c) => c.notNull())
        .addColumn("created_at", "text", (c) => c.notNull())
        .addColumn("updated_at", "text", (c) => c.notNull())
        .addColumn("archived", "integer", (c) => c.notNull().defaultTo(0))
        .execute();
      await db.schema.createIndex("sessions_tenant_created").on("sessions").columns(["tenant", "created_at", "id"]).execute();
    },
    async down(db: Kysely<unknown>) {
      await db.schema.dropTable("sessions").execute();
      await db.schema.dropTable("api_keys").execute();
      await db.schema.dropTable("tenants").execute();
    },
  },
  // Roles, labels and revocation for API keys. One column per statement: SQLite adds one at a time.
  "0002_keys_roles": {
    async up(db: Kysely<unknown>) {
      // Keys stored before roles existed were the operator's TACK_API_KEY: admins from the environment.
      await db.schema.alterTable("api_keys").addColumn("role", "text", (c) => c.notNull().defaultTo("admin")).execute();
      await db.schema.alterTable("api_keys").addColumn("name", "text", (c) => c.notNull().defaultTo("")).execute();
      await db.schema.alterTable("api_keys").addColumn("source", "text", (c) => c.notNull().defaultTo("env")).execute();
      await db.schema.alterTable("api_keys").addColumn("revoked_at", "text").execute();
      await db.schema.createIndex("api_keys_tenant").on("api_keys").columns(["tenant", "created_at"]).execute();
    },
    async down(db: Kysely<unknown>) {
      await db.schema.dropIndex("api_keys_tenant").execute();
      for (const column of ["revoked_at", "source", "name", "role"]) await db.schema.alterTable("api_keys").dropColumn(column).execute();
    },
  },
  // The tenant-visible audit trail (deletions first); no foreign keys, so records outlive what they name.
  "0003_audit": {
    async up(db: Kysely<unknown>) {
      await db.schema.createTable("audit")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("tenant", "text", (c) => c.notNull())
        .addColumn("at", "text", (c) => c.notNull())
        .addColumn("actor", "text", (c) => c.notNull())
        .addColumn("key_id", "text")
        .addColumn("action", "text", (c) => c.notNull())
        .addColumn("session_id", "text")
        .addColumn("details", "text", (c) => c.notNull())
        .execute();
      await db.schema.createIndex("audit_tenant_at").on("audit").columns(["tenant", "at", "id"]).execute();
    },
    async down(db: Kysely<unknown>) {
      await db.schema.dropTable("audit").execute();
    },
  },
  // Tack-managed workspaces, per tenant.
  "0004_workspaces": {
    async up(db: Kysely<unknown>) {
      await db.schema.createTable("workspaces")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("tenant", "text", (c) => c.notNull())
        .addColumn("title", "text", (c) => c.notNull())
        .addColumn("path", "text", (c) => c.notNull())
        .addColumn("created_at", "text", (c) => c.notNull())
        .execute();
      await db.schema.createIndex("workspaces_tenant_created").on("workspaces").columns(["tenant", "created_at", "id"]).execute();
    },
    async down(db: Kysely<unknown>) {
      await db.schema.dropTable("workspaces").execute();
    },
  },
  // Who decided: the caller's key name beside its id (decisions on approvals, questions and plans are audited too).
  "0005_audit_key_name": {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable("audit").addColumn("key_name", "text").execute();
    },
    async down(db: Kysely<unknown>) {
      await db.schema.alterTable("audit").dropColumn("key_name").execute();
    },
  },
};

/** Where the index lives: a SQLite file, a PostgreSQL database (by URL), or any other kysely dialect. */
export type IndexLocation = { readonly sqlitePath: string } | { readonly postgresUrl: string } | { readonly dialect: Dialect };

/** How long a PostgreSQL connection may take before it counts as unreachable. */
const PG_CONNECT_TIMEOUT_MS = 10_000;

const log = logger("gateway");

/**
 * Opens the index and migrates it to the latest schema. A PostgreSQL database is connected to
 * once first, so an unreachable server, a missing database or a refused user fails here with
 * `gateway.database_unavailable` saying which and how to fix it. Gateway replicas may start at
 * once on one PostgreSQL database: kysely's migrator holds an advisory lock while it migrates,
 * and the replicas that wait find the migrations done.
 */
export async function openDatabase(location: IndexLocation): Promise<Kysely<Database>> {
  let dialect: Dialect;
  if ("dialect" in location) dialect = location.dialect;
  else if ("postgresUrl" in location) dialect = new PostgresDialect({ pool: await connectPostgres(location.postgresUrl) });
  else dialect = new SqliteDialect({ database: preparedOnce(openSqlite(location.sqlitePath)) });
  const db = new Kysely<Database>({ dialect });
  const { error, results } = await new Migrator({ db, provider: { getMigrations: async () => migrations } }).migrateToLatest();
  if (error) {
    await db.destroy();
    const failed = results?.find((r) => r.status === "Error")?.migrationName ?? "(before any migration)";
    throw new TackError("gateway.migration_failed", `migrating the session index failed at ${failed}: ${errorMessage(error)}`, { cause: error });
  }
  return db;
}

/**
 * Reads the index setting (TACK_DB): a `postgres://` or `postgresql://` URL, else a SQLite file
 * path (`:memory:` for a throwaway index). Throws an Error naming what is wrong with a URL and
 * how to write it; a path is not checked here (opening it is).
 */
export function parseIndexSetting(setting: string): { postgresUrl: string } | { sqlitePath: string } {
  const text = setting.trim();
  if (text === "") throw new Error("the value is blank; give a SQLite file path (default .tack/tack.db) or a PostgreSQL URL such as postgres://tack@db.example:5432/tack");
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(text)?.[1];
  if (scheme === undefined) return { sqlitePath: text };
  const problem = postgresUrlProblem(text);
  if (problem) throw new Error(problem);
  return { postgresUrl: text };
}

/** What is wrong with a PostgreSQL URL (one sentence with the fix), or undefined when it is usable. */
export function postgresUrlProblem(url: string): string | undefined {
  const example = "postgres://USER:PASSWORD@HOST:5432/DATABASE";
  const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(url)?.[1]?.toLowerCase();
  if (scheme !== "postgres" && scheme !== "postgresql") {
    return `${JSON.stringify(scheme === undefined ? url : `${scheme}:`)} is not a supported database; the index is a SQLite file path or a PostgreSQL URL (${example})`;
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return `${redactUrl(url)} is not a valid URL (a port that is not a number 1-65535, or a character that needs %-encoding in the user or password?); write it as ${example}`;
  }
  try {
    decodeURIComponent(parsed.username);
    decodeURIComponent(parsed.password);
  } catch {
    return `the user or password in ${redactUrl(url)} has a malformed %-escape; %-encode special characters (e.g. @ as %40) as in ${example}`;
  }
  if (parsed.hostname === "" && !parsed.searchParams.has("host")) return `${redactUrl(url)} names no server; write it as ${example}`;
  const database = decodeURIComponent(parsed.pathname.replace(/^\//, ""));
  if (database === "" || database.includes("/")) return `${redactUrl(url)} names no database (or more than one path segment); end it with /DATABASE, as in ${example}`;
  return undefined;
}

/**
 * The password in a file (TACK_DB_PASSWORD_FILE: a Docker or Kubernetes secret), without its
 * final line break. Throws an Error naming the file and the fix when it is unreadable or empty.
 */
export function readPasswordFile(path: string): string {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (error) {
    throw new Error(`cannot read the PostgreSQL password file ${path} (${errorCode(error) ?? errorMessage(error)}); check the path and that the gateway's user may read it`);
  }
  const password = text.replace(/\r?\n$/, "");
  if (password === "") throw new Error(`the PostgreSQL password file ${path} is empty; write the password into it (one line)`);
  return password;
}

/** `url` with `password` as its password (%-encoded); refused when the URL already has one. */
export function withPassword(url: string, password: string): string {
  const parsed = new URL(url);
  if (parsed.password !== "") throw new Error(`${redactUrl(url)} has a password already; give it either in the URL or in TACK_DB_PASSWORD_FILE, not both`);
  if (parsed.username === "") throw new Error(`${url} names no user for the password; write it as postgres://USER@HOST:5432/DATABASE`);
  parsed.password = encodeURIComponent(password);
  return parsed.toString();
}

/** The URL with its password replaced by `***`, for messages and logs. */
export function redactUrl(url: string): string {
  return url.replace(/^([a-z][a-z0-9+.-]*:\/\/[^:/?#@]*):[^@/?#]*@/i, "$1:***@");
}

/** A pool for the URL, after one connection succeeded; else `gateway.database_unavailable`. */
async function connectPostgres(url: string): Promise<pg.Pool> {
  const pool = new pg.Pool({ connectionString: url, connectionTimeoutMillis: PG_CONNECT_TIMEOUT_MS, application_name: "tack-gateway" });
  // An idle connection that the server drops (a restart, a failover) is reported here; without a
  // listener it would end the process. The pool opens a new connection for the next query.
  pool.on("error", (error) => log.warn("PostgreSQL dropped an idle connection of the session index", { error: error.message }));
  try {
    const client = await pool.connect();
    client.release();
    return pool;
  } catch (error) {
    await pool.end().catch(() => undefined);
    throw new TackError("gateway.database_unavailable", postgresFailure(url, error), { cause: error });
  }
}

/** One line saying why PostgreSQL at `url` could not be used and what to do. */
function postgresFailure(url: string, error: unknown): string {
  const parsed = new URL(url);
  const server = `${parsed.hostname || parsed.searchParams.get("host")}:${parsed.port || "5432"}`;
  const database = decodeURIComponent(parsed.pathname.slice(1));
  const user = decodeURIComponent(parsed.username) || "(the default user)";
  const where = `the session index's PostgreSQL at ${server} (TACK_DB=${redactUrl(url)})`;
  const message = errorMessage(error).split("\n")[0] ?? "";
  const code = errorCode(error);
  switch (code) {
    case "ECONNREFUSED":
    case "ENOTFOUND":
    case "EAI_AGAIN":
    case "EHOSTUNREACH":
    case "ENETUNREACH":
    case "ETIMEDOUT":
      return `cannot reach ${where}: ${code}; start PostgreSQL or correct the host and port in TACK_DB`;
    case "3D000":
      return `${where} has no database ${JSON.stringify(database)}; create it (createdb ${database}) or name an existing one in TACK_DB`;
    case "28P01":
    case "28000":
      return `${where} refused user ${user}: ${message}; correct the user and password in TACK_DB or allow the user in pg_hba.conf`;
    default:
      if (/timeout/i.test(message)) return `cannot reach ${where}: no answer within ${PG_CONNECT_TIMEOUT_MS / 1000} s; check that PostgreSQL runs and a firewall lets the gateway reach it`;
      return `cannot use ${where}: ${message}${code ? ` (${code})` : ""}; check the server and TACK_DB`;
  }
}

function openSqlite(path: string): SQLite.Database {
  try {
    const sqlite = new SQLite(path);
    // WAL lets readers run while a write is in progress; foreign keys are off by default in SQLite.
    sqlite.pragma("journal_mode = WAL");
    sqlite.pragma("foreign_keys = ON");
    return sqlite;
  } catch (error) {
    throw new TackError("gateway.database_unavailable", `cannot open the session index at ${path}: ${errorMessage(error)}; check that its folder exists and is writable (TACK_DB)`, { cause: error });
  }
}

/**
 * The database with each SQL text prepared once: kysely prepares every query it runs, which was a
 * tenth of a GET's time in the gateway. The index's queries are a few dozen texts; the cache is
 * bounded anyway (a list of N key hashes is its own text).
 */
function preparedOnce(sqlite: SQLite.Database): { close(): void; prepare(sql: string): SQLite.Statement } {
  const statements = new Map<string, SQLite.Statement>();
  return {
    close: () => sqlite.close(),
    prepare: (text) => {
      let statement = statements.get(text);
      if (!statement) {
        if (statements.size >= 500) statements.clear();
        statement = sqlite.prepare(text);
        statements.set(text, statement);
      }
      return statement;
    },
  };
}

/** The current time as the index stores it. */
export function timestamp(): string {
  return new Date().toISOString();
}

/** Checks the index answers a trivial query (for health checks). */
export async function ping(db: Kysely<Database>): Promise<void> {
  await sql`select 1`.execute(db);
}
