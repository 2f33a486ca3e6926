// Live views of session logs: one JetStream consumer per session that this gateway process is
// asked about, kept while it is used. It folds the log into what `GET /v1/sessions/:id` answers
// (state, usage, last seq) and fans every new event out to all the session's event streams, so
// neither a GET nor a follower costs a consumer of its own (docs/decisions/0019-session-feeds.md).
import { DeliverPolicy, jetstream, JetStreamApiError, type ConsumerMessages, type JetStreamManager } from "@nats-io/jetstream";
import type { Bus } from "@tack/bus";
import { checkEvent, readSession, SessionState } from "@tack/log";
import { Event, type gatewayV1 } from "@tack/proto";
import { sessionStateMessage, type SessionStateMessage } from "./session-state.js";
import type { SessionRow } from "./store.js";
import { UsageFold } from "./usage.js";

/** What the view of one session says, as of the moment it was asked. */
export interface SessionView {
  readonly state: SessionStateMessage;
  readonly usage: gatewayV1.SessionUsage;
  /** The seq of the last event in the log (0 for an empty log). */
  readonly lastSeq: number;
}

/** Sizes and times of the feeds; the defaults suit a gateway process serving a team. */
export interface FeedOptions {
  /** Events each feed keeps for followers that start a little behind (default 512)… */
  readonly recentEvents?: number;
  /** …and at most this many bytes of them (default 4 MiB). */
  readonly recentBytes?: number;
  /** Events a follower may have queued before it is moved back to reading the log itself (default 4,096). */
  readonly followerQueue?: number;
  /** A feed nobody asked about or follows for this long is closed (default 60 s). */
  readonly idleMs?: number;
  /** Feeds kept at most; past this, the least recently used idle one is closed (default 2,000). */
  readonly maxFeeds?: number;
  /** How long a view waits for its feed to reach the log's end before reading the log itself (default 5 s). */
  readonly catchUpMs?: number;
}

interface Follower {
  /** Called with each batch of new events, in order (the same array for every follower); false: drop this follower. */
  push(batch: readonly Event[]): boolean;
  fail(error: unknown): void;
}

/**
 * Where a stream's events go (an HTTP response, a gRPC call, a queue): `write` takes a batch and
 * says whether more may be written now; after false, the stream waits for `drained` and keeps
 * what arrives meanwhile (or reads it from the log again later).
 */
export interface EventSink {
  write(batch: readonly Event[]): boolean;
  drained(): Promise<void>;
}

const NO_MESSAGE = 10037;

/** A feed that stopped or fell behind: the answer is read from the log itself instead. */
class FeedUnavailable extends Error {}

/** One session's feed: an ordered consumer from the log's first event, its folds, its recent events and its followers. */
class SessionFeed {
  readonly #state = new SessionState();
  readonly #usage = new UsageFold();
  readonly #recent: { event: Event; bytes: number }[] = [];
  #recentBytes = 0;
  readonly followers = new Set<Follower>();
  /** Events applied since the last hand-over to the followers (one batch per burst of messages). */
  #outgoing: Event[] = [];
  #handOver = false;
  /** Stream sequence of the last message applied, and the session seq of the last event. */
  streamSeq = 0;
  lastSeq = 0;
  lastUsed = Date.now();
  #view: SessionView | undefined;
  /** Whether older events were let go: until then the feed keeps every event of the log. */
  trimmed = false;
  #failure: unknown;
  #closed = false;
  #messages: ConsumerMessages | undefined;
  readonly #waiters = new Set<{ target: number; resolve(): void; reject(error: unknown): void }>();
  readonly started: Promise<void>;

  constructor(readonly bus: Bus, readonly subject: string, readonly options: Required<FeedOptions>, onEnd: () => void) {
    this.started = this.#start(onEnd);
    // A failure to start is reported to whoever waits on the feed.
    this.started.catch(() => undefined);
  }

  async #start(onEnd: () => void): Promise<void> {
    try {
      const consumer = await jetstream(this.bus.nc).consumers.get(this.bus.names.logStream, { filter_subjects: this.subject, deliver_policy: DeliverPolicy.All });
      if (this.#closed) return;
      this.#messages = await consumer.consume({ callback: (m) => this.#apply(m.seq, m.data) });
      if (this.#closed) void this.#messages.close();
      void this.#messages.closed().then((error) => this.#end(error ?? new FeedUnavailable("the session's log consumer stopped")), (error: unknown) => this.#end(error)).finally(onEnd);
    } catch (error) {
      this.#end(error);
      onEnd();
      throw error;
    }
  }

  #apply(streamSeq: number, data: Uint8Array): void {
    if (this.#failure !== undefined) return;
    let event: Event;
    try {
      event = Event.decode(data);
      if (!checkEvent(event)) {
        this.streamSeq = streamSeq;
        this.#settle();
        return;
      }
    } catch (error) {
      // A log this gateway cannot read (unknown event type, newer format): every view and follower hears why.
      this.#end(error);
      void this.#messages?.close();
      return;
    }
    this.#state.apply(event);
    this.#usage.apply(event);
    this.#view = undefined;
    this.lastSeq = event.seq;
    this.streamSeq = streamSeq;
    const bytes = data.length;
    this.#recent.push({ event, bytes });
    this.#recentBytes += bytes;
    while (this.#recent.length > 1 && (this.#recent.length > this.options.recentEvents || this.#recentBytes > this.options.recentBytes)) {
      this.#recentBytes -= this.#recent.shift()!.bytes;
      this.trimmed = true;
    }
    if (this.followers.size > 0) {
      this.#outgoing.push(event);
      if (!this.#handOver) {
        this.#handOver = true;
        // The consumer's callback runs once per message of a read, synchronously: the followers get
        // what one read brought as one batch, after it (no timer, no added wait).
        queueMicrotask(() => this.#deliver());
      }
    }
    this.#settle();
  }

  /** Hands the events applied since the last hand-over to every follower, as one shared batch. */
  #deliver(): void {
    this.#handOver = false;
    if (this.#outgoing.length === 0) return;
    const batch = this.#outgoing;
    this.#outgoing = [];
    if (this.followers.size > 0) this.lastUsed = Date.now();
    for (const follower of this.followers) {
      if (!follower.push(batch)) this.followers.delete(follower);
    }
  }

  #settle(): void {
    for (const waiter of this.#waiters) {
      if (this.streamSeq >= waiter.target) {
        this.#waiters.delete(waiter);
        waiter.resolve();
      }
    }
  }

  #end(error: unknown): void {
    if (this.#failure !== undefined) return;
    this.#failure = error;
    for (const waiter of this.#waiters) waiter.reject(error);
    this.#waiters.clear();
    // What was applied before the failure still reaches the followers, then the failure.
    this.#deliver();
    for (const follower of this.followers) follower.fail(error);
    this.followers.clear();
  }

  get failed(): boolean {
    return this.#failure !== undefined;
  }

  /** Resolves once the message at stream sequence `target` (or a later one) was applied; rejects after `timeoutMs`. */
  reach(target: number, timeoutMs: number): Promise<void> {
    if (this.#failure !== undefined) return Promise.reject(this.#failure);
    if (this.streamSeq >= target) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#waiters.delete(waiter);
        reject(new FeedUnavailable(`the session's feed did not reach stream sequence ${target} in ${timeoutMs} ms`));
      }, timeoutMs);
      const waiter = {
        target,
        resolve: () => { clearTimeout(timer); resolve(); },
        reject: (error: unknown) => { clearTimeout(timer); reject(error); },
      };
      this.#waiters.add(waiter);
    });
  }

  #asking: Promise<number> | undefined;
  #queued: Promise<number> | undefined;

  /**
   * The stream sequence of the log's last stored message, asked with `ask`, for a caller that needs
   * everything stored before it called. Callers share questions: a question already sent may have
   * been answered before this call's events were stored, so a caller joins the next one to be sent
   * (sent once the one in flight is answered); one question per round trip however many views.
   */
  lastStored(ask: () => Promise<number>): Promise<number> {
    if (this.#queued) return this.#queued;
    if (!this.#asking) return this.#send(ask);
    const queued: Promise<number> = this.#asking.then(() => undefined, () => undefined).then(() => {
      if (this.#queued === queued) this.#queued = undefined;
      return this.#send(ask);
    });
    this.#queued = queued;
    return queued;
  }

  #send(ask: () => Promise<number>): Promise<number> {
    const asking = ask();
    this.#asking = asking;
    const done = () => {
      if (this.#asking === asking) this.#asking = undefined;
    };
    asking.then(done, done);
    return asking;
  }

  /** The same object until an event is applied (callers may key what they derive from it by identity). */
  view(): SessionView {
    return this.#view ??= { state: sessionStateMessage(this.#state), usage: this.#usage.snapshot(), lastSeq: this.lastSeq };
  }

  /** The seq of the oldest event still kept for followers (the next one when none is kept). */
  get firstKept(): number {
    return this.#recent[0]?.event.seq ?? this.lastSeq + 1;
  }

  /** The kept events from `seq` on. */
  keptFrom(seq: number): Event[] {
    return this.#recent.filter((r) => r.event.seq >= seq).map((r) => r.event);
  }

  /** Rejects later calls with `error` and stops the consumer. */
  close(error: unknown): void {
    this.#closed = true;
    this.#end(error);
    void this.#messages?.close();
  }
}

/**
 * The gateway process's feeds, one per session in use. `view` answers with the log's state as of
 * the request (it checks the log's last message first, so an event stored before the request is
 * always in the answer); `follow` streams a session's events from any seq without a consumer per
 * follower.
 */
export class SessionFeeds {
  readonly #bus: Bus;
  readonly #jsm: JetStreamManager;
  readonly #options: Required<FeedOptions>;
  readonly #feeds = new Map<string, SessionFeed>();
  readonly #sweep: NodeJS.Timeout;
  #direct = true;

  constructor(bus: Bus, jsm: JetStreamManager, options: FeedOptions = {}) {
    this.#bus = bus;
    this.#jsm = jsm;
    this.#options = {
      recentEvents: options.recentEvents ?? 512, recentBytes: options.recentBytes ?? 4 * 1024 * 1024, followerQueue: options.followerQueue ?? 4096,
      idleMs: options.idleMs ?? 60_000, maxFeeds: options.maxFeeds ?? 2000, catchUpMs: options.catchUpMs ?? 5000,
    };
    this.#sweep = setInterval(() => this.#closeIdle(Date.now() - this.#options.idleMs), Math.min(10_000, this.#options.idleMs)).unref();
  }

  /** Feeds open now (for tests and stats). */
  get size(): number {
    return this.#feeds.size;
  }

  /** The session's state, usage and last seq, including every event stored before this call. */
  async view(row: SessionRow): Promise<SessionView> {
    const feed = await this.#caughtUp(row);
    // A feed that fell behind or broke was replaced; this answer is read from the log itself.
    return feed ? feed.view() : this.#readView(row);
  }

  /**
   * The session's feed once it has applied every message stored before this call (it asks the
   * log's last stored message first); undefined when the feed stopped or fell behind, which is
   * then dropped: the caller reads the log itself.
   */
  async #caughtUp(row: SessionRow): Promise<SessionFeed | undefined> {
    const subject = this.#bus.names.logSubject(row.tenant, row.id);
    const feed = this.#feed(subject);
    const [last] = await Promise.all([feed.lastStored(() => this.#lastStreamSeq(subject)), feed.started]);
    try {
      await feed.reach(last, this.#options.catchUpMs);
      return feed;
    } catch (error) {
      if (this.#feeds.get(subject) === feed) this.#drop(subject, feed, error);
      if (!(error instanceof FeedUnavailable)) throw error;
      return undefined;
    }
  }

  /**
   * The session's events from `fromSeq` to the end of the log as stored before this call, when its
   * feed keeps all of them (the last 512 events, at most 4 MiB); undefined when it does not (or
   * stopped): read them from the log then. Checked like a view, so nothing stored before is missed.
   */
  async history(row: SessionRow, fromSeq: number): Promise<readonly Event[] | undefined> {
    const feed = await this.#caughtUp(row);
    if (!feed || (fromSeq < feed.firstKept && feed.trimmed)) return undefined;
    return feed.keptFrom(fromSeq);
  }

  /**
   * Writes the session's events from `fromSeq` on to `out`, following the log until `signal`
   * aborts (resolves then) or the feed fails (rejects). Events the feed no longer keeps are read
   * from the log first. Live events are written as the feed hands them over, in the batch every
   * follower shares, without a queue or a wake-up per follower; while `out` is not drained they
   * wait in a backlog, and a follower whose backlog reaches `followerQueue` events goes back to
   * reading the log itself until it has caught up, so nothing is lost or repeated.
   */
  async stream(row: SessionRow, fromSeq: number, signal: AbortSignal, out: EventSink): Promise<void> {
    const subject = this.#bus.names.logSubject(row.tenant, row.id);
    const address = { tenant: row.tenant, sessionId: row.id };
    /** The seq of the next event `out` is to get. */
    let next = fromSeq;
    let feed = this.#feed(subject);
    let attached = false;
    /** `out` said it cannot take more: live events wait in `backlog` until it drained. */
    let paused = false;
    let backlog: Event[] = [];
    let failure: unknown;
    let wake: (() => void) | undefined;
    /** Writes the events of `batch` from `next` on; false when `out` cannot take more. */
    const write = (batch: readonly Event[]): boolean => {
      const fresh = batch.length > 0 && batch[0]!.seq >= next ? batch : batch.filter((event) => event.seq >= next);
      if (fresh.length === 0) return true;
      next = fresh.at(-1)!.seq + 1;
      return out.write(fresh);
    };
    const follower: Follower = {
      push: (batch) => {
        if (paused) {
          for (const event of batch) if (event.seq >= next) backlog.push(event);
          if (backlog.length < this.#options.followerQueue) return true;
          // Too far behind: drop the backlog and read the log from `next` once drained.
          attached = false;
          backlog = [];
          wake?.();
          return false;
        }
        if (!write(batch)) {
          paused = true;
          wake?.();
        }
        return true;
      },
      fail: (error) => {
        failure = error;
        attached = false;
        wake?.();
      },
    };
    const onAbort = () => wake?.();
    signal.addEventListener("abort", onAbort);
    try {
      while (!signal.aborted) {
        if (paused) {
          // Until `out` drained; a failure or the end wakes this earlier.
          let isDrained = false;
          const drained = out.drained().then(() => { isDrained = true; });
          while (!isDrained && !signal.aborted && failure === undefined) {
            await Promise.race([drained, new Promise<void>((resolve) => { wake = resolve; })]);
            wake = undefined;
          }
          if (failure !== undefined) throw failure;
          if (!isDrained) break;
          paused = false;
          const waiting = backlog;
          backlog = [];
          // Detached meanwhile (too far behind): the log is read from `next` below instead.
          if (attached && !write(waiting)) paused = true;
          continue;
        }
        if (!attached) {
          if (failure !== undefined) throw failure;
          if (feed.failed || this.#feeds.get(subject) !== feed) feed = this.#feed(subject);
          await feed.started;
          // Read from the log what the feed no longer keeps (and, after falling behind, what was dropped).
          while (next < feed.firstKept && !signal.aborted) {
            const before = next;
            for await (const event of readSession(this.#bus.nc, this.#bus.names, address, { fromSeq: next, signal })) {
              if (event.seq < next) continue;
              if (!write([event])) await out.drained();
              if (next >= feed.firstKept || signal.aborted) break;
            }
            // The log holds nothing more than what was read (its start was removed): go on from what the feed keeps.
            if (next === before) break;
          }
          if (signal.aborted) break;
          if (feed.failed) continue;
          // From here on the feed hands over every event: what it keeps from `next`, then each new batch.
          feed.followers.add(follower);
          attached = true;
          feed.lastUsed = Date.now();
          if (!write(feed.keptFrom(next))) paused = true;
          continue;
        }
        await new Promise<void>((resolve) => { wake = resolve; });
        wake = undefined;
      }
    } finally {
      signal.removeEventListener("abort", onAbort);
      feed.followers.delete(follower);
      feed.lastUsed = Date.now();
    }
  }

  /**
   * `stream` as batches to iterate (gRPC server streaming, tests): the session's events from
   * `fromSeq` on, following the log until `signal` aborts.
   */
  async *follow(row: SessionRow, fromSeq: number, signal: AbortSignal): AsyncGenerator<readonly Event[]> {
    const queue: (readonly Event[])[] = [];
    let wake: (() => void) | undefined;
    let drained: (() => void) | undefined;
    let ended = false;
    let failure: unknown;
    const stop = new AbortController();
    const sink: EventSink = {
      write: (batch) => {
        queue.push(batch);
        wake?.();
        // Taken at once when the reader waits; else the stream keeps the rest until it has read.
        return queue.length === 1;
      },
      drained: () => (queue.length === 0 ? Promise.resolve() : new Promise<void>((resolve) => { drained = resolve; })),
    };
    const streaming = this.stream(row, fromSeq, AbortSignal.any([signal, stop.signal]), sink).then(
      () => { ended = true; wake?.(); },
      (error: unknown) => { failure = error; ended = true; wake?.(); },
    );
    try {
      for (;;) {
        if (queue.length > 0) {
          const batch = queue.shift()!;
          if (queue.length === 0) {
            drained?.();
            drained = undefined;
          }
          yield batch;
          continue;
        }
        if (ended) {
          if (failure !== undefined) throw failure;
          return;
        }
        await new Promise<void>((resolve) => { wake = resolve; });
        wake = undefined;
      }
    } finally {
      stop.abort();
      drained?.();
      await streaming;
    }
  }

  /** Closes the session's feed (its log was deleted); its followers end with `reason`. */
  forget(row: SessionRow, reason: Error): void {
    const subject = this.#bus.names.logSubject(row.tenant, row.id);
    const feed = this.#feeds.get(subject);
    if (feed) this.#drop(subject, feed, reason);
  }

  /** Closes every feed. */
  close(): void {
    clearInterval(this.#sweep);
    for (const [subject, feed] of this.#feeds) this.#drop(subject, feed, new Error("the gateway is stopping"));
  }

  #feed(subject: string): SessionFeed {
    let feed = this.#feeds.get(subject);
    if (feed && !feed.failed) {
      feed.lastUsed = Date.now();
      // Least recently used last: the map's order is the eviction order.
      this.#feeds.delete(subject);
      this.#feeds.set(subject, feed);
      return feed;
    }
    if (this.#feeds.size >= this.#options.maxFeeds) this.#closeIdle(Infinity, 1);
    const created: SessionFeed = new SessionFeed(this.#bus, subject, this.#options, () => {
      if (this.#feeds.get(subject) === created) this.#feeds.delete(subject);
    });
    feed = created;
    this.#feeds.set(subject, feed);
    return feed;
  }

  #drop(subject: string, feed: SessionFeed, reason: unknown): void {
    if (this.#feeds.get(subject) === feed) this.#feeds.delete(subject);
    feed.close(reason);
  }

  /** Closes feeds without followers last used before `before` (at most `limit`, least recently used first). */
  #closeIdle(before: number, limit = Infinity): void {
    let closed = 0;
    for (const [subject, feed] of this.#feeds) {
      if (closed >= limit) break;
      if (feed.followers.size === 0 && feed.lastUsed < before) {
        this.#drop(subject, feed, new Error("the session's feed was idle"));
        closed += 1;
      }
    }
  }

  /** The stream sequence of the session's last stored message (0: none). */
  async #lastStreamSeq(subject: string): Promise<number> {
    const query = { last_by_subj: subject };
    if (this.#direct) {
      try {
        const message = await this.#jsm.direct.getMessage(this.#bus.names.logStream, query);
        return message?.seq ?? 0;
      } catch (error) {
        if (error instanceof JetStreamApiError && error.code === NO_MESSAGE) return 0;
        // A stream made without allow_direct: ask the stream leader instead, from now on.
        if (!/no responders|503/i.test(String((error as Error).message))) throw error;
        this.#direct = false;
      }
    }
    const message = await this.#jsm.streams.getMessage(this.#bus.names.logStream, query).catch((error: unknown) => {
      if (error instanceof JetStreamApiError && error.code === NO_MESSAGE) return null;
      throw error;
    });
    return message?.seq ?? 0;
  }

  /** The view read from the whole log (when the feed could not give it). */
  async #readView(row: SessionRow): Promise<SessionView> {
    const state = new SessionState();
    const usage = new UsageFold();
    let lastSeq = 0;
    for await (const event of readSession(this.#bus.nc, this.#bus.names, { tenant: row.tenant, sessionId: row.id })) {
      state.apply(event);
      usage.apply(event);
      lastSeq = event.seq;
    }
    return { state: sessionStateMessage(state), usage: usage.snapshot(), lastSeq };
  }
}
