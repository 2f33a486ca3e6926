import { jetstreamManager, type JetStreamManager, type MsgRequest } from "@nats-io/jetstream";
import { TackError, type Bus } from "@tack/bus";
import { Event } from "@tack/proto";

/** What the loop logged when it created a session: the facts a sandbox is made from. */
export interface SessionFacts {
  readonly tenant: string;
  readonly workspace: string;
}

/**
 * Learns a session's tenant and workspace from its log (`session/created`, always seq 1 of the
 * subject `<ns>.log.<tenant>.<session>`), not from the ensure request: only the loop may append
 * to session logs (bus permissions), while the request comes from the tools service, which acts
 * on the model's behalf. A request whose tenant has no such log, or whose workspace differs
 * from the logged one, is refused. Facts never change, so they are cached per session.
 */
export class SessionRegistry {
  readonly #bus: Bus;
  readonly #known = new Map<string, SessionFacts>();
  #jsm: Promise<JetStreamManager> | undefined;

  constructor(bus: Bus) {
    this.#bus = bus;
  }

  /** Checks an ensure request against the log; fails with `sandbox.session_unknown` or `sandbox.workspace_mismatch`. */
  async verify(sessionId: string, tenant: string, workspace: string): Promise<SessionFacts> {
    const facts = this.#known.get(sessionId) ?? (await this.#read(sessionId, tenant));
    if (facts.tenant !== tenant) throw unknown(sessionId, tenant);
    if (facts.workspace !== workspace) {
      throw new TackError("sandbox.workspace_mismatch", `session ${sessionId} was created on workspace ${facts.workspace}, not ${workspace}; a sandbox only ever mounts the workspace its session was created with`, {
        details: { session_id: sessionId },
      });
    }
    return facts;
  }

  async #read(sessionId: string, tenant: string): Promise<SessionFacts> {
    const { names } = this.#bus;
    this.#jsm ??= jetstreamManager(this.#bus.nc);
    const jsm = await this.#jsm;
    // STREAM.MSG.GET with next_by_subj (nats-server >= 2.9; the client's type only lists seq and last_by_subj).
    const first = { seq: 1, next_by_subj: names.logSubject(tenant, sessionId) } as unknown as MsgRequest;
    const stored = await jsm.streams.getMessage(names.logStream, first).catch((error: unknown) => {
      // No stream, or no message on that subject: either way this tenant has no such session.
      if (/no message found|stream not found/i.test((error as Error).message)) return null;
      throw new TackError("sandbox.log_unavailable", `cannot read the log of session ${sessionId} to check the request (${(error as Error).message}); retry`, { retryable: true, cause: error });
    });
    if (!stored) throw unknown(sessionId, tenant);
    const event = Event.decode(stored.data);
    if (event.payload?.$case !== "sessionCreated" || event.payload.value.sessionId !== sessionId) throw unknown(sessionId, tenant);
    const facts = { tenant, workspace: event.payload.value.workspace };
    this.#known.set(sessionId, facts);
    return facts;
  }
}

function unknown(sessionId: string, tenant: string): TackError {
  return new TackError("sandbox.session_unknown", `tenant ${tenant} has no session ${sessionId} in the log; sandboxes are only made for sessions the loop created`, {
    details: { session_id: sessionId },
  });
}
