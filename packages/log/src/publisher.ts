// JetStream publishing with one shared reply subscription per connection: the hot path of the log writer.
import { createInbox, headers as newHeaders, type MsgHdrs, type NatsConnection, type Subscription } from "@nats-io/nats-core";
import { injectTrace } from "@tack/bus";

/** What JetStream answered for a stored (or deduplicated) message. */
export interface StoredAck {
  readonly seq: number;
  readonly duplicate: boolean;
}

/** JetStream refused the message; `code` is its API error code (e.g. 10070 wrong last Msg-Id, 10071 wrong last sequence). */
export class PublishRefused extends Error {
  readonly code: number;
  constructor(code: number, description: string) {
    super(description);
    this.name = "PublishRefused";
    this.code = code;
  }
}

/** No answer in time, or no stream listening (NATS restarting): safe to send again with the same Msg-Id. */
export class PublishUnanswered extends Error {
  constructor(subject: string, why: string) {
    super(`no acknowledgement for ${subject}: ${why}`);
    this.name = "PublishUnanswered";
  }
}

/** Expectations JetStream checks before it stores a message. */
export type Expectation = { readonly lastSubjectSequence: number } | { readonly lastMsgId: string };

interface Pending {
  readonly resolve: (ack: StoredAck) => void;
  readonly reject: (error: Error) => void;
  readonly deadline: number;
  readonly subject: string;
}

const TIMEOUT_MS = 5_000;
const decoder = new TextDecoder();

/**
 * Publishes to JetStream with a reply subject under one wildcard subscription of the
 * connection (`<inbox>.<n>`), instead of a request (and its timer) per message: appends
 * pipeline cheaply. One per connection; a sweep fails publishes unanswered after 5 s.
 */
export class AckPublisher {
  readonly #nc: NatsConnection;
  readonly #inbox: string;
  readonly #pending = new Map<string, Pending>();
  #sub: Subscription | undefined;
  #sweeper: NodeJS.Timeout | undefined;
  #next = 0;

  private constructor(nc: NatsConnection) {
    this.#nc = nc;
    // Under the connection's own inbox prefix: a NATS user may subscribe only to its own inboxes.
    const prefix = (nc as { options?: { inboxPrefix?: string } }).options?.inboxPrefix || "_INBOX";
    this.#inbox = createInbox(prefix);
  }

  static #byConnection = new WeakMap<NatsConnection, AckPublisher>();

  /** The publisher of `nc` (made at first use). */
  static of(nc: NatsConnection): AckPublisher {
    let publisher = AckPublisher.#byConnection.get(nc);
    if (!publisher) {
      publisher = new AckPublisher(nc);
      AckPublisher.#byConnection.set(nc, publisher);
    }
    return publisher;
  }

  /** Publishes `data` to `subject` with Msg-Id `msgId` under `expect`; resolves with JetStream's ack. */
  publish(subject: string, data: Uint8Array, msgId: string, expect: Expectation): Promise<StoredAck> {
    this.#start();
    const h: MsgHdrs = newHeaders();
    injectTrace(h);
    h.set("Nats-Msg-Id", msgId);
    if ("lastMsgId" in expect) h.set("Nats-Expected-Last-Msg-Id", expect.lastMsgId);
    else h.set("Nats-Expected-Last-Subject-Sequence", String(expect.lastSubjectSequence));
    const token = String(this.#next++);
    return new Promise<StoredAck>((resolve, reject) => {
      this.#pending.set(token, { resolve, reject, deadline: Date.now() + TIMEOUT_MS, subject });
      try {
        this.#nc.publish(subject, data, { reply: `${this.#inbox}.${token}`, headers: h });
      } catch (error) {
        this.#pending.delete(token);
        reject(new PublishUnanswered(subject, (error as Error).message));
      }
    });
  }

  #start(): void {
    if (this.#sub) return;
    this.#sub = this.#nc.subscribe(`${this.#inbox}.*`, {
      callback: (error, msg) => {
        if (error) return;
        const token = msg.subject.slice(this.#inbox.length + 1);
        const pending = this.#pending.get(token);
        if (!pending) return;
        this.#pending.delete(token);
        if (msg.headers?.code === 503) return pending.reject(new PublishUnanswered(pending.subject, "no stream answers (is NATS restarting?)"));
        try {
          const body = JSON.parse(decoder.decode(msg.data)) as { seq?: number; duplicate?: boolean; error?: { err_code?: number; code?: number; description?: string } };
          if (body.error) return pending.reject(new PublishRefused(body.error.err_code ?? body.error.code ?? 0, body.error.description ?? "refused"));
          pending.resolve({ seq: Number(body.seq), duplicate: body.duplicate === true });
        } catch (parse) {
          pending.reject(new PublishUnanswered(pending.subject, `unreadable acknowledgement (${(parse as Error).message})`));
        }
      },
    });
    this.#sweeper = setInterval(() => {
      const now = Date.now();
      for (const [token, pending] of this.#pending) {
        if (pending.deadline > now) continue;
        this.#pending.delete(token);
        pending.reject(new PublishUnanswered(pending.subject, `none within ${TIMEOUT_MS} ms`));
      }
    }, 250);
    this.#sweeper.unref();
    void this.#nc.closed().then(() => {
      clearInterval(this.#sweeper);
      for (const pending of this.#pending.values()) pending.reject(new PublishUnanswered(pending.subject, "the connection closed"));
      this.#pending.clear();
    });
  }
}
