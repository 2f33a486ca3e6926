import type { Kysely, Selectable } from "kysely";
import { timestamp, type Database, type SessionsTable } from "./db.js";

/** A session as the index stores it. */
export type SessionRow = Selectable<SessionsTable>;

/** Queries of the gateway's SQL index: API key hashes and the per-tenant session list. */
export class SessionIndex {
  readonly #db: Kysely<Database>;

  constructor(db: Kysely<Database>) {
    this.#db = db;
  }

  /** Makes `keys` (hex SHA-256 hashes) the complete set of accepted keys, creating their tenants. */
  async replaceApiKeys(keys: readonly { hash: string; tenant: string }[]): Promise<void> {
    const at = timestamp();
    await this.#db.transaction().execute(async (trx) => {
      const tenants = [...new Set(keys.map((k) => k.tenant))];
      await trx.insertInto("tenants").values(tenants.map((id) => ({ id, created_at: at }))).onConflict((oc) => oc.column("id").doNothing()).execute();
      await trx.deleteFrom("api_keys").execute();
      await trx.insertInto("api_keys").values(keys.map((k) => ({ hash: k.hash, tenant: k.tenant, created_at: at }))).execute();
    });
  }

  /** Every accepted key hash with its tenant. */
  async apiKeys(): Promise<{ hash: string; tenant: string }[]> {
    return this.#db.selectFrom("api_keys").select(["hash", "tenant"]).execute();
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

  /** Records activity on a session (a posted message). */
  async touchSession(id: string): Promise<void> {
    await this.#db.updateTable("sessions").set({ updated_at: timestamp() }).where("id", "=", id).execute();
  }
}
