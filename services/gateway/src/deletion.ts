// Deleting sessions: the API route, the retention sweep, and the one function both use (and
// that a workspace deletion calls for each of its sessions). The loop removes what lives on
// the bus (docs/decisions/0006-deletion.md); the gateway then removes its index row and audits.
import { JetStreamApiError } from "@nats-io/jetstream";
import { LoopRpc, TackError } from "@tack/bus";
import { DeleteSessionRequest, DeleteSessionResponse, type gatewayV1 } from "@tack/proto";
import type { Logger } from "@tack/telemetry";
import { auditRecord, callerActor, type AuditActor, type AuditRow } from "./audit.js";
import { GatewayError } from "./errors.js";
import type { Operation } from "./call.js";
import { requestLoop, requireSession, type GatewayContext } from "./gateway-context.js";
import type { SessionRow } from "./store.js";
import { errorMessage } from "./thrown.js";

/** What deleting one session removed, and its audit record. */
export interface SessionDeletion {
  readonly record: AuditRow;
  readonly removed: DeleteSessionResponse;
}

const DAY_MS = 86_400_000;
const NO_MESSAGE = 10037;

/**
 * Deletes one session everywhere: asks the loop (the session's owner first, else any replica,
 * which takes the lease) to remove its sandbox containers, spilled results, log subject and
 * lease, then removes the index row and writes the audit record in one transaction. The caller
 * has checked that `row` is its tenant's. A running turn is not cancelled: the deletion is
 * refused with 409 `gateway.session_busy` and nothing is removed. 404
 * `gateway.session_not_found` when a concurrent deletion removed the row first. `details` are
 * added to the audit record (e.g. why: a deleted workspace, the retention age).
 */
export async function deleteSession(context: GatewayContext, row: SessionRow, actor: AuditActor, details: Readonly<Record<string, unknown>> = {}): Promise<SessionDeletion> {
  const request = DeleteSessionRequest.fromPartial({ tenant: row.tenant, sessionId: row.id, deletedBy: actor.kind === "api_key" ? `key:${actor.keyId}` : actor.kind });
  let removed: DeleteSessionResponse;
  try {
    removed = await requestLoop(context, LoopRpc.DeleteSession, row.id, request);
  } catch (error) {
    const e = TackError.from(error);
    if (e.code === "loop.busy" || e.code === "loop.session_busy") {
      throw new GatewayError(409, "gateway.session_busy", `${e.message} (nothing was deleted)`, { details: { session_id: row.id }, cause: e });
    }
    throw e;
  }
  // The log is gone: followers in this process hear it, and the session's feed closes.
  context.feeds.forget(row, new GatewayError(404, "gateway.session_not_found", `session ${JSON.stringify(row.id)} was deleted`));
  const record = await context.audit.removeSession(row, actor, {
    title: row.title, log_messages: removed.logMessages, spill_objects: removed.spillObjects, sandboxes_removed: removed.sandboxesRemoved, ...details,
  }).finally(() => context.index.sessionChanged(row.id));
  if (!record) throw new GatewayError(404, "gateway.session_not_found", `session ${JSON.stringify(row.id)} was deleted by another request meanwhile`);
  return { record, removed };
}

/** `DELETE /v1/sessions/:id`: deletes the caller's session (see `deleteSession`); another tenant's is a 404 and stays untouched. */
export function deleteSessionRoute(context: GatewayContext): Operation<gatewayV1.DeleteSessionRequest, gatewayV1.DeleteSessionResponse> {
  return async (call, request) => {
    const row = await requireSession(context, call, request.id);
    const { record, removed } = await deleteSession(context, row, callerActor(call));
    return { message: {
      id: row.id, deleted: true,
      removed: { logMessages: removed.logMessages, spillObjects: removed.spillObjects, sandboxes: removed.sandboxesRemoved },
      audit: auditRecord(record),
    } };
  };
}

/** What one retention sweep did. */
export interface SweepResult {
  readonly deleted: string[];
  /** Sessions old by the index but refused (a turn runs) or failed; retried at the next sweep. */
  readonly skipped: string[];
}

/** The periodic retention sweep of a gateway. */
export interface RetentionSweep {
  /** Runs one sweep now (waiting for a running one to end first). */
  sweep(): Promise<SweepResult>;
  /** Stops sweeping and waits for a running sweep to end. */
  stop(): Promise<void>;
}

/**
 * Deletes, every `intervalMs`, the sessions (of every tenant in this gateway's index) idle for
 * longer than `maxAgeDays`: no API activity recorded in the index and no log event for that
 * long. Each goes through `deleteSession` with actor `retention`; one with a running turn is
 * skipped until a later sweep. Without `maxAgeDays` nothing is ever swept.
 */
export function startRetentionSweep(context: GatewayContext, options: { maxAgeDays: number | undefined; intervalMs: number }, log: Logger): RetentionSweep {
  let running: Promise<SweepResult> | undefined;
  const once = async (): Promise<SweepResult> => {
    const result: SweepResult = { deleted: [], skipped: [] };
    if (options.maxAgeDays === undefined) return result;
    const maxAgeMs = options.maxAgeDays * DAY_MS;
    const cutoff = new Date(Date.now() - maxAgeMs).toISOString();
    let after: { updatedAt: string; id: string } | undefined;
    for (;;) {
      if (context.shutdown.aborted) return result;
      const page = await context.index.idleSessions(cutoff, 100, after);
      if (page.length === 0) return result;
      for (const row of page) {
        if (context.shutdown.aborted) return result;
        try {
          // The index only sees API calls; a long turn keeps logging after its message was posted.
          const lastEvent = await lastLogTime(context, row);
          if (lastEvent !== undefined && lastEvent > Date.now() - maxAgeMs) continue;
          await deleteSession(context, row, { kind: "retention" }, { idle_since: new Date(Math.max(Date.parse(row.updated_at), lastEvent ?? 0)).toISOString(), max_age_days: options.maxAgeDays });
          result.deleted.push(row.id);
          log.info("session deleted by retention", { session: row.id, tenant: row.tenant, max_age_days: options.maxAgeDays });
        } catch (error) {
          const code = TackError.from(error).code;
          // Another gateway sharing the index (or a caller) deleted it first: nothing left to do.
          if (code === "gateway.session_not_found") continue;
          result.skipped.push(row.id);
          const fields = { session: row.id, tenant: row.tenant, error: errorMessage(error) };
          if (code === "gateway.session_busy") log.info("retention skips a session with a running turn until the next sweep", fields);
          else log.warn("retention could not delete a session; retrying at the next sweep", fields);
        }
      }
      const last = page.at(-1)!;
      after = { updatedAt: last.updated_at, id: last.id };
    }
  };
  const sweep = async (): Promise<SweepResult> => {
    while (running) await running.catch(() => undefined);
    running = once().finally(() => { running = undefined; });
    return running;
  };
  // Without a maximum age nothing is swept, so nothing is scheduled.
  const timer = options.maxAgeDays === undefined ? undefined : setInterval(() => {
    if (running || context.shutdown.aborted) return;
    sweep().catch((error: unknown) => log.warn("retention sweep failed", { error: errorMessage(error) }));
  }, options.intervalMs);
  timer?.unref();
  return {
    sweep,
    async stop() {
      clearInterval(timer);
      await running?.catch(() => undefined);
    },
  };
}

/** Epoch milliseconds of the session's last log event, or undefined when its log is empty. */
async function lastLogTime(context: GatewayContext, row: SessionRow): Promise<number | undefined> {
  const { names } = context.bus;
  try {
    const message = await context.jsm.streams.getMessage(names.logStream, { last_by_subj: names.logSubject(row.tenant, row.id) });
    return message ? message.time.getTime() : undefined;
  } catch (error) {
    if (error instanceof JetStreamApiError && error.code === NO_MESSAGE) return undefined;
    throw error;
  }
}
