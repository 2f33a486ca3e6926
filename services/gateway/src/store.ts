import type { Kysely, Selectable } from "kysely";
import { timestamp, type ApiKeysTable, type Database, type SessionsTable } from "./db.js";
import type { ResolvedKey } from "./keys.js";

/** A session as the index stores it. */
export type SessionRow = Selectable<SessionsTable>;

/** An API key as the index stores it (its hash, never the key). */
export type KeyRow = Selectable<ApiKeysTable>;

/** Queries of the gateway's SQL index: API key hashes with roles and the per-tenant session list. */
export class SessionIndex {
  readonly #db: Kysely<Database>;

  constructor(db: Kysely<Database>) {
    this.#db = db;
  }

  /**
   * Makes `keys` the complete set of configured keys (sources `config` and `env`), creating
   * their tenants and the operator's `tenants`; keys created over the API stay as they are.
   */
  async replaceConfiguredKeys(keys: readonly ResolvedKey[], tenants: readonly string[]): Promise<void> {
    const at = timestamp();
    await this.#db.transaction().execute(async (trx) => {
      const all = [...new Set([...tenants, ...keys.map((k) => k.tenant)])];
      if (all.length > 0) await trx.insertInto("tenants").values(all.map((id) => ({ id, created_at: at }))).onConflict((oc) => oc.column("id").doNothing()).execute();
      await trx.deleteFrom("api_keys").where("source", "!=", "api").execute();
      // A configured key that equals an API-created one is the operator's from now on.
      if (keys.length > 0) await trx.deleteFrom("api_keys").where("hash", "in", keys.map((k) => k.hash)).execute();
      if (keys.length > 0) {
        await trx.insertInto("api_keys").values(keys.map((k) => ({ hash: k.hash, tenant: k.tenant, role: k.role, name: k.name, source: k.source, created_at: at, revoked_at: null }))).execute();
      }
    });
  }

  /** Every key that works (not revoked), with its tenant and role. */
  async activeKeys(): Promise<{ hash: string; tenant: string; role: string }[]> {
    return this.#db.selectFrom("api_keys").select(["hash", "tenant", "role"]).where("revoked_at", "is", null).execute();
  }

  /** Which of `hashes` still work. */
  async stillActive(hashes: readonly string[]): Promise<Set<string>> {
    if (hashes.length === 0) return new Set();
    const rows = await this.#db.selectFrom("api_keys").select("hash").where("hash", "in", hashes).where("revoked_at", "is", null).execute();
    return new Set(rows.map((r) => r.hash));
  }

  /** Stores a key created over the admin API. */
  async insertKey(row: KeyRow): Promise<void> {
    await this.#db.insertInto("api_keys").values(row).execute();
  }

  /** The tenant's keys (revoked ones too), oldest first. */
  async listKeys(tenant: string): Promise<KeyRow[]> {
    return this.#db.selectFrom("api_keys").selectAll().where("tenant", "=", tenant).orderBy("created_at").orderBy("hash").execute();
  }

  /** The tenant's keys whose hash starts with `prefix` (hex digits only; normally one). */
  async findKeys(tenant: string, prefix: string): Promise<KeyRow[]> {
    if (!/^[0-9a-f]+$/.test(prefix)) return [];
    return this.#db.selectFrom("api_keys").selectAll().where("tenant", "=", tenant).where("hash", "like", `${prefix}%`).execute();
  }

  /** Marks a key revoked (once; a later call keeps the first time). */
  async revokeKey(hash: string): Promise<void> {
    await this.#db.updateTable("api_keys").set({ revoked_at: timestamp() }).where("hash", "=", hash).where("revoked_at", "is", null).execute();
  }

  /** How many sessions the tenant has in the index. */
  async countSessions(tenant: string): Promise<number> {
    const row = await this.#db.selectFrom("sessions").select((eb) => eb.fn.countAll<string | number | bigint>().as("n")).where("tenant", "=", tenant).executeTakeFirstOrThrow();
    // PostgreSQL returns count(*) as a bigint string, SQLite as a number.
    return Number(row.n);
  }

  /** Adds a newly created session. */
  async insertSession(row: SessionRow): Promise<void> {
    await this.#db.insertInto("sessions").values(row).execute();
  }

  /** The tenant's session `id`, or undefined when it does not exist or belongs to another tenant. */
  async getSession(tenant: string, id: string): Promise<SessionRow | undefined> {
    return this.#db.selectFrom("sessions").selectAll().where("tenant", "=", tenant).where("id", "=", id).executeTakeFirst();
  }

  /** A page of the tenant's sessions, newest first. */
  async listSessions(tenant: string, limit: number, offset: number): Promise<SessionRow[]> {
    return this.#db.selectFrom("sessions").selectAll().where("tenant", "=", tenant)
      .orderBy("created_at", "desc").orderBy("id", "desc").limit(limit).offset(offset).execute();
  }

  /** Records a session's new sandbox mode (and the activity). */
  async setSandboxMode(id: string, mode: string): Promise<void> {
    await this.#db.updateTable("sessions").set({ sandbox_mode: mode, updated_at: timestamp() }).where("id", "=", id).execute();
  }

  /** Records a session's new mode (changed before its first message). */
  async setMode(id: string, mode: string): Promise<void> {
    await this.#db.updateTable("sessions").set({ mode, updated_at: timestamp() }).where("id", "=", id).execute();
  }

  /** Records activity on a session (a posted message). */
  async touchSession(id: string): Promise<void> {
    await this.#db.updateTable("sessions").set({ updated_at: timestamp() }).where("id", "=", id).execute();
  }

  /**
   * Sessions of every tenant with no recorded activity since `before` (ISO time), least recently
   * active first; `after` continues from the last row of the previous page (for the retention sweep).
   */
  async idleSessions(before: string, limit: number, after?: { updatedAt: string; id: string }): Promise<SessionRow[]> {
    let query = this.#db.selectFrom("sessions").selectAll().where("updated_at", "<", before);
    if (after) {
      query = query.where((eb) => eb.or([eb("updated_at", ">", after.updatedAt), eb.and([eb("updated_at", "=", after.updatedAt), eb("id", ">", after.id)])]));
    }
    return query.orderBy("updated_at", "asc").orderBy("id", "asc").limit(limit).execute();
  }
}
