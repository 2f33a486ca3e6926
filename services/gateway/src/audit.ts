// The tenant-visible audit trail: who (an API key's id and name, never the key, or the retention
// sweep) did what to which session, when: deletions, and the decisions people make on approvals,
// questions and plans. Records outlive the sessions they name.
import { randomBytes } from "node:crypto";
import type { Kysely, Selectable } from "kysely";
import type { gatewayV1 } from "@tack/proto";
import { timestamp, type AuditTable, type Database } from "./db.js";
import type { Call, Operation } from "./call.js";
import { keyId } from "./keys.js";
import type { SessionRow } from "./store.js";

/** An audit record as the index stores it. */
export type AuditRow = Selectable<AuditTable>;

/** Who acts: a caller's API key (by id and name), or the gateway's retention sweep. */
export type AuditActor = { readonly kind: "api_key"; readonly keyId: string; readonly keyName: string } | { readonly kind: "retention" };

/** What a person decided on a waiting call, as the audit trail names it. */
export type DecisionAction = "approval.decide" | "question.answer" | "plan.decide";

/** The id of the caller's API key, as the admin API shows it; never the key itself. */
export function callerKeyId(call: Call): string {
  return keyId(call.caller.keyHash);
}

/** The caller as an audit actor: its key's id and name. */
export function callerActor(call: Call): AuditActor {
  return { kind: "api_key", keyId: callerKeyId(call), keyName: call.caller.keyName };
}

/** A new record's id: time first, so ids sort like the records they name; the random part keeps them unique across gateways. */
function recordId(): string {
  return `a${Date.now().toString(36)}${randomBytes(5).toString("hex")}`;
}

/** The actor's columns of a record. */
function actorColumns(actor: AuditActor): Pick<AuditRow, "actor" | "key_id" | "key_name"> {
  return actor.kind === "api_key" ? { actor: actor.kind, key_id: actor.keyId, key_name: actor.keyName } : { actor: actor.kind, key_id: null, key_name: null };
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
        id: recordId(), tenant: row.tenant, at: timestamp(), ...actorColumns(actor),
        action: "session.delete", session_id: row.id, details: JSON.stringify(details),
      };
      await trx.insertInto("audit").values(record).execute();
      return record;
    });
  }

  /**
   * Records a person's decision on a waiting call of a session (after the loop logged it): the
   * key that decided, by id and name, and what it decided (`details`: call id, decision, seq).
   */
  async recordDecision(tenant: string, sessionId: string, actor: AuditActor, action: DecisionAction, details: Readonly<Record<string, unknown>>): Promise<AuditRow> {
    const record: AuditRow = { id: recordId(), tenant, at: timestamp(), ...actorColumns(actor), action, session_id: sessionId, details: JSON.stringify(details) };
    await this.#db.insertInto("audit").values(record).execute();
    return record;
  }

  /** A page of the tenant's records, newest first. */
  async list(tenant: string, limit: number, offset: number): Promise<AuditRow[]> {
    return this.#db.selectFrom("audit").selectAll().where("tenant", "=", tenant)
      .orderBy("at", "desc").orderBy("id", "desc").limit(limit).offset(offset).execute();
  }
}

/** A record as the API's message (`details` stays JSON text; REST writes it as the object). */
export function auditRecord(row: AuditRow): gatewayV1.AuditRecord {
  return {
    id: row.id, at: row.at, actor: row.actor, keyId: row.key_id ?? undefined, keyName: row.key_name ?? undefined,
    action: row.action, sessionId: row.session_id ?? undefined, details: row.details,
  };
}

/** `ListAudit`: the caller's tenant's audit records, newest first (`limit`, `offset`). */
export function listAudit(audit: AuditLog): Operation<gatewayV1.ListAuditRequest, gatewayV1.ListAuditResponse> {
  return async (call, query) => {
    const { limit, offset } = query;
    const rows = await audit.list(call.tenant, limit, offset);
    return { message: { records: rows.map(auditRecord), limit, offset } };
  };
}
