// Shared by the bench modules: statistics, progress lines, process memory, and two passive
// observers of a deployment's bus — the session logs as they are written (`LogWatch`) and the
// requests between services with their reply times (`BusTap`). Both only subscribe: they add a
// subscriber on the subjects they watch and change nothing in what the services do.
import { readFileSync } from "node:fs";
import type { NatsConnection, Subscription } from "@nats-io/nats-core";
import { LlmRpc, rpcSubject, SandboxRpc, ToolsRpc, type Names } from "@tack/bus";
import { timestampMs } from "@tack/log";
import { CallToolRequest, CompleteRequest, CompleteStreamMessage, EnsureSandboxRequest, Event, ExecRequest } from "@tack/proto";

/** Wall-clock milliseconds with sub-millisecond precision, on the same clock the loop stamps log events with. */
export const nowMs = (): number => performance.timeOrigin + performance.now();

/** The `p`th percentile (nearest rank) of `values`, rounded to 0.01; NaN for no values. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return round(sorted[i]!);
}

export const round = (value: number, digits = 2): number => Math.round(value * 10 ** digits) / 10 ** digits;

/** p50 of each named series (series without values are left out). */
export function medians(series: Record<string, number[]>): Record<string, number> {
  return Object.fromEntries(Object.entries(series).filter(([, values]) => values.length > 0).map(([name, values]) => [name, percentile(values, 50)]));
}

/** A progress line on stderr (bench runs print their progress there, the JSON result on stdout). */
export const say = (message: string): void => void process.stderr.write(`bench: ${message}\n`);

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs `fn` over `items` at most `width` at a time; resolves with the results in order. */
export async function pooled<T, R>(items: readonly T[], width: number, fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(width, items.length) }, async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i]!, i);
    }
  }));
  return results;
}

/** Resident memory of a process in MB (VmRSS of /proc/<pid>/status); undefined when it is gone. */
export function rssMb(pid: number): number | undefined {
  try {
    const match = /^VmRSS:\s+(\d+)\s+kB/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return match ? Number(match[1]) / 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** Samples the RSS of named processes every `everyMs` and keeps each one's maximum. */
export class RssSampler {
  readonly max: Record<string, number> = {};
  readonly #timer: NodeJS.Timeout;

  constructor(private readonly pids: () => Record<string, number | undefined>, everyMs = 200) {
    this.sample();
    this.#timer = setInterval(() => this.sample(), everyMs);
  }

  sample(): void {
    for (const [name, pid] of Object.entries(this.pids())) {
      const mb = pid === undefined ? undefined : rssMb(pid);
      if (mb !== undefined) this.max[name] = Math.max(this.max[name] ?? 0, mb);
    }
  }

  /** Stops sampling; returns the maxima in MB, rounded to 0.1. */
  stop(): Record<string, number> {
    clearInterval(this.#timer);
    this.sample();
    return Object.fromEntries(Object.entries(this.max).map(([name, mb]) => [name, round(mb, 1)]));
  }
}

/** A log event as the bench saw it: the event, the loop's time stamp and when it reached the bench (both wall-clock ms). */
export interface Seen {
  readonly event: Event;
  readonly type: string;
  readonly time: number;
  readonly seenAt: number;
}

/**
 * Every event appended to any session log of a deployment, as it is published (a plain
 * subscription on `<ns>.log.>`: JetStream delivers each stored append to it too). Keeps them per
 * session and wakes waiters; `waitFor` is how the bench learns that something was logged without polling.
 */
export class LogWatch {
  readonly #sessions = new Map<string, Seen[]>();
  /** Waiters by session: an event wakes only those of its own session. */
  readonly #waiters = new Map<string, Set<() => void>>();
  readonly #sub: Subscription;

  constructor(nc: NatsConnection, names: Names) {
    const prefix = `${names.namespace}.log.`;
    this.#sub = nc.subscribe(names.logSubjects, {
      callback: (error, msg) => {
        if (error) return;
        const seenAt = nowMs();
        // <ns>.log.<tenant>.<session>
        const session = msg.subject.slice(prefix.length).split(".")[1] ?? "";
        let event: Event;
        try {
          event = Event.decode(msg.data);
        } catch {
          return;
        }
        let list = this.#sessions.get(session);
        if (!list) this.#sessions.set(session, (list = []));
        // A retried append (same seq) is stored once: keep the first sighting (the list is sorted by seq).
        if (list.findLast((s) => s.event.seq <= event.seq)?.event.seq === event.seq) return;
        const seen = { event, type: event.type, time: event.time ? timestampMs(event.time) : seenAt, seenAt };
        // Appends arrive in seq order; keep the list sorted should one ever overtake another.
        let at = list.length;
        while (at > 0 && list[at - 1]!.event.seq > event.seq) at--;
        list.splice(at, 0, seen);
        for (const wake of [...(this.#waiters.get(session) ?? [])]) wake();
      },
    });
  }

  /** The events of a session seen so far, in seq order. */
  events(session: string): Seen[] {
    return [...(this.#sessions.get(session) ?? [])];
  }

  /** The first event of `type` in a session after seq `afterSeq`, if seen. */
  first(session: string, type: string, afterSeq = 0): Seen | undefined {
    return this.events(session).find((s) => s.type === type && s.event.seq > afterSeq);
  }

  /** Resolves with the first value `probe` returns for the session's events; rejects after `timeoutMs`. */
  async waitFor<T>(session: string, probe: (events: Seen[]) => T | undefined, timeoutMs: number): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = probe(this.events(session));
      if (found !== undefined) return found;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`session ${session}: not seen within ${timeoutMs} ms; its log so far: ${this.events(session).map((s) => s.type).join(", ") || "(nothing)"}`);
      await new Promise<void>((resolve) => {
        let waiters = this.#waiters.get(session);
        if (!waiters) this.#waiters.set(session, (waiters = new Set()));
        const wake = () => {
          clearTimeout(timer);
          waiters.delete(wake);
          resolve();
        };
        const timer = setTimeout(wake, Math.min(left, 1_000));
        waiters.add(wake);
      });
    }
  }

  /** Resolves with the session's `turn/end` of `turn` (any reason). */
  turnEnd(session: string, turn: number, timeoutMs: number): Promise<Seen> {
    return this.waitFor(session, (events) => events.find((s) => s.event.payload?.$case === "turnEnd" && s.event.payload.value.turn === turn), timeoutMs);
  }

  close(): void {
    this.#sub.unsubscribe();
  }
}

/** The service requests the bench times. */
export type TapOp = "tools.call" | "sandbox.ensure" | "sandbox.exec" | "llm.complete";

/** One request seen on the bus: when it was published, and when its (final) reply was. */
export interface Tapped {
  readonly op: TapOp;
  readonly session: string;
  readonly start: number;
  end?: number;
}

// Header-only messages on a reply subject that say the handler is alive (packages/bus heartbeats): not a reply.
const ALIVE_HEADER = "tack-alive";
const ERROR_HEADER = "tack-error";

/**
 * Times requests between services: a plain (non-queue) subscription on each request subject
 * receives a copy of every request; the bench then subscribes to that request's reply subject
 * and notes when the final reply passes (for the model's stream: its `done` or `error`). A reply
 * faster than that subscription reaches the server is missed (`end` stays undefined), which only
 * drops a sample from a breakdown.
 */
export class BusTap {
  readonly records: Tapped[] = [];
  readonly #subs: Subscription[] = [];

  constructor(private readonly nc: NatsConnection, names: Names) {
    this.#tap(rpcSubject(names.namespace, ToolsRpc.CallTool), "tools.call", (data) => CallToolRequest.decode(data).sessionId);
    this.#tap(rpcSubject(names.namespace, SandboxRpc.EnsureSandbox), "sandbox.ensure", (data) => EnsureSandboxRequest.decode(data).sessionId);
    this.#tap(rpcSubject(names.namespace, SandboxRpc.Exec), "sandbox.exec", (data) => ExecRequest.decode(data).sessionId);
    this.#tap(rpcSubject(names.namespace, LlmRpc.Complete), "llm.complete", (data) => CompleteRequest.decode(data).sessionId);
  }

  #tap(subject: string, op: TapOp, sessionOf: (data: Uint8Array) => string): void {
    this.#subs.push(this.nc.subscribe(subject, {
      callback: (error, msg) => {
        if (error || !msg.reply) return;
        let session: string;
        try {
          session = sessionOf(msg.data);
        } catch {
          return;
        }
        const record: Tapped = { op, session, start: nowMs() };
        this.records.push(record);
        const reply = this.nc.subscribe(msg.reply, {
          callback: (replyError, answer) => {
            if (replyError || answer.headers?.get(ALIVE_HEADER)) return;
            if (op === "llm.complete" && !answer.headers?.get(ERROR_HEADER)) {
              try {
                const body = CompleteStreamMessage.decode(answer.data).body;
                if (body?.$case !== "done" && body?.$case !== "error") return;
              } catch {
                return;
              }
            }
            record.end = nowMs();
            reply.unsubscribe();
          },
        });
        // A request that is never answered must not keep its subscription forever.
        setTimeout(() => reply.unsubscribe(), 120_000).unref();
      },
    }));
  }

  /** The requests of one kind for a session, in the order they were published. */
  of(session: string, op: TapOp): Tapped[] {
    return this.records.filter((r) => r.session === session && r.op === op);
  }

  close(): void {
    for (const sub of this.#subs) sub.unsubscribe();
  }
}

/** Durations of the parts of one step, from its log events and the tapped requests (ms). */
export interface StepParts {
  /** step/start → the model request on the bus: request header, tool list, compaction check, budget check. */
  before_model?: number;
  /** The model request → assistant/message logged: the (scripted) model's reply streamed over the bus, chunks and message appended. */
  model?: number;
  /** assistant/message → tool/call logged: usage appended, the call planned. */
  assistant_to_tool_call?: number;
  /** tool/call logged → the tools service has the request. */
  tool_dispatch?: number;
  /** sandbox.ensure round trip (the session's container: a warm-pool claim or a cold start on the first call). */
  sandbox_ensure?: number;
  /** sandbox.exec round trip (the command in the container). */
  sandbox_exec?: number;
  /** tool/call → tool/result logged, whole. */
  tool_call?: number;
  /** The rest of the tool call: tools service work, the reply, the result appended (spill check included). */
  tool_other?: number;
}

/**
 * Splits the step that starts at `stepStart` into its parts (see `StepParts`), using the first
 * tool call of that step. Parts whose markers were not seen are left out.
 */
export function stepParts(events: Seen[], tap: BusTap | undefined, session: string, stepStart: Seen): StepParts {
  const after = (type: string, seq: number) => events.find((s) => s.type === type && s.event.seq > seq);
  const assistant = after("assistant/message", stepStart.event.seq);
  const call = assistant && after("tool/call", assistant.event.seq);
  const result = call && after("tool/result", call.event.seq);
  const parts: StepParts = {};
  const within = (r: Tapped, from: number, to: number | undefined) => r.start >= from - 1 && (to === undefined || r.start <= to + 1);
  const llm = tap?.of(session, "llm.complete").find((r) => within(r, stepStart.time, assistant?.time));
  if (llm) parts.before_model = llm.start - stepStart.time;
  if (llm && assistant) parts.model = assistant.time - llm.start;
  if (assistant && call) parts.assistant_to_tool_call = call.time - assistant.time;
  if (call && result) {
    parts.tool_call = result.time - call.time;
    const toolsCall = tap?.of(session, "tools.call").find((r) => within(r, call.time, result.time));
    const ensure = tap?.of(session, "sandbox.ensure").find((r) => within(r, call.time, result.time) && r.end !== undefined);
    const exec = tap?.of(session, "sandbox.exec").find((r) => within(r, call.time, result.time) && r.end !== undefined);
    if (toolsCall) parts.tool_dispatch = toolsCall.start - call.time;
    if (ensure) parts.sandbox_ensure = ensure.end! - ensure.start;
    if (exec) parts.sandbox_exec = exec.end! - exec.start;
    if (toolsCall && ensure && exec) parts.tool_other = parts.tool_call - parts.tool_dispatch! - parts.sandbox_ensure! - parts.sandbox_exec!;
  }
  return parts;
}

/** Collects `StepParts` of many steps into one series per part. */
export function collectParts(all: StepParts[]): Record<string, number[]> {
  const series: Record<string, number[]> = {};
  for (const parts of all) for (const [name, value] of Object.entries(parts)) (series[name] ??= []).push(value as number);
  return series;
}
