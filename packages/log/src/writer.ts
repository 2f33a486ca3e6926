import { jetstream, jetstreamManager, JetStreamApiError, type JetStreamClient, type JetStreamManager } from "@nats-io/jetstream";
import { headers as newHeaders, type NatsConnection } from "@nats-io/nats-core";
import { MAX_BUS_PAYLOAD, TackError, injectTrace, type Names } from "@tack/bus";
import { Event } from "@tack/proto";
import { LogConflictError } from "./errors.js";
import { materialize, now, type Draft } from "./event.js";

const WRONG_LAST_SEQUENCE = 10071;

/** Where a session's log lives. */
export interface SessionAddress {
  readonly tenant: string;
  readonly sessionId: string;
}

/**
 * The single writer of one session log. Every append carries `Nats-Msg-Id = <session>:<seq>`
 * (so a retried append is stored once) and the expected last subject sequence (so a second
 * writer is detected, never silently interleaved).
 */
export class SessionLogWriter {
  readonly subject: string;
  readonly #js: JetStreamClient;
  readonly #jsm: JetStreamManager;
  readonly #stream: string;
  readonly #sessionId: string;
  #lastSeq: number;
  #lastStreamSeq: number;
  #queue: Promise<unknown> = Promise.resolve();
  #broken: TackError | undefined;

  private constructor(js: JetStreamClient, jsm: JetStreamManager, stream: string, subject: string, sessionId: string, lastSeq: number, lastStreamSeq: number) {
    this.#js = js;
    this.#jsm = jsm;
    this.#stream = stream;
    this.subject = subject;
    this.#sessionId = sessionId;
    this.#lastSeq = lastSeq;
    this.#lastStreamSeq = lastStreamSeq;
  }

  /** Called synchronously, in seq order, with each event once it is stored. */
  onAppend: ((event: Event) => void) | undefined;

  /** Opens the writer at the current end of the session's log. */
  static async open(nc: NatsConnection, names: Names, address: SessionAddress): Promise<SessionLogWriter> {
    const subject = names.logSubject(address.tenant, address.sessionId);
    const jsm = await jetstreamManager(nc);
    const last = await jsm.streams.getMessage(names.logStream, { last_by_subj: subject }).catch((error: unknown) => {
      if (error instanceof JetStreamApiError && error.code === 10037) return null;
      throw error;
    });
    const lastSeq = last ? Event.decode(last.data).seq : 0;
    return new SessionLogWriter(jetstream(nc), jsm, names.logStream, subject, address.sessionId, lastSeq, last ? last.seq : 0);
  }

  /** Seq of the last event this writer knows is in the log (0 for an empty log). */
  get lastSeq(): number {
    return this.#lastSeq;
  }

  /** Appends events in order; resolves with them as stored. Appends are serialized per writer. */
  append(...drafts: Draft[]): Promise<Event[]> {
    const run = this.#queue.then(() => this.#appendAll(drafts));
    this.#queue = run.catch(() => undefined);
    return run;
  }

  async #appendAll(drafts: Draft[]): Promise<Event[]> {
    const out: Event[] = [];
    for (const d of drafts) out.push(await this.#appendOne(d));
    return out;
  }

  async #storedEquals(streamSeq: number, data: Uint8Array): Promise<boolean> {
    const stored = await this.#jsm.streams.getMessage(this.#stream, { seq: streamSeq });
    return stored !== null && Buffer.from(stored.data).equals(Buffer.from(data));
  }

  async #appendOne(d: Draft): Promise<Event> {
    if (this.#broken) throw this.#broken;
    const event = materialize(d, this.#lastSeq + 1, now());
    const data = Event.encode(event).finish();
    if (data.length > MAX_BUS_PAYLOAD) {
      throw new TackError("log.event_too_large", `event ${event.type} is ${data.length} bytes, over the ${MAX_BUS_PAYLOAD}-byte limit; store large content in the object store and log a reference`);
    }
    const msgID = `${this.#sessionId}:${event.seq}`;
    const h = newHeaders();
    injectTrace(h);
    for (let attempt = 1; ; attempt++) {
      try {
        const ack = await this.#js.publish(this.subject, data, {
          msgID, headers: h, expect: { lastSubjectSequence: this.#lastStreamSeq }, timeout: 5_000,
        });
        if (ack.duplicate && !(await this.#storedEquals(ack.seq, data))) {
          // Same Msg-Id but other bytes: another writer appended this seq first.
          this.#broken = new LogConflictError(this.subject, this.#lastStreamSeq);
          throw this.#broken;
        }
        this.#lastSeq = event.seq;
        this.#lastStreamSeq = ack.seq;
        this.onAppend?.(event);
        return event;
      } catch (error) {
        if (error instanceof LogConflictError) throw error;
        if (error instanceof JetStreamApiError && error.code === WRONG_LAST_SEQUENCE) {
          this.#broken = new LogConflictError(this.subject, this.#lastStreamSeq, error);
          throw this.#broken;
        }
        // Transport trouble (broker restart, timeout): the same Msg-Id makes the retry idempotent.
        if (attempt >= 20) {
          throw new TackError("log.append_failed", `could not append to ${this.subject} after ${attempt} attempts: ${(error as Error).message}; is NATS running?`, { retryable: true, cause: error });
        }
        await new Promise((r) => setTimeout(r, Math.min(250 * attempt, 2_000)));
      }
    }
  }
}
