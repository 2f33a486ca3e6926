import { randomBytes } from "node:crypto";
import { jetstreamManager, JetStreamApiError, type JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { MAX_BUS_PAYLOAD, retrying, retryPolicy, TackError, type Names } from "@tack/bus";
import { Event } from "@tack/proto";
import { LogConflictError } from "./errors.js";
import { AckPublisher, PublishRefused, type StoredAck } from "./publisher.js";
import { materialize, now, type Draft } from "./event.js";

const WRONG_LAST_SEQUENCE = 10071;
const WRONG_LAST_MSG_ID = 10070;
/** About 30 s of attempts: a broker restart is waited out, a broker that stays away fails the append. */
const ANCHORED_RETRY = retryPolicy({ maxAttempts: 20, baseDelayMs: 250, maxDelayMs: 2_000 });

/** Where a session's log lives. */
export interface SessionAddress {
  readonly tenant: string;
  readonly sessionId: string;
}

/**
 * The single writer of one session log. Every append carries a `Nats-Msg-Id` unique to this
 * writer and seq (`<session>:<seq>:<writer>`, so a retried append is stored once) and an
 * expectation that chains it to the event before it (so a second writer is detected, never
 * silently interleaved):
 * - the first event published while nothing is in flight expects the last stored sequence of
 *   the session's subject (`Nats-Expected-Last-Subject-Sequence`);
 * - an event published while the one before it is still unacknowledged (pipelined) expects
 *   that event's Msg-Id to be the stream's last (`Nats-Expected-Last-Msg-Id`). That holds only
 *   if nothing at all was stored in between, so the chain stays unbroken without waiting for
 *   the ack. When another session's message got in between, the server refuses the event, and
 *   it is sent again with the subject-sequence expectation once its predecessor is acked.
 * Events are acknowledged, mirrored (`onAppend`) and resolved in seq order.
 */
export class SessionLogWriter {
  readonly subject: string;
  readonly #publisher: AckPublisher;
  readonly #jsm: JetStreamManager;
  readonly #stream: string;
  readonly #sessionId: string;
  readonly #writerId = randomBytes(4).toString("hex");
  /** Seq of the last event stored and acked, and its stream sequence. */
  #lastSeq: number;
  #lastStreamSeq: number;
  /** Seq the next event gets (ahead of `#lastSeq` while events are in flight). */
  #nextSeq: number;
  /** Completion of the latest event published (every earlier one settles before it). */
  #tail: Promise<unknown> = Promise.resolve();
  /** Msg-Id of the latest event published and whether it is still unacknowledged. */
  #tailMsgId = "";
  /** Whether that event was sent when it was appended (not deferred): only then may the next one pipeline behind it. */
  #tailSent = false;
  #inFlight = 0;
  /** Events left to publish one at a time after the stream was found busy with other sessions' messages. */
  #sequentialFor = 0;
  #broken: TackError | undefined;

  private constructor(publisher: AckPublisher, jsm: JetStreamManager, stream: string, subject: string, sessionId: string, lastSeq: number, lastStreamSeq: number) {
    this.#publisher = publisher;
    this.#jsm = jsm;
    this.#stream = stream;
    this.subject = subject;
    this.#sessionId = sessionId;
    this.#lastSeq = lastSeq;
    this.#lastStreamSeq = lastStreamSeq;
    this.#nextSeq = lastSeq + 1;
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
    return new SessionLogWriter(AckPublisher.of(nc), jsm, names.logStream, subject, address.sessionId, lastSeq, last ? last.seq : 0);
  }

  /** Resolves once every append made so far is stored (and mirrored); throws when one failed. */
  async flush(): Promise<void> {
    await this.#tail;
    if (this.#broken) throw this.#broken;
  }

  /** Set once an append failed for good (another writer, or NATS unreachable for long): this writer appends nothing more; open a new one. */
  get broken(): TackError | undefined {
    return this.#broken;
  }

  /** Seq of the last event this writer knows is in the log (0 for an empty log). */
  get lastSeq(): number {
    return this.#lastSeq;
  }

  /**
   * Appends events in order; resolves with them as stored. Publishing starts at once, also
   * while earlier appends are still unacknowledged (see the class comment); a failure of one
   * event fails every later one of this writer.
   */
  append(...drafts: Draft[]): Promise<Event[]> {
    try {
      return Promise.all(drafts.map((d) => this.#publish(d)));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  #publish(d: Draft): Promise<Event> {
    if (this.#broken) throw this.#broken;
    const event = materialize(d, this.#nextSeq, now());
    const data = Event.encode(event).finish();
    if (data.length > MAX_BUS_PAYLOAD) {
      throw new TackError("log.event_too_large", `event ${event.type} is ${data.length} bytes, over the ${MAX_BUS_PAYLOAD}-byte limit; store large content in the object store and log a reference`);
    }
    this.#nextSeq += 1;
    const msgID = `${this.#sessionId}:${event.seq}:${this.#writerId}`;
    const previous = this.#tail;
    // Sent at once when nothing is in flight (anchored on the subject's last sequence, known
    // now), or behind an event of ours that was itself sent at once (pipelined on its Msg-Id);
    // otherwise sent anchored once everything before it is acked.
    let first: Promise<StoredAck> | undefined;
    if (this.#inFlight === 0) {
      first = this.#publisher.publish(this.subject, data, msgID, { lastSubjectSequence: this.#lastStreamSeq });
    } else if (this.#sequentialFor === 0 && this.#tailSent) {
      first = this.#publisher.publish(this.subject, data, msgID, { lastMsgId: this.#tailMsgId });
    }
    first?.catch(() => undefined);
    this.#inFlight += 1;
    this.#tailMsgId = msgID;
    this.#tailSent = first !== undefined;
    const done = (async () => {
      try {
        // Everything before this event settles first: acks are taken (and mirrored) in seq order.
        await previous;
        if (this.#broken) throw this.#broken;
        let ack: StoredAck | undefined;
        if (first) {
          try {
            ack = await first;
          } catch (error) {
            if (error instanceof PublishRefused && error.code === WRONG_LAST_SEQUENCE) throw this.#conflict(error);
            // Another session's message got in between: publish the next few one at a time.
            if (error instanceof PublishRefused && error.code === WRONG_LAST_MSG_ID) this.#sequentialFor = 16;
            // Anything else (a timeout, a broker restart) is sent again below; the Msg-Id keeps that idempotent.
          }
        }
        ack ??= await this.#publishAnchored(data, msgID);
        if (ack.duplicate && !(await this.#storedEquals(ack.seq, data))) throw this.#conflict();
        if (this.#sequentialFor > 0) this.#sequentialFor -= 1;
        this.#lastSeq = event.seq;
        this.#lastStreamSeq = ack.seq;
        this.onAppend?.(event);
        return event;
      } catch (error) {
        if (!this.#broken) this.#broken = error instanceof TackError ? error : TackError.from(error, "log.append_failed");
        throw error;
      } finally {
        this.#inFlight -= 1;
      }
    })();
    this.#tail = done.catch(() => undefined);
    return done;
  }

  /** Publishes with the subject-sequence expectation, retrying transport failures (the Msg-Id keeps that idempotent). */
  async #publishAnchored(data: Uint8Array, msgID: string): Promise<StoredAck> {
    try {
      return await retrying(ANCHORED_RETRY, () => this.#publisher.publish(this.subject, data, msgID, { lastSubjectSequence: this.#lastStreamSeq }), {
        // Transport trouble (broker restart, timeout) is retried; a refusal will not change by sending it again.
        retryable: (error) => !(error.cause instanceof PublishRefused),
      });
    } catch (error) {
      const cause = (error as TackError).cause;
      if (cause instanceof PublishRefused && cause.code === WRONG_LAST_SEQUENCE) throw this.#conflict(cause);
      if (cause instanceof PublishRefused) {
        throw new TackError("log.append_failed", `JetStream refused an append to ${this.subject} (error ${cause.code}: ${cause.message}); is the log stream there?`, { cause });
      }
      throw new TackError("log.append_failed", `could not append to ${this.subject} after ${ANCHORED_RETRY.maxAttempts} attempts: ${(error as Error).message}; is NATS running?`, { retryable: true, cause: error });
    }
  }

  #conflict(cause?: unknown): LogConflictError {
    this.#broken = new LogConflictError(this.subject, this.#lastStreamSeq, cause);
    return this.#broken as LogConflictError;
  }

  async #storedEquals(streamSeq: number, data: Uint8Array): Promise<boolean> {
    const stored = await this.#jsm.streams.getMessage(this.#stream, { seq: streamSeq });
    return stored !== null && Buffer.from(stored.data).equals(Buffer.from(data));
  }
}
