// Deleting a session: everything kept for it on the bus side, in an order that a retry can finish.
import { jetstreamManager, JetStreamApiError, type JetStreamManager } from "@nats-io/jetstream";
import { SandboxRpc, TackError, type Bus } from "@tack/bus";
import { SpillBucket, type SessionAddress } from "@tack/log";
import type { Lease, Leases } from "./lease.js";

/** What deleting a session removed. */
export interface DeletedSession {
  /** False when the log was already empty: an earlier deletion got that far, only leftovers were removed. */
  readonly existed: boolean;
  /** Messages purged from the session's log subject. */
  readonly logMessages: number;
  /** Spilled tool results deleted from the object store. */
  readonly spillObjects: number;
  /** True when the sandbox service removed at least one container. */
  readonly sandboxesRemoved: boolean;
}

/** What a deletion needs from its loop service. */
export interface DeletionDeps {
  readonly bus: Bus;
  readonly leases: Leases;
}

const STREAM_NOT_FOUND = 10059;
// Removing containers of every mode (and forwarding to the replicas that hold them) takes seconds, not minutes.
const RELEASE_TIMEOUT_MS = 60_000;

/**
 * Deletes everything kept for a session whose lease (`lease`) the caller holds and keeps
 * renewed here, so no turn can start meanwhile: its sandbox containers of every mode and their
 * placement records, its spilled results, its log subject and, last, its lease. The order makes
 * a failure retryable: sandboxes go while the log still proves the session exists (a container
 * is named by session id alone, so an empty log is no proof whose it would be), and the lease
 * goes only when everything else is gone. Throws with nothing further removed at the first failure.
 */
export async function deleteSessionData(deps: DeletionDeps, address: SessionAddress, lease: Lease): Promise<DeletedSession> {
  const { bus, leases } = deps;
  const { names } = bus;
  const jsm = await jetstreamManager(bus.nc);
  let lost: unknown;
  let renewing: Promise<void> = Promise.resolve();
  const timer = setInterval(() => {
    renewing = renewing.then(() => leases.renew(lease)).catch((error: unknown) => { lost ??= error; });
  }, Math.max(100, Math.floor(leases.ttlMs / 3)));
  timer.unref();
  // Another loop took the session over (we stalled past the lease): stop before removing more.
  const stillOurs = () => {
    if (lost) throw TackError.from(lost, "loop.lease_lost");
  };
  try {
    const subject = names.logSubject(address.tenant, address.sessionId);
    const existing = await subjectMessages(jsm, names.logStream, subject);
    let sandboxesRemoved = false;
    if (existing > 0) {
      sandboxesRemoved = await releaseSandboxes(bus, address.sessionId);
      stillOurs();
      // The sandbox service deleted the records; their delete markers still name the session.
      await purgeIfExists(jsm, `KV_${names.sandboxBucket}`, `$KV.${names.sandboxBucket}.${address.sessionId}.>`);
    }
    stillOurs();
    const spills = await SpillBucket.open(bus.nc, names);
    const spillObjects = spills ? await spills.deleteSession(address) : 0;
    stillOurs();
    const purged = await jsm.streams.purge(names.logStream, { filter: subject });
    clearInterval(timer);
    await renewing;
    stillOurs();
    await leases.erase(lease.key);
    return { existed: existing > 0, logMessages: purged.purged, spillObjects, sandboxesRemoved };
  } finally {
    clearInterval(timer);
    await renewing;
  }
}

/** How many messages one subject of a stream holds. */
async function subjectMessages(jsm: JetStreamManager, stream: string, subject: string): Promise<number> {
  const info = await jsm.streams.info(stream, { subjects_filter: subject });
  return info.state.subjects?.[subject] ?? 0;
}

/** Removes every container of the session, whichever sandbox replica holds it; true when one was removed. */
async function releaseSandboxes(bus: Bus, sessionId: string): Promise<boolean> {
  try {
    // An empty mode releases the session's containers of every mode.
    const released = await bus.request(SandboxRpc.ReleaseSandbox, { sessionId, mode: "" }, { timeoutMs: RELEASE_TIMEOUT_MS });
    return released.removed;
  } catch (error) {
    const e = TackError.from(error);
    if (e.code === "bus.no_responders" || e.code === "bus.timeout") {
      throw new TackError("loop.sandbox_unavailable", `cannot remove the session's sandbox containers (${e.message}); the session's log and other data are kept: start the sandbox service (\`tack up\`) and retry`, { retryable: true, cause: e });
    }
    throw e;
  }
}

/** Purges a stream's messages on `filter`; a stream that was never created holds none. */
async function purgeIfExists(jsm: JetStreamManager, stream: string, filter: string): Promise<void> {
  try {
    await jsm.streams.purge(stream, { filter });
  } catch (error) {
    if (error instanceof JetStreamApiError && error.code === STREAM_NOT_FOUND) return;
    throw error;
  }
}
