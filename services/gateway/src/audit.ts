// The tenant-visible audit trail: who (an API key's id, never the key, or the retention sweep)
// did what to which session, when. Records outlive the sessions they name.
import { randomBytes } from "node:crypto";
import type { Kysely, Selectable } from "kysely";
import { timestamp, type AuditTable, type Database } from "./db.js";
import type { Call, Operation } from "./call.js";
import { keyId } from "./keys.js";
import type { SessionRow } from "./store.js";

/** An audit record as the index stores it. */
export type AuditRow = Selectable<AuditTable>;

/** Who acts: a caller's API key (by id), or the gateway's retention sweep. */
export type AuditActor = { readonly kind: "api_key"; readonly keyId: string } | { readonly kind: "retention" };

/** The id of the caller's API key, as the admin API shows it; never the key itself. */
export function callerKeyId(call: Call): string {
  return keyId(call.caller.keyHash);
}

/** Queries of the audit table. */
export class AuditLog {
  readonly #db: Kysely<Database>;

  constructor(db: Kysely<Database>) {
    this.#db = db;
  }

  /**
   * Removes a session's index row and records its deletion in one transaction, so a deletion is
   * never recorded twice nor a row removed unrecorded. Returns undefined (and records nothing)
   * when the row was already gone: another deletion got there first.
   */
  async removeSession(row: SessionRow, actor: AuditActor, details: Readonly<Record<string, unknown>>): Promise<AuditRow | undefined> {
    return this.#db.transaction().execute(async (trx) => {
      const removed = await trx.deleteFrom("sessions").where("id", "=", row.id).where("tenant", "=", row.tenant).executeTakeFirst();
      if (Number(removed.numDeletedRows) === 0) return undefined;
      const record: AuditRow = {
        // Time first, so ids sort like the records they name; the random part keeps them unique across gateways.
        id: `a${Date.now().toString(36)}${randomBytes(5).toString("hex")}`,
        tenant: row.tenant, at: timestamp(), actor: actor.kind, key_id: actor.kind === "api_key" ? actor.keyId : null,
        action: "session.delete", session_id: row.id, details: JSON.stringify(details),
      };
      await trx.insertInto("audit").values(record).execute();
      return record;
    });
  }

  /** A page of the tenant's records, newest first. */
  async list(tenant: string, limit: number, offset: number): Promise<AuditRow[]> {
    return this.#db.selectFrom("audit").selectAll().where("tenant", "=", tenant)
      .orderBy("at", "desc").orderBy("id", "desc").limit(limit).offset(offset).execute();
  }
}

/** The JSON form of a record. */
export function auditJson(row: AuditRow) {
  return { id: row.id, at: row.at, actor: row.actor, key_id: row.key_id, action: row.action, session_id: row.session_id, details: JSON.parse(row.details) as unknown };
}

/** `ListAudit`: the caller's tenant's audit records, newest first (`limit`, `offset`). */
export function listAudit(audit: AuditLog): Operation {
  return async (call, query) => {
    const limit = (query.limit as number | undefined) ?? 50;
    const offset = (query.offset as number | undefined) ?? 0;
    const rows = await audit.list(call.tenant, limit, offset);
    return { body: { records: rows.map(auditJson), limit, offset } };
  };
}
