import type { Kysely, Selectable } from "kysely";
import { timestamp, type ApiKeysTable, type Database, type SessionsTable } from "./db.js";
import type { ResolvedKey } from "./keys.js";

/** A session as the index stores it. */
export type SessionRow = Selectable<SessionsTable>;

/** An API key as the index stores it (its hash, never the key). */
export type KeyRow = Selectable<ApiKeysTable>;

/** Which sessions a list shows (all ISO-8601 times). */
export interface SessionFilter {
  readonly archived?: boolean;
  readonly workspace?: string;
  readonly createdBefore?: string;
  readonly createdAfter?: string;
  /** Continue after this row (newest-first order). */
  readonly after?: { readonly createdAt: string; readonly id: string };
}

/** How long a session row read from the index is used without reading it again. */
export const ROW_CACHE_MS = 1000;

/** Queries of the gateway's SQL index: API key hashes with roles and the per-tenant session list. */
export class SessionIndex {
  readonly #db: Kysely<Database>;
  /**
   * Session rows read in the last `ROW_CACHE_MS`, by id: a client polling a session costs one
   * index read a second. Every change made through this index drops the row at once; a change
   * through another gateway replica is announced on the bus (`forgetSession`).
   */
  readonly #rows = new Map<string, { row: SessionRow; at: number }>();
  #changes = 0;
  #listener: ((id: string) => Promise<void>) | undefined;

  constructor(db: Kysely<Database>) {
    this.#db = db;
  }

  /**
   * Makes `keys` the complete set of configured keys (sources `config` and `env`), creating
   * their tenants and the operator's `tenants`; keys created over the API stay as they are.
   */
  async replaceConfiguredKeys(keys: readonly ResolvedKey[], tenants: readonly string[]): Promise<void> {
    const at = timestamp();
    // Gateway replicas starting at once on one PostgreSQL run this concurrently with the same
    // keys: the inserts are upserts (a replica that waited on another's uncommitted row then
    // updates it instead of failing on the duplicate), in one order (rows are locked alike).
    const all = [...new Set([...tenants, ...keys.map((k) => k.tenant)])].sort();
    const rows = keys.map((k) => ({ hash: k.hash, tenant: k.tenant, role: k.role, name: k.name, source: k.source, created_at: at, revoked_at: null }))
      .sort((a, b) => (a.hash < b.hash ? -1 : a.hash > b.hash ? 1 : 0));
    await this.#db.transaction().execute(async (trx) => {
      if (all.length > 0) await trx.insertInto("tenants").values(all.map((id) => ({ id, created_at: at }))).onConflict((oc) => oc.column("id").doNothing()).execute();
      await trx.deleteFrom("api_keys").where("source", "!=", "api").execute();
      // A configured key that equals an API-created one is the operator's from now on.
      if (rows.length > 0) await trx.deleteFrom("api_keys").where("hash", "in", rows.map((k) => k.hash)).execute();
      if (rows.length > 0) {
        await trx.insertInto("api_keys").values(rows).onConflict((oc) => oc.column("hash").doUpdateSet((eb) => ({
          tenant: eb.ref("excluded.tenant"), role: eb.ref("excluded.role"), name: eb.ref("excluded.name"), source: eb.ref("excluded.source"),
          created_at: eb.ref("excluded.created_at"), revoked_at: null,
        }))).execute();
      }
    });
  }

  /** Every key that works (not revoked), with its tenant, role and name. */
  async activeKeys(): Promise<{ hash: string; tenant: string; role: string; name: string }[]> {
    return this.#db.selectFrom("api_keys").select(["hash", "tenant", "role", "name"]).where("revoked_at", "is", null).execute();
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
    const now = Date.now();
    const cached = this.#rows.get(id);
    if (cached && now - cached.at < ROW_CACHE_MS) return cached.row.tenant === tenant ? { ...cached.row } : undefined;
    const changes = this.#changes;
    const row = await this.#db.selectFrom("sessions").selectAll().where("id", "=", id).executeTakeFirst();
    if (!row) return undefined;
    // A row read while some row changed may be the old one: used for this answer, not kept.
    if (changes === this.#changes) {
      if (this.#rows.size >= 10_000) this.#rows.clear();
      this.#rows.set(id, { row, at: now });
    }
    return row.tenant === tenant ? { ...row } : undefined;
  }

  /** Reads the session's row from the index next time (another replica changed it). */
  forgetSession(id: string): void {
    this.#changes += 1;
    this.#rows.delete(id);
  }

  /** Calls `listener` after each change of a session row made through this index (to tell the other replicas). */
  onSessionChange(listener: (id: string) => Promise<void>): void {
    this.#listener = listener;
  }

  /** A session's row changed through this index (or was removed): forgotten here, announced to the other replicas. */
  async sessionChanged(id: string): Promise<void> {
    this.forgetSession(id);
    await this.#listener?.(id).catch(() => undefined);
  }

  /**
   * A page of the tenant's sessions, newest first: not archived ones unless `filter.archived`
   * (then only archived ones), optionally only those in one workspace (host path) or created in
   * a time window, after the row `filter.after` (a cursor: the last row of the previous page).
   */
  async listSessions(tenant: string, limit: number, offset: number, filter: SessionFilter = {}): Promise<SessionRow[]> {
    let query = this.#db.selectFrom("sessions").selectAll().where("tenant", "=", tenant).where("archived", "=", filter.archived ? 1 : 0);
    if (filter.workspace !== undefined) query = query.where("workspace", "=", filter.workspace);
    if (filter.createdBefore !== undefined) query = query.where("created_at", "<", filter.createdBefore);
    if (filter.createdAfter !== undefined) query = query.where("created_at", ">", filter.createdAfter);
    const after = filter.after;
    if (after) {
      query = query.where((eb) => eb.or([eb("created_at", "<", after.createdAt), eb.and([eb("created_at", "=", after.createdAt), eb("id", "<", after.id)])]));
    }
    return query.orderBy("created_at", "desc").orderBy("id", "desc").limit(limit).offset(offset).execute();
  }

  /** Archives a session (hidden from the default list) or brings it back. */
  async setArchived(id: string, archived: boolean): Promise<void> {
    try {
      await this.#db.updateTable("sessions").set({ archived: archived ? 1 : 0, updated_at: timestamp() }).where("id", "=", id).execute();
    } finally {
      await this.sessionChanged(id);
    }
  }

  /** Records a session's new sandbox mode (and the activity). */
  async setSandboxMode(id: string, mode: string): Promise<void> {
    try {
      await this.#db.updateTable("sessions").set({ sandbox_mode: mode, updated_at: timestamp() }).where("id", "=", id).execute();
    } finally {
      await this.sessionChanged(id);
    }
  }

  /** Records a session's new mode (changed before its first message). */
  async setMode(id: string, mode: string): Promise<void> {
    try {
      await this.#db.updateTable("sessions").set({ mode, updated_at: timestamp() }).where("id", "=", id).execute();
    } finally {
      await this.sessionChanged(id);
    }
  }

  /** Records activity on a session (a posted message). */
  async touchSession(id: string): Promise<void> {
    try {
      await this.#db.updateTable("sessions").set({ updated_at: timestamp() }).where("id", "=", id).execute();
    } finally {
      await this.sessionChanged(id);
    }
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
