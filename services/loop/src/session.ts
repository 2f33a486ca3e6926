import { readFileSync } from "node:fs";
import { context } from "@opentelemetry/api";
import { inSpan, requestStream, TackError, type Bus } from "@tack/bus";
import {
  deriveRequest, draft, Projection, readAll, serializeRequest, SessionLogWriter, type Draft, type ModelRequest,
} from "@tack/log";
import {
  CallToolRequest, CallToolResponse, CompleteRequest, CompleteStreamMessage, Delta, ListToolsRequest, ListToolsResponse, Surface_Kind,
  type CompleteDone, type Event, type RequestHeader, type SessionCreated, type ToolCall, type ToolSpec,
} from "@tack/proto";
import type { Logger } from "@tack/telemetry";
import type { Lease, Leases } from "./lease.js";

/** Settings of the turn loop, validated once by the service. */
export interface LoopSettings {
  /** Steps after which a turn stops with reason `step_limit`. */
  readonly stepLimit: number;
  /** Tool calls of one step that run at once. */
  readonly parallelToolCalls: number;
  /** Longest wait for a tool result (the bash tool itself allows up to 600 s). */
  readonly toolTimeoutMs: number;
  /** Longest silence in a model reply stream. */
  readonly llmIdleTimeoutMs: number;
  readonly temperature: number;
  readonly maxTokens: number;
  /** Deltas packed into one `assistant/chunks` event at most. */
  readonly chunkPack: number;
}

/** What a running session needs from its service. */
export interface SessionDeps {
  readonly bus: Bus;
  readonly leases: Leases;
  readonly settings: LoopSettings;
  readonly log: Logger;
  /** Called when the session ends its work or loses its lease, so the service can forget it. */
  readonly onIdle: (runtime: SessionRuntime) => void;
}

const SOURCE = "loop";
const SYSTEM_PROMPTS: Record<string, string> = {
  standard: readFileSync(new URL("./prompts/standard.md", import.meta.url), "utf8").trim(),
};

/** Modes a session can be created with. */
export const MODES = Object.keys(SYSTEM_PROMPTS);

/** Wording the model sees for calls interrupted by a crash (REFERENCE §1). */
export const RECOVERY_TEXT = {
  mayHaveRun: "Interrupted: the harness restarted while this tool call was running, so it may or may not have run. Check its effects (for example, read the files it would have changed) before running it again.",
  notStarted: "Not executed: the harness restarted before this tool call started. Retry it if it is still needed.",
} as const;

/** One session owned by this loop process: its log mirror, projection, writer and lease. */
export class SessionRuntime {
  readonly tenant: string;
  readonly sessionId: string;
  /** Every event of the log, in seq order (the mirror the fresh derivation is computed from). */
  readonly events: Event[] = [];
  /** Incrementally kept model view; verified against a fresh derivation before every model call. */
  readonly projection = new Projection();
  readonly lease: Lease;
  readonly #deps: SessionDeps;
  readonly #writer: SessionLogWriter;
  #tools: ToolSpec[] | undefined;
  #resumed = false;
  #running: Promise<void> | undefined;
  #renewTimer: NodeJS.Timeout | undefined;
  #lost = false;

  private constructor(deps: SessionDeps, tenant: string, sessionId: string, writer: SessionLogWriter, lease: Lease) {
    this.#deps = deps;
    this.tenant = tenant;
    this.sessionId = sessionId;
    this.#writer = writer;
    this.lease = lease;
    writer.onAppend = (event) => {
      this.events.push(event);
      this.projection.apply(event);
    };
  }

  /** Loads a session whose lease we hold: reads its whole log and opens the single writer. */
  static async load(deps: SessionDeps, tenant: string, sessionId: string, lease: Lease): Promise<SessionRuntime> {
    const events = await readAll(deps.bus.nc, deps.bus.names, { tenant, sessionId });
    const writer = await SessionLogWriter.open(deps.bus.nc, deps.bus.names, { tenant, sessionId });
    const runtime = new SessionRuntime(deps, tenant, sessionId, writer, lease);
    for (const e of events) {
      runtime.events.push(e);
      runtime.projection.apply(e);
    }
    if (writer.lastSeq !== (events.at(-1)?.seq ?? 0)) {
      throw new TackError("loop.log_unreadable", `session ${sessionId}: read ${events.length} events but the log ends at seq ${writer.lastSeq}`);
    }
    runtime.#startRenewing();
    return runtime;
  }

  /** The session/created payload (undefined for an empty log). */
  get meta(): SessionCreated | undefined {
    const first = this.events[0]?.payload;
    return first?.$case === "sessionCreated" ? first.value : undefined;
  }

  /** True while a turn runs. */
  get busy(): boolean {
    return this.#running !== undefined;
  }

  /** Resolves when the running turn (if any) is over. */
  async settled(): Promise<void> {
    await this.#running;
  }

  /** Appends events through the single writer. */
  append(...drafts: Draft[]): Promise<Event[]> {
    return this.#writer.append(...drafts);
  }

  #startRenewing(): void {
    const every = Math.max(100, Math.floor(this.#deps.leases.ttlMs / 3));
    this.#renewTimer = setInterval(() => {
      this.#deps.leases.renew(this.lease).catch((error: unknown) => {
        this.#deps.log.warn("lease lost", { session: this.sessionId, error: (error as Error).message });
        this.#lost = true;
        this.dispose();
        this.#deps.onIdle(this);
      });
    }, every);
    this.#renewTimer.unref();
  }

  /** Stops renewing the lease (the lease then expires unless released). */
  dispose(): void {
    clearInterval(this.#renewTimer);
  }

  /** Writes the opening events of a new session. */
  async create(meta: SessionCreated, sandboxMode: string, approvalPolicy: string): Promise<void> {
    if (this.events.length > 0) {
      throw new TackError("loop.session_exists", `session ${this.sessionId} already exists; choose another id or leave it empty`);
    }
    await this.append(
      draft("sessionCreated", meta, SOURCE),
      draft("permissionPreset", { preset: "default" }, SOURCE),
      draft("sandboxMode", { mode: sandboxMode }, SOURCE),
      draft("approvalPolicy", { policy: approvalPolicy }, SOURCE),
    );
  }

  /** Logs a user message and starts its turn in the background. */
  async submit(text: string): Promise<{ seq: number; turn: number }> {
    if (!this.meta) throw new TackError("loop.unknown_session", `session ${this.sessionId} does not exist; create it first`);
    if (this.#running) throw new TackError("loop.busy", `session ${this.sessionId} is running a turn; wait for its turn/end before sending another message`, { retryable: true });
    const [event] = await this.append(draft("userMessage", { text }, "gateway", { kind: Surface_Kind.KIND_APPEND, replaceFromSeq: 0, replaceToSeq: 0, sourceSeqs: [], origin: "user" }));
    const turn = this.#turnCount() + 1;
    this.#run(() => this.#turn(turn, event!.seq, 1));
    return { seq: event!.seq, turn };
  }

  #turnCount(): number {
    return this.events.filter((e) => e.payload?.$case === "turnStart").length;
  }

  #run(body: () => Promise<void>): void {
    const parent = context.active();
    this.#running = context.with(parent, body)
      .catch((error: unknown) => this.#deps.log.error("turn failed", { session: this.sessionId, error: (error as Error).message }))
      .finally(() => {
        this.#running = undefined;
        this.#deps.onIdle(this);
      });
  }

  /**
   * Crash recovery after taking the session over: gives every tool call of the interrupted
   * step a result (may-or-may-not-have-run vs not-started), then continues the turn.
   * Returns false when nothing was left unfinished.
   */
  async recover(previousOwner: string | undefined): Promise<boolean> {
    this.#resumed = previousOwner !== undefined;
    const turnStarts = this.events.filter((e) => e.payload?.$case === "turnStart");
    const lastStart = turnStarts.at(-1);
    const lastUser = [...this.events].reverse().find((e) => e.payload?.$case === "userMessage");
    const started = lastStart?.payload?.$case === "turnStart" ? lastStart.payload.value : undefined;
    const ended = started && this.events.some((e) => e.seq > lastStart!.seq && e.payload?.$case === "turnEnd");
    if (lastUser && (!started || lastUser.seq > started.userMessageSeq) && (ended || !started)) {
      // The user message was logged but its turn never started.
      const turn = this.#turnCount() + 1;
      this.#run(() => this.#turn(turn, lastUser.seq, 1));
      return true;
    }
    if (!started || ended) return false;
    const turn = started.turn;
    const inTurn = this.events.filter((e) => e.seq > lastStart!.seq);
    const steps = inTurn.filter((e) => e.payload?.$case === "stepStart").length;
    const lastAssistant = [...inTurn].reverse().find((e) => e.payload?.$case === "assistantMessage");
    const assistant = lastAssistant?.payload?.$case === "assistantMessage" ? lastAssistant.payload.value : undefined;
    const results = new Set(inTurn.flatMap((e) => (e.payload?.$case === "toolResult" ? [e.payload.value.callId] : [])));
    const dispatched = new Set(inTurn.flatMap((e) => (e.payload?.$case === "toolCall" ? [e.payload.value.callId] : [])));
    const missing = (assistant?.toolCalls ?? []).filter((c) => !results.has(c.id));
    const interrupted = missing.filter((c) => dispatched.has(c.id));
    const unstarted = missing.filter((c) => !dispatched.has(c.id));
    await this.append(draft("recovery", {
      previousOwner: previousOwner ?? "", owner: this.#deps.leases.owner,
      interruptedCallIds: interrupted.map((c) => c.id), unstartedCallIds: unstarted.map((c) => c.id),
    }, SOURCE));
    for (const call of missing) {
      await this.append(draft("toolResult", {
        callId: call.id, name: call.name, content: dispatched.has(call.id) ? RECOVERY_TEXT.mayHaveRun : RECOVERY_TEXT.notStarted,
        isError: true, durationMs: 0, synthesized: true,
      }, SOURCE, surfaceFor(lastAssistant!.seq)));
    }
    const stepClosed = lastAssistant && inTurn.some((e) => e.seq > lastAssistant.seq && e.payload?.$case === "stepEnd");
    if (assistant && !stepClosed) {
      await this.append(draft("stepEnd", { turn, step: assistant.step, toolCalls: assistant.toolCalls.length }, SOURCE));
    }
    if (assistant && assistant.toolCalls.length === 0) {
      await this.append(draft("turnEnd", { turn, reason: "completed", steps }, SOURCE));
      return true;
    }
    this.#run(() => this.#steps(turn, steps + 1));
    return true;
  }

  async #turn(turn: number, userMessageSeq: number, firstStep: number): Promise<void> {
    await this.append(draft("turnStart", { turn, userMessageSeq }, SOURCE));
    await this.#steps(turn, firstStep);
  }

  async #steps(turn: number, firstStep: number): Promise<void> {
    await inSpan("loop.turn", { "tack.session": this.sessionId, "tack.turn": turn }, async () => {
      let step = firstStep;
      for (;;) {
        if (this.#lost) return;
        if (step > this.#deps.settings.stepLimit) {
          await this.append(draft("turnEnd", { turn, reason: "step_limit", steps: step - 1 }, SOURCE));
          return;
        }
        let more: boolean;
        try {
          more = await inSpan("loop.step", { "tack.session": this.sessionId, "tack.turn": turn, "tack.step": step }, () => this.#step(turn, step));
        } catch (error) {
          const e = TackError.from(error, "loop.step_failed");
          if (e.code === "log.conflict" || this.#lost) return; // someone else owns the log now: write nothing more
          await this.append(
            draft("error", { code: e.code, message: e.message, retryable: e.retryable, turn, step }, SOURCE),
            draft("turnEnd", { turn, reason: "error", steps: step }, SOURCE),
          );
          return;
        }
        if (!more) {
          await this.append(draft("turnEnd", { turn, reason: "completed", steps: step }, SOURCE));
          return;
        }
        step++;
      }
    });
  }

  /** One step: header, verification, model call, tool calls. Returns true when the model asked for tools. */
  async #step(turn: number, step: number): Promise<boolean> {
    await this.append(draft("stepStart", { turn, step }, SOURCE));
    await this.#logHeaderIfChanged();
    const request = this.#verifiedRequest();
    const done = await this.#callModel(turn, step, request);
    const [assistantEvent] = await this.append(
      draft("assistantMessage", {
        turn, step, content: done.content, reasoningContent: done.reasoningContent, toolCalls: done.toolCalls, finishReason: done.finishReason,
      }, SOURCE, { kind: Surface_Kind.KIND_APPEND, replaceFromSeq: 0, replaceToSeq: 0, sourceSeqs: [], origin: "model" }),
      draft("usage", { turn, step, model: done.model || request.model, usage: done.usage, costUsd: done.costUsd, priceWindow: done.priceWindow }, SOURCE),
    );
    if (done.toolCalls.length === 0) {
      await this.append(draft("stepEnd", { turn, step, toolCalls: 0 }, SOURCE));
      return false;
    }
    await this.#runTools(turn, step, done.toolCalls, assistantEvent!.seq);
    await this.append(draft("stepEnd", { turn, step, toolCalls: done.toolCalls.length }, SOURCE));
    return true;
  }

  async #toolSpecs(mode: string): Promise<ToolSpec[]> {
    this.#tools ??= (await this.#deps.bus.request(this.#deps.bus.names.toolsList, ListToolsRequest, { mode }, ListToolsResponse, { timeoutMs: 10_000 })).tools;
    return this.#tools;
  }

  async #logHeaderIfChanged(): Promise<void> {
    const meta = this.meta!;
    const systemPrompt = SYSTEM_PROMPTS[meta.mode];
    if (systemPrompt === undefined) throw new TackError("loop.unknown_mode", `mode ${meta.mode} is unknown; known modes: ${MODES.join(", ")}`);
    const header: Omit<RequestHeader, "reason"> = {
      model: meta.model, systemPrompt, tools: await this.#toolSpecs(meta.mode),
      temperature: this.#deps.settings.temperature, maxTokens: this.#deps.settings.maxTokens,
    };
    const previous = this.projection.header;
    if (previous && sameHeader(previous, header)) {
      this.#resumed = false;
      return;
    }
    const reason = !previous ? "initial" : this.#resumed ? "resume" : "change";
    this.#resumed = false;
    await this.append(draft("requestHeader", { reason, ...header }, SOURCE));
  }

  /** The request about to be sent, refused unless it equals a fresh derivation from the log. */
  #verifiedRequest(): ModelRequest {
    const cached = this.projection.request();
    const fresh = deriveRequest(this.events);
    if (serializeRequest(cached) !== serializeRequest(fresh)) {
      throw new TackError(
        "loop.projection_mismatch",
        "the model request differs from a fresh derivation of the log; refusing to send it (the cached projection is corrupt; reload the session)",
      );
    }
    return cached;
  }

  async #callModel(turn: number, step: number, request: ModelRequest): Promise<CompleteDone> {
    const pending: Delta[] = [];
    let done: CompleteDone | undefined;
    let error: TackError | undefined;
    let flushing: Promise<unknown> = Promise.resolve();
    let retries: Promise<unknown> = Promise.resolve();
    const flush = () => {
      if (pending.length === 0) return;
      const deltas = pending.splice(0);
      flushing = this.append(draft("assistantChunks", { turn, step, deltas }, SOURCE));
    };
    await requestStream(this.#deps.bus, this.#deps.bus.names.llmComplete, CompleteRequest, {
      sessionId: this.sessionId, model: request.model, systemPrompt: request.systemPrompt, tools: [...request.tools],
      messages: [...request.messages], temperature: request.temperature, maxTokens: request.maxTokens,
    }, CompleteStreamMessage, (m) => {
      const body = m.body;
      if (body?.$case === "delta") {
        pending.push(body.value);
        if (pending.length >= this.#deps.settings.chunkPack) flush();
      } else if (body?.$case === "retry") {
        // The attempt so far is void: its unlogged deltas are dropped and the retry is an event.
        pending.length = 0;
        const r = body.value;
        retries = this.append(draft("llmRetry", { turn, step, attempt: r.attempt, code: r.code, message: r.message, delayMs: r.delayMs }, SOURCE));
      } else if (body?.$case === "done") done = body.value;
      else if (body?.$case === "error") error = TackError.fromBusError(body.value);
    }, (m) => m.body?.$case === "done" || m.body?.$case === "error", { idleTimeoutMs: this.#deps.settings.llmIdleTimeoutMs });
    flush();
    await Promise.all([flushing, retries]);
    if (error) throw error;
    if (!done) throw new TackError("llm.empty_reply", "the model reply stream ended without a final message");
    return done;
  }

  async #runTools(turn: number, step: number, calls: ToolCall[], assistantSeq: number): Promise<void> {
    const meta = this.meta!;
    const mode = this.#sandboxMode();
    let next = 0;
    const worker = async () => {
      while (next < calls.length) {
        const call = calls[next++]!;
        await this.append(draft("toolCall", { callId: call.id, name: call.name, arguments: call.arguments, turn, step }, SOURCE));
        let result: CallToolResponse;
        const started = performance.now();
        try {
          result = await this.#deps.bus.request(this.#deps.bus.names.toolsCall, CallToolRequest, {
            sessionId: this.sessionId, tenant: this.tenant, callId: call.id, name: call.name, arguments: call.arguments,
            workspace: meta.workspace, sandboxMode: mode,
          }, CallToolResponse, { timeoutMs: this.#deps.settings.toolTimeoutMs });
        } catch (error) {
          const e = TackError.from(error);
          result = { content: `Tool ${call.name} could not run: ${e.message}`, isError: true, durationMs: performance.now() - started };
        }
        await this.append(draft("toolResult", {
          callId: call.id, name: call.name, content: result.content, isError: result.isError, durationMs: result.durationMs, synthesized: false,
        }, SOURCE, surfaceFor(assistantSeq)));
      }
    };
    const width = Math.min(this.#deps.settings.parallelToolCalls, calls.length);
    await Promise.all(Array.from({ length: width }, worker));
  }

  #sandboxMode(): string {
    for (let i = this.events.length - 1; i >= 0; i--) {
      const p = this.events[i]!.payload;
      if (p?.$case === "sandboxMode") return p.value.mode;
    }
    return "workspace-write";
  }
}

function surfaceFor(assistantSeq: number) {
  return { kind: Surface_Kind.KIND_APPEND, replaceFromSeq: 0, replaceToSeq: 0, sourceSeqs: [assistantSeq], origin: "tool" };
}

function sameHeader(a: RequestHeader, b: Omit<RequestHeader, "reason">): boolean {
  return a.model === b.model && a.systemPrompt === b.systemPrompt && a.temperature === b.temperature && a.maxTokens === b.maxTokens
    && JSON.stringify(a.tools) === JSON.stringify(b.tools);
}
