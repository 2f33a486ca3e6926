import SQLite from "better-sqlite3";
import { Kysely, Migrator, SqliteDialect, sql, type Dialect, type Migration } from "kysely";
import { TackError } from "@tack/bus";

// Column types stay to what every SQL dialect has (text, integer) and times are ISO-8601 UTC
// text, which sorts in time order; so a PostgreSQL dialect can be plugged in unchanged.

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
  /** e.g. `session.delete`. */
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
};

/** Opens the index (SQLite file unless a dialect is given) and migrates it to the latest schema. */
export async function openDatabase(database: { sqlitePath: string } | { dialect: Dialect }): Promise<Kysely<Database>> {
  const dialect = "dialect" in database ? database.dialect : new SqliteDialect({ database: openSqlite(database.sqlitePath) });
  const db = new Kysely<Database>({ dialect });
  const { error, results } = await new Migrator({ db, provider: { getMigrations: async () => migrations } }).migrateToLatest();
  if (error) {
    await db.destroy();
    const failed = results?.find((r) => r.status === "Error")?.migrationName ?? "(before any migration)";
    throw new TackError("gateway.migration_failed", `migrating the session index failed at ${failed}: ${(error as Error).message}`, { cause: error });
  }
  return db;
}

function openSqlite(path: string): SQLite.Database {
  try {
    const sqlite = new SQLite(path);
    // WAL lets readers run while a write is in progress; foreign keys are off by default in SQLite.
    sqlite.pragma("journal_mode = WAL");
    sqlite.pragma("foreign_keys = ON");
    return sqlite;
  } catch (error) {
    throw new TackError("gateway.database_unavailable", `cannot open the session index at ${path}: ${(error as Error).message}; check that its folder exists and is writable (TACK_DB)`, { cause: error });
  }
}

/** The current time as the index stores it. */
export function timestamp(): string {
  return new Date().toISOString();
}

/** Checks the index answers a trivial query (for health checks). */
export async function ping(db: Kysely<Database>): Promise<void> {
  await sql`select 1`.execute(db);
}
