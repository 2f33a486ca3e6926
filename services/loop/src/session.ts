import { readFileSync } from "node:fs";
import { context } from "@opentelemetry/api";
import { inSpan, retrying, SkillsRpc, TackError, ToolsRpc, type Bus, type RetryPolicy } from "@tack/bus";
import {
  deriveRequest, draft, Projection, readAll, serializeRequest, SessionLogWriter, SessionState, type Draft, type ModelRequest, type SpillBucket,
} from "@tack/log";
import {
  CallToolResponse, Surface_Kind, type ApprovalAsked, type ApprovalDecided, type CompleteDone, type Event, type PlanDecided, type QuestionAnswer, type QuestionAnswered,
  type RequestHeader, type SessionCreated, type ToolCall, type ToolSpec,
} from "@tack/proto";
import type { Logger } from "@tack/telemetry";
import {
  keyFields, NO_KEY, outcomePlan, pendingApprovals, planCalls, toolApprovalPlan, type CallPlan, type DecidedPlan, type Decision,
  type DecidingKey,
} from "./approvals.js";
import { callMcpTool, Extensions, mcpOperation, runSkillTool, skillsPathTouched, userSkill, type ExtensionsHost, type StepExtensions } from "./extensions.js";
import { Compactor, type CompactionSettings } from "./compaction.js";
import { dispatchTool, limiter } from "./dispatch.js";
import { Hooks, type HooksHost } from "./hooks.js";
import { callModel } from "./model-call.js";
import { RulesTracker, type RulesHost } from "./rules.js";
import { assertNoWiderProcesses, assertSandboxMode, assertToolsMode } from "./mode.js";
import {
  checkAnswers, pendingPlans, pendingQuestions, planModeRefusal, runSessionTool, SESSION_TOOL_TEXT, type SessionToolDeps,
} from "./session-tools.js";
import type { PendingWaits } from "./waits.js";
import { sessionSpend, type Budgets } from "./budget.js";
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
  /** Longest silence (not even a heartbeat) of an llm or tools worker before it counts as dead and the request is sent again. */
  readonly silenceMs: number;
  /** Retries of llm and tools requests that no replica answered or whose replica died (window default 60 s). */
  readonly retry: RetryPolicy;
  readonly temperature: number;
  readonly maxTokens: number;
  /** Deltas packed into one `assistant/chunks` event at most. */
  readonly chunkPack: number;
  /** How long an approval waits for a person before it ends as unavailable (0: no one can answer). */
  readonly approvalTimeoutMs: number;
  readonly compaction: CompactionSettings;
}

/** What a running session needs from its service. */
export interface SessionDeps {
  readonly bus: Bus;
  readonly leases: Leases;
  readonly settings: LoopSettings;
  readonly log: Logger;
  /** The object store bucket for spilled tool results (created at the first spill). */
  readonly spills: () => Promise<SpillBucket>;
  /** Session and tenant budgets, checked before every model call. */
  readonly budgets: Budgets;
  /** Called when the session ends its work or loses its lease, so the service can forget it. */
  readonly onIdle: (runtime: SessionRuntime) => void;
}

const SOURCE = "loop";
/** System prompts of the modes that have their own; every other mode the tools service has uses the standard one. */
const SYSTEM_PROMPTS: Record<string, string> = Object.fromEntries(["standard", "code", "minimal", "creator"].map((mode) => [
  mode, readFileSync(new URL(`./prompts/${mode}.md`, import.meta.url), "utf8").trim(),
]));
/** Modes whose conversation is never pruned or summarized (a baseline that shows the model everything; results are still spilled). */
const NO_COMPACTION = new Set(["minimal"]);
/** Modes without skills and MCP tools (a baseline with the mode's own tools only). */
const NO_EXTENSIONS = new Set(["minimal"]);
/** Who carries out a call of each tool the loop handles itself: the loop (session tools) or the skills service (`skill`). */
const LOOP_HANDLED = new Set(["session", "skills"]);
/**
 * How long after a session's creation its first step may use the rules, skills catalog and MCP
 * tools read at creation (`prefetchFirstTurn`): `tack run` sends the first message at once; a
 * message that comes later (a person typing in `tack chat`) has them read again, as every turn does.
 */
export const FIRST_STEP_FRESH_MS = 5_000;

/** Wording the model sees for calls interrupted by a crash. */
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
  /** The session's state (modes, plan mode, what waits, this turn's approvals), kept event by event. */
  readonly state = new SessionState();
  readonly lease: Lease;
  readonly #deps: SessionDeps;
  readonly #writer: SessionLogWriter;
  /** The tools of the session's mode, as the tools service listed them (the mode changes only before the first turn). */
  /** The tools listed for the session's mode and its definitions (how many: a new `tool/defined` lists again). */
  #tools: { mode: string; defined: number; specs: ToolSpec[] } | undefined;
  /** The tool list asked for at the session's creation (undefined specs: that request failed). */
  #toolsAhead: { mode: string; defined: number; specs: Promise<ToolSpec[] | undefined> } | undefined;
  #resumed = false;
  #running: Promise<void> | undefined;
  #renewTimer: NodeJS.Timeout | undefined;
  #lost = false;
  /** Set by `stopTurn`: the running turn ends at its next step boundary. */
  #stopping = false;
  /** The running turn has logged (or is logging) its turn/end and is about to settle. */
  #ending = false;
  /** True while a sandbox mode change checks the containers (messages and other changes are refused meanwhile). */
  #changingMode = false;
  /** True while a compaction a person asked for runs (messages, mode changes and deletion are refused meanwhile). */
  #compacting = false;
  readonly #approvals: PendingWaits<ApprovalDecided>;
  readonly #questions: PendingWaits<QuestionAnswered>;
  readonly #plans: PendingWaits<PlanDecided>;
  readonly #compactor: Compactor;
  readonly #rules = new RulesTracker();
  readonly #extensions = new Extensions();
  readonly #hooks = new Hooks();

  private constructor(deps: SessionDeps, tenant: string, sessionId: string, writer: SessionLogWriter, lease: Lease) {
    this.#deps = deps;
    this.tenant = tenant;
    this.sessionId = sessionId;
    this.#writer = writer;
    this.lease = lease;
    writer.onAppend = (event) => {
      this.events.push(event);
      this.projection.apply(event);
      this.state.apply(event);
    };
    this.#approvals = pendingApprovals(async (decided) => (await this.append(draft("approvalDecided", decided, SOURCE)))[0]!.seq);
    this.#questions = pendingQuestions(async (answered) => (await this.append(draft("questionAnswered", answered, SOURCE)))[0]!.seq);
    // An approved plan ends plan mode in the same append, so no turn sees the one without the other.
    this.#plans = pendingPlans(async (decided) => (await this.append(
      draft("planDecided", decided, SOURCE),
      ...(decided.decision === "approve" ? [draft("planMode", { on: false, changedBy: decided.decidedBy }, SOURCE)] : []),
    ))[0]!.seq);
    this.#compactor = new Compactor(deps.settings.compaction, { tenant, sessionId }, deps.spills, deps.log);
  }

  /** Loads a session whose lease we hold: reads its whole log and opens the single writer. */
  static async load(deps: SessionDeps, tenant: string, sessionId: string, lease: Lease): Promise<SessionRuntime> {
    const events = await readAll(deps.bus.nc, deps.bus.names, { tenant, sessionId });
    const writer = await SessionLogWriter.open(deps.bus.nc, deps.bus.names, { tenant, sessionId });
    const runtime = new SessionRuntime(deps, tenant, sessionId, writer, lease);
    for (const e of events) {
      runtime.events.push(e);
      runtime.projection.apply(e);
      runtime.state.apply(e);
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

  /** True once the lease is lost or the runtime disposed: it must not write again. */
  get lost(): boolean {
    return this.#lost;
  }

  /** True while a turn runs. */
  get busy(): boolean {
    return this.#running !== undefined;
  }

  /** True while a turn runs, a sandbox mode change checks the containers or a compaction runs: none may be cut short by a deletion. */
  get working(): boolean {
    return this.#running !== undefined || this.#changingMode || this.#compacting;
  }

  /** Resolves when the running turn (if any) is over. */
  async settled(): Promise<void> {
    await this.#running;
  }

  /**
   * Appends without waiting for the ack: the writer keeps the order, and a failure fails every
   * later append (so the next awaited one, or `flush`, reports it).
   */
  #appendLater(...drafts: Draft[]): void {
    this.append(...drafts).catch(() => undefined);
  }

  /**
   * Appends events through the single writer. A writer that failed for good (another writer
   * took the log, or NATS stayed away through every retry) makes this runtime give the session
   * up: the next command loads it afresh from the log.
   */
  async append(...drafts: Draft[]): Promise<Event[]> {
    // From here the running turn only closes: a request arriving before its acknowledgement (a
    // client that saw turn/end in the log first) waits for that instead of being refused as busy.
    if (this.#running && drafts.some((d) => d.payload.$case === "turnEnd")) this.#ending = true;
    try {
      return await this.#writer.append(...drafts);
    } catch (error) {
      if (this.#writer.broken && !this.#lost) {
        this.#deps.log.warn("session log writer failed; giving the session up", { session: this.sessionId, error: (error as Error).message });
        this.dispose();
        // After the turn (if any) has unwound, so the service can release it.
        setImmediate(() => this.#deps.onIdle(this));
      }
      throw error;
    }
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

  /**
   * Stops renewing the lease (the lease then expires unless released) and writing: a running
   * turn stops at its next write, and pending approvals are left to the session's next owner.
   */
  dispose(): void {
    clearInterval(this.#renewTimer);
    this.#lost = true;
    this.#approvals.abandon();
    this.#questions.abandon();
    this.#plans.abandon();
  }

  /**
   * Logs a person's decision on the pending approval of `callId` and lets that call go on;
   * returns the seq of `approval/decided`. Throws `loop.no_pending_approval` when none is pending.
   */
  decide(callId: string, decision: Decision, decidedBy: string, key: DecidingKey = NO_KEY): Promise<number> {
    return this.#approvals.answer(callId, { callId, decision, decidedBy, ...keyFields(key, "decidedByKey", "decidedByKeyId") });
  }

  /**
   * Logs a person's answers to the pending question of `callId` and lets the call go on;
   * returns the seq of `question/answered`. Throws `loop.bad_answer` for answers that do not fit
   * the questions and `loop.no_pending_question` when none is pending.
   */
  answerQuestion(callId: string, answers: readonly QuestionAnswer[], answeredBy: string, key: DecidingKey = NO_KEY): Promise<number> {
    if (this.#questions.waiting.includes(callId)) checkAnswers(this.state.question(callId), callId, answers);
    return this.#questions.answer(callId, { callId, outcome: "answered", answers: [...answers], answeredBy, ...keyFields(key, "answeredByKey", "answeredByKeyId") });
  }

  /**
   * Logs a person's review of the plan of `callId` (empty: the plan waiting, the oldest if
   * several) and lets the call go on; an approval also ends plan mode. Returns the seq of
   * `plan/decided`; throws `loop.no_pending_plan` when no such plan waits.
   */
  decidePlan(callId: string, decision: "approve" | "reject", feedback: string, decidedBy: string, key: DecidingKey = NO_KEY): Promise<number> {
    const id = callId || this.#plans.waiting[0] || "";
    return this.#plans.answer(id, { callId: id, decision, feedback, decidedBy, ...keyFields(key, "decidedByKey", "decidedByKeyId") });
  }

  /**
   * Stops the running turn: pending approvals end as cancelled (decided by `by`) and the turn
   * ends with reason `cancelled` at its next step boundary; calls already running finish.
   */
  async stopTurn(by: string): Promise<void> {
    if (!this.#running) return;
    this.#stopping = true;
    await Promise.all([this.#approvals.cancelAll(by), this.#questions.cancelAll(by), this.#plans.cancelAll(by)]);
  }

  /** Writes the opening events of a new session. */
  async create(meta: SessionCreated, sandboxMode: string, approvalPolicy: string, planMode = false): Promise<void> {
    if (this.events.length > 0) {
      throw new TackError("loop.session_exists", `session ${this.sessionId} already exists; choose another id or leave it empty`);
    }
    await this.append(
      draft("sessionCreated", meta, SOURCE),
      draft("permissionPreset", { preset: "default" }, SOURCE),
      draft("sandboxMode", { mode: sandboxMode, changedBy: "session" }, SOURCE),
      draft("approvalPolicy", { policy: approvalPolicy }, SOURCE),
      ...(planMode ? [draft("planMode", { on: true, changedBy: "session" }, SOURCE)] : []),
    );
  }

  /**
   * Starts what a new session's first turn reads, while the person writes the first message (the
   * service calls it at creation, alongside the sandbox pre-warm): the hooks snapshot, the mode's
   * tool list, and the first step's rules, skills catalog and MCP tools (used if that step starts
   * within FIRST_STEP_FRESH_MS). Nothing is logged: the turn logs what it uses, in the same order as
   * without this, so the requests are the same byte for byte.
   */
  prefetchFirstTurn(): void {
    if (this.#lost || !this.meta || this.#turnCount() > 0) return;
    const mode = this.state.mode;
    this.#hooks.snapshot(this.#rulesHost());
    const defined = this.state.definedTools;
    const { bus } = this.#deps;
    const specs = bus.request(ToolsRpc.ListTools, { mode, ...(defined ? { defined } : {}) }, { timeoutMs: 10_000 })
      .then((listed) => listed.tools, () => undefined);
    this.#toolsAhead = { mode, defined: defined?.tools.length ?? 0, specs };
    this.#rules.prefetchAhead(this.#rulesHost(), FIRST_STEP_FRESH_MS);
    this.#extensions.prefetchAhead(this.#extensionsHost(), !NO_EXTENSIONS.has(mode), FIRST_STEP_FRESH_MS);
  }

  /**
   * Turns plan mode on or off by logging `plan/mode`; returns its seq, or 0 when it already was.
   * Takes effect at the next step's tool calls; a plan waiting for review keeps waiting.
   */
  async setPlanMode(on: boolean, changedBy: string): Promise<number> {
    if (!this.meta) throw new TackError("loop.unknown_session", `session ${this.sessionId} does not exist; create it first`);
    if (this.state.planMode === on) return 0;
    const [event] = await this.append(draft("planMode", { on, changedBy }, SOURCE));
    return event!.seq;
  }

  /**
   * Changes the session's mode (the tools it has) by logging `session/mode`; returns its seq, or 0
   * when it already is that mode. Only before the first message (`loop.mode_fixed`): the tools
   * are part of every request, and a conversation held with one set must not continue with another.
   */
  async setSessionMode(mode: string, changedBy: string): Promise<number> {
    if (!this.meta) throw new TackError("loop.unknown_session", `session ${this.sessionId} does not exist; create it first`);
    const current = this.state.mode;
    if (current === mode) return 0;
    if (this.#running || this.state.userMessages > 0) {
      throw new TackError("loop.mode_fixed", `session ${this.sessionId} already has messages, so its mode stays ${current}; create a new session with mode ${mode}`, {
        details: { mode: current },
      });
    }
    await assertToolsMode(this.#deps.bus, mode);
    const [event] = await this.append(draft("sessionMode", { mode, changedBy }, SOURCE));
    return event!.seq;
  }

  /**
   * Changes the session's sandbox mode to `mode` by logging `sandbox/mode`; returns its seq, or 0
   * when the session already is in that mode. Refused while a turn runs (`loop.busy`) and while
   * a container of a wider mode still runs a process (`loop.mode_change_refused`).
   */
  async setSandboxMode(mode: string, changedBy: string): Promise<number> {
    assertSandboxMode(mode);
    if (!this.meta) throw new TackError("loop.unknown_session", `session ${this.sessionId} does not exist; create it first`);
    const busy = () => new TackError("loop.busy", `session ${this.sessionId} is running a turn, a compaction or another mode change; wait for its turn/end, then change the sandbox mode`, { retryable: true });
    await this.#settleEndingTurn();
    if (this.#running || this.#changingMode || this.#compacting) throw busy();
    const current = this.state.sandboxMode;
    if (current === mode) return 0;
    this.#changingMode = true;
    try {
      // Messages are refused meanwhile, so no turn starts between this check and the event.
      await assertNoWiderProcesses(this.#deps.bus, this.sessionId, mode);
      const [event] = await this.append(draft("sandboxMode", { mode, changedBy }, SOURCE));
      this.#deps.log.info("sandbox mode changed", { session: this.sessionId, from: current, to: mode, changed_by: changedBy, seq: event!.seq });
      return event!.seq;
    } finally {
      this.#changingMode = false;
    }
  }

  /**
   * Compacts the conversation now, for a person (`/compact`): the compactor's summary, the same
   * events as when the context fills up (a replacing `user/message`, `context/summarized`), with
   * `instructions` for what to keep. Refused (`loop.compact_busy`) while a turn runs or the
   * session changes its sandbox mode; `compacted: false` with a note when there is nothing to
   * compact. Budgets are checked before the model call and its cost recorded, as for a step's.
   */
  async compact(by: string, instructions: string): Promise<{
    compacted: boolean; note: string; seq: number; fromSeq: number; toSeq: number; tokensBefore: number; tokensAfter: number; costUsd: number;
  }> {
    const meta = this.meta;
    if (!meta) throw new TackError("loop.unknown_session", `session ${this.sessionId} does not exist; create it first`);
    await this.#settleEndingTurn();
    if (this.#running || this.#changingMode || this.#compacting) {
      throw new TackError("loop.compact_busy", `session ${this.sessionId} is running a turn (or changing its sandbox mode, or already compacting); wait for the turn to end or cancel it, then compact`, { retryable: true });
    }
    const mode = this.state.mode;
    const none = (note: string) => ({ compacted: false, note, seq: 0, fromSeq: 0, toSeq: 0, tokensBefore: 0, tokensAfter: 0, costUsd: 0 });
    if (NO_COMPACTION.has(mode)) return none(`session mode ${mode} is never compacted: it shows the model the whole conversation; use another mode for long work`);
    // No request sent yet: no model reply to summarize either.
    if (!this.projection.header) return none("nothing to compact: the model has not replied in this session yet");
    this.#compacting = true;
    try {
      await this.#writer.flush();
      const tokensBefore = this.#compactor.estimate(this.projection.request());
      const turn = this.#turnCount();
      const summarized = await this.#compactor.compact({
        projection: this.projection, append: (...drafts) => this.append(...drafts), verifiedRequest: () => this.#verifiedRequest(),
        callModel: (request) => this.#chargedCall(turn, 0, request, false),
      }, instructions, by);
      if (!summarized) return none("nothing to compact: the model has not replied since the last summary (or the session has too little conversation to summarize)");
      const tokensAfter = this.#compactor.estimate(this.projection.request());
      this.#deps.log.info("session compacted", { session: this.sessionId, by, from_seq: summarized.fromSeq, to_seq: summarized.toSeq, tokens_before: tokensBefore, tokens_after: tokensAfter });
      return { compacted: true, note: "", seq: summarized.seq, fromSeq: summarized.fromSeq, toSeq: summarized.toSeq, tokensBefore, tokensAfter, costUsd: summarized.costUsd };
    } finally {
      this.#compacting = false;
    }
  }

  /** Logs a user message and starts its turn in the background. */
  async submit(text: string): Promise<{ seq: number; turn: number }> {
    if (!this.meta) throw new TackError("loop.unknown_session", `session ${this.sessionId} does not exist; create it first`);
    await this.#settleEndingTurn();
    if (this.#running || this.#changingMode || this.#compacting) {
      throw new TackError("loop.busy", `session ${this.sessionId} is running a turn, changing its sandbox mode or being compacted; wait for that to end before sending another message`, { retryable: true });
    }
    // `/name [arguments]` runs a skill: its body follows the message, in the same append.
    const skill = NO_EXTENSIONS.has(this.state.mode) ? undefined : await userSkill({ bus: this.#deps.bus, workspace: this.meta.workspace, log: this.#deps.log, sessionId: this.sessionId }, text);
    const [event] = await this.append(
      draft("userMessage", { text }, "gateway", { kind: Surface_Kind.KIND_APPEND, replaceFromSeq: 0, replaceToSeq: 0, sourceSeqs: [], origin: "user" }),
      ...(skill ? [skill] : []),
    );
    const turn = this.#turnCount() + 1;
    this.#run(() => this.#turn(turn, event!.seq, 1));
    return { seq: event!.seq, turn };
  }

  /** Waits for a turn that is only closing (its turn/end is being logged); a turn still working is not waited for. */
  async #settleEndingTurn(): Promise<void> {
    if (!(this.#running && this.#ending)) return;
    await this.#running;
    // Released when its turn ended (no idle time configured): the next owner takes the request.
    if (this.#lost) throw new TackError("loop.busy", `session ${this.sessionId} just ended its turn and this loop released it; send the request again`, { retryable: true });
  }

  #turnCount(): number {
    return this.state.turns;
  }

  #run(body: () => Promise<void>): void {
    const parent = context.active();
    this.#running = context.with(parent, body)
      .catch((error: unknown) => this.#deps.log.error("turn failed", { session: this.sessionId, error: (error as Error).message }))
      .finally(() => {
        this.#running = undefined;
        this.#ending = false;
        this.#stopping = false;
        this.#deps.onIdle(this);
      });
  }

  /**
   * Crash recovery after taking the session over: gives every tool call of the interrupted
   * step a result (may-or-may-not-have-run vs not-started), then continues the turn. A call
   * whose approval was asked is not answered for the person: it waits again (its deadline still
   * counted from when it was asked), or follows the decision already logged.
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
    const approvals = this.state.turnApprovals();
    // Session tools are never dispatched and are idempotent by call id: they are simply carried out again.
    const specs = toolsByName(this.projection.header?.tools ?? []);
    const bySession = (c: ToolCall) => LOOP_HANDLED.has(specs.get(c.name)?.handler ?? "");
    const unanswered = (assistant?.toolCalls ?? []).filter((c) => !results.has(c.id));
    const interrupted = unanswered.filter((c) => dispatched.has(c.id));
    const parked = unanswered.filter((c) => !dispatched.has(c.id) && (approvals.has(c.id) || bySession(c)));
    const unstarted = unanswered.filter((c) => !dispatched.has(c.id) && !approvals.has(c.id) && !bySession(c));
    const missing = [...interrupted, ...unstarted];
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
    if (parked.length > 0) {
      const mode = this.state.sandboxMode;
      const items = parked.map((call): [ToolCall, Promise<CallPlan>] => {
        if (!approvals.has(call.id)) return [call, Promise.resolve({ kind: "session" })];
        const { decided, askedAtMs, kind } = approvals.get(call.id)!;
        const decision = decided ? Promise.resolve(decided) : this.#approvals.wait(call.id, Promise.resolve(), askedAtMs + this.#deps.settings.approvalTimeoutMs);
        return [call, decision.then((d) => outcomePlan(call, d, mode, kind))];
      });
      const finishStep = async () => {
        // Parked calls ran their PreToolUse hooks before they were parked.
        await this.#settleCalls(items, lastAssistant!.seq, turn, assistant!.step, false);
        await this.append(draft("stepEnd", { turn, step: assistant!.step, toolCalls: assistant!.toolCalls.length }, SOURCE));
        return true;
      };
      this.#run(() => this.#steps(turn, assistant!.step, finishStep));
      return true;
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
    this.#hooks.prefetch(this.#hooksHost(turn), turn);
    await this.append(draft("turnStart", { turn, userMessageSeq }, SOURCE));
    // SessionStart (first turn) and UserPromptSubmit hooks; a blocked prompt ends the turn before any model call.
    if ((await this.#hooks.userPromptSubmit(this.#hooksHost(turn), turn, userMessageSeq)).blocked) {
      await this.append(draft("turnEnd", { turn, reason: "hook_blocked", steps: 0 }, SOURCE));
      return;
    }
    await this.#steps(turn, firstStep);
  }

  /** Runs steps from `firstStep` until the turn ends; `finishFirst`, when given, completes an interrupted first step instead of starting it. */
  async #steps(turn: number, firstStep: number, finishFirst?: () => Promise<boolean>): Promise<void> {
    await inSpan("loop.turn", { "tack.session": this.sessionId, "tack.turn": turn }, async () => {
      let step = firstStep;
      for (;;) {
        if (this.#lost) return;
        if (this.#stopping) {
          await this.append(draft("turnEnd", { turn, reason: "cancelled", steps: step - 1 }, SOURCE));
          return;
        }
        if (this.#hooks.takeStop()) {
          await this.append(draft("turnEnd", { turn, reason: "hook_stopped", steps: step - 1 }, SOURCE));
          return;
        }
        if (step > this.#deps.settings.stepLimit) {
          await this.append(draft("turnEnd", { turn, reason: "step_limit", steps: step - 1 }, SOURCE));
          return;
        }
        let more: boolean;
        try {
          more = await inSpan("loop.step", { "tack.session": this.sessionId, "tack.turn": turn, "tack.step": step }, () =>
            finishFirst && step === firstStep ? finishFirst() : this.#step(turn, step));
        } catch (error) {
          const e = TackError.from(error, "loop.step_failed");
          if (e.code === "log.conflict" || this.#lost) return; // someone else owns the log now: write nothing more
          await this.append(
            draft("error", { code: e.code, message: e.message, retryable: e.retryable, turn, step }, SOURCE),
            draft("turnEnd", { turn, reason: e.code.startsWith("budget.") ? "budget" : "error", steps: step }, SOURCE),
          );
          return;
        }
        // A Stop hook may keep the turn going: its reason is a hook/context the next step's model reads.
        if (!more && !this.#stopping && await this.#hooks.stop(this.#hooksHost(turn), turn)) more = true;
        if (!more) {
          await this.append(draft("turnEnd", { turn, reason: "completed", steps: step }, SOURCE));
          return;
        }
        step++;
      }
    });
  }

  /** One step: header, compaction, verification, model call, tool calls. Returns true when the model asked for tools. */
  async #step(turn: number, step: number): Promise<boolean> {
    // Not waited for: it pipelines behind the previous step's end, and every append is acked before the request is built.
    this.#appendLater(draft("stepStart", { turn, step }, SOURCE));
    // The rules read (an exec in the sandbox) runs while the header and compaction are done.
    this.#rules.prefetch(this.#rulesHost(), turn);
    // So are the skills catalog and the MCP tools (answered from memory after a session's first step).
    const withExtensions = !NO_EXTENSIONS.has(this.state.mode);
    this.#extensions.prefetch(this.#extensionsHost(), withExtensions);
    const extensions = await this.#extensions.take(this.#extensionsHost(), withExtensions);
    await this.#logHeaderIfChanged(turn, step, extensions);
    await this.#writer.flush();
    if (!NO_COMPACTION.has(this.state.mode)) await this.#compactor.beforeRequest({
      projection: this.projection, append: (...drafts) => this.append(...drafts), verifiedRequest: () => this.#verifiedRequest(),
      callModel: (request) => this.#chargedCall(turn, step, request, false),
    });
    // After compaction, so rules a summary took out of the model's view are logged again before this request.
    await this.#rules.check(this.#rulesHost(), turn);
    await this.#extensions.record(this.#extensionsHost(), extensions);
    const request = this.#verifiedRequest();
    const done = await this.#chargedCall(turn, step, request, true);
    this.#compactor.observe(request, done.usage);
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
    // The next step's start pipelines behind it; `flush` before the next request (or the turn's end) surfaces any failure.
    this.#appendLater(draft("stepEnd", { turn, step, toolCalls: done.toolCalls.length }, SOURCE));
    return true;
  }

  /**
   * Every model call, a step's or a summary's (automatic or asked for): checked against the
   * session's and the tenant's budgets first, streamed (see `callModel`; its deltas logged as
   * `assistant/chunks` when `logChunks`), and its cost added to the tenant's spending.
   */
  async #chargedCall(turn: number, step: number, request: ModelRequest, logChunks: boolean): Promise<CompleteDone> {
    await this.#deps.budgets.check({
      tenant: this.tenant, model: request.model, sessionBudget: this.meta!.budgetUsd, sessionSpent: sessionSpend(this.events),
      inputTokens: this.#compactor.estimate(request), maxTokens: request.maxTokens,
    });
    const { bus, settings } = this.#deps;
    const done = await callModel({
      bus, sessionId: this.sessionId, append: (...drafts) => this.append(...drafts), chunkPack: settings.chunkPack,
      llmIdleTimeoutMs: settings.llmIdleTimeoutMs, silenceMs: settings.silenceMs, retry: settings.retry,
    }, turn, step, request, logChunks);
    await this.#deps.budgets.record(this.tenant, done.costUsd);
    return done;
  }

  #extensionsHost(): ExtensionsHost {
    return {
      bus: this.#deps.bus, sessionId: this.sessionId, tenant: this.tenant, workspace: this.meta!.workspace, sandboxMode: this.state.sandboxMode,
      events: this.events, projection: this.projection, append: (...drafts) => this.append(...drafts), log: this.#deps.log,
    };
  }

  #hooksHost(turn: number): HooksHost {
    return { ...this.#rulesHost(), tools: () => this.#toolSpecs(this.state.mode, turn, 1) };
  }

  #rulesHost(): RulesHost {
    return {
      bus: this.#deps.bus, sessionId: this.sessionId, tenant: this.tenant, workspace: this.meta!.workspace, events: this.events, state: this.state, projection: this.projection,
      append: (...drafts) => this.append(...drafts), log: this.#deps.log,
    };
  }

  /** The tools of `mode`, asked of the tools service once per runtime; retried (as `tool/retry` events without a call id) while no worker answers. */
  async #toolSpecs(mode: string, turn: number, step: number): Promise<ToolSpec[]> {
    const { bus, settings } = this.#deps;
    const defined = this.state.definedTools;
    const count = defined?.tools.length ?? 0;
    const ahead = this.#toolsAhead;
    if (ahead && (this.#tools?.mode !== mode || this.#tools.defined !== count)) {
      // The list asked for at creation, unless the mode or the defined tools changed since (or it failed: asked again below, retries logged).
      const specs = ahead.mode === mode && ahead.defined === count ? await ahead.specs : undefined;
      if (this.#toolsAhead === ahead) this.#toolsAhead = undefined;
      if (specs) this.#tools = { mode, defined: count, specs };
    }
    if (this.#tools?.mode !== mode || this.#tools.defined !== count) {
      const request = { mode, ...(defined ? { defined } : {}) };
      const listed = await retrying(settings.retry, () => bus.request(ToolsRpc.ListTools, request, { timeoutMs: 10_000 }), {
        onRetry: async ({ attempt, error, delayMs }) => {
          await this.append(draft("toolRetry", { callId: "", turn, step, attempt, hop: "tools", code: error.code, message: error.message, delayMs }, SOURCE));
        },
      });
      this.#tools = { mode, defined: count, specs: listed.tools };
    }
    return this.#tools.specs;
  }

  async #logHeaderIfChanged(turn: number, step: number, extensions: StepExtensions): Promise<void> {
    const meta = this.meta!;
    const mode = this.state.mode;
    const systemPrompt = SYSTEM_PROMPTS[mode] ?? SYSTEM_PROMPTS.standard!;
    // One list, in a stable order: the mode's tools as the tools service lists them, then `skill`, then MCP tools by name.
    const own = await this.#toolSpecs(mode, turn, step);
    const names = new Set(own.map((t) => t.name));
    const header: Omit<RequestHeader, "reason"> = {
      model: meta.model, systemPrompt, tools: [...own, ...Extensions.tools(extensions).filter((t) => !names.has(t.name))],
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

  async #runTools(turn: number, step: number, calls: ToolCall[], assistantSeq: number): Promise<void> {
    // The tools as this step's request gave them to the model: what each can be denied, and who carries it out.
    const tools = toolsByName(this.projection.header?.tools ?? []);
    const mode = this.state.sandboxMode;
    const planMode = this.state.planMode;
    // A session tool is the loop's; plan mode refuses what could write; the rest go through approvals.
    const policy = this.state.approvalPolicy;
    const early = calls.map((call): CallPlan | undefined => {
      const tool = tools.get(call.name);
      if (LOOP_HANDLED.has(tool?.handler ?? "")) return { kind: "session" };
      if (tool?.handler === "mcp") {
        // What an MCP tool does is the server's: plan mode cannot know it only reads.
        if (planMode) return { kind: "refuse", content: SESSION_TOOL_TEXT.planModeRefused(call.name) };
        return tool.approval === "ask" ? toolApprovalPlan(call, { mode, policy, turn, step }, mcpOperation(call)) : { kind: "run", mode };
      }
      const refusal = planMode ? planModeRefusal(call, tool, mode) : undefined;
      return refusal === undefined ? undefined : { kind: "refuse", content: refusal };
    });
    const rest = calls.filter((_, i) => early[i] === undefined);
    const planned = planCalls(rest, {
      mode, policy, escalatedBy: this.state.escalatedBy, turn, step, tools,
    });
    await this.#settleCalls(calls.map((call, i) => [call, early[i] ?? planned[rest.indexOf(call)]!]), assistantSeq, turn, step);
  }

  /**
   * Carries out the plan of each call: an escalation is asked and waits for its decision
   * (holding no slot, so the other calls go on); calls run at most `parallelToolCalls` at once;
   * a call that may not run gets a result saying why, and never reaches the tools service.
   */
  async #settleCalls(items: ReadonlyArray<readonly [ToolCall, CallPlan | Promise<CallPlan>]>, assistantSeq: number, turn: number, step: number, preToolUse = true): Promise<void> {
    const slot = limiter(this.#deps.settings.parallelToolCalls);
    await Promise.all(items.map(async ([call, planned]) => {
      // PreToolUse hooks run before any approval is asked: a block refuses the call, an `ask` asks.
      const first = preToolUse ? await this.#hooks.preToolUse(this.#hooksHost(turn), call, await planned, turn, step) : await planned;
      const plan = first.kind === "ask" ? await this.#ask(call, first.asked) : first;
      let result: CallToolResponse;
      if (plan.kind === "refuse") {
        if (plan.decided) await this.append(draft("approvalDecided", plan.decided, SOURCE));
        result = CallToolResponse.fromPartial({ content: plan.content, isError: true, durationMs: 0 });
      } else if (plan.kind === "session") {
        // Holds no slot: a question or a plan may wait for a person for a long time.
        const started = performance.now();
        const tool = toolsByName(this.projection.header?.tools ?? []).get(call.name)!;
        const outcome = tool.handler === "skills"
          ? await runSkillTool(this.#extensionsHost(), call)
          : await runSessionTool(this.#sessionToolDeps(), call, tool, turn, step);
        result = CallToolResponse.fromPartial({ ...outcome, durationMs: performance.now() - started });
      } else {
        const { mode, note } = plan;
        const byMcp = toolsByName(this.projection.header?.tools ?? []).get(call.name)?.handler === "mcp";
        result = await slot(() => (byMcp ? callMcpTool(this.#extensionsHost(), call, turn, step) : this.#dispatch(call, mode, turn, step)));
        if (note) result = { ...result, content: `${note}\n${result.content}` };
        // A skill written or edited: the skills service reads it again now, so the next step's catalog has it.
        const skillPath = result.isError ? undefined : skillsPathTouched(this.meta!.workspace, call, toolsByName(this.projection.header?.tools ?? []).get(call.name));
        if (skillPath) await this.#invalidateSkills(skillPath);
      }
      if (plan.kind !== "refuse") result = await this.#hooks.postToolUse(this.#hooksHost(turn), call, result, turn);
      await this.append(draft("toolResult", {
        callId: call.id, name: call.name, ...(await this.#compactor.spill(call.id, result.content, result.images)), isError: result.isError, durationMs: result.durationMs,
        synthesized: false,
      }, SOURCE, surfaceFor(assistantSeq)));
    }));
  }

  /** Logs `approval/asked` and waits for the decision; returns what the call does then. */
  async #ask(call: ToolCall, asked: ApprovalAsked): Promise<DecidedPlan> {
    const logged = this.append(draft("approvalAsked", asked, SOURCE));
    // Parked before the event is logged, so a decision sent the moment it appears finds the call waiting.
    const decided = this.#approvals.wait(call.id, logged, Date.now() + this.#deps.settings.approvalTimeoutMs);
    try {
      await logged;
    } catch (error) {
      decided.catch(() => undefined);
      throw error;
    }
    return outcomePlan(call, await decided, asked.currentMode, asked.kind || "sandbox");
  }

  /** Asks the skills service to read the skills root holding `path` again; a failure only delays the change to the watcher's next read. */
  async #invalidateSkills(path: string): Promise<void> {
    const { bus } = this.#deps;
    await bus.request(SkillsRpc.Invalidate, { workspace: this.meta!.workspace, path }, { timeoutMs: 5_000 })
      .catch((error: unknown) => this.#deps.log.warn("skills not re-read after a write; the watcher will catch up", { session: this.sessionId, error: (error as Error).message }));
  }

  #sessionToolDeps(): SessionToolDeps {
    return {
      events: this.events, state: this.state, append: (...drafts) => this.append(...drafts), questions: this.#questions, plans: this.#plans,
      waitMs: this.#deps.settings.approvalTimeoutMs,
    };
  }

  /** Logs `tool/call` and runs the call under sandbox mode `mode` (see `dispatchTool`). */
  #dispatch(call: ToolCall, mode: string, turn: number, step: number): Promise<CallToolResponse> {
    const { bus, settings } = this.#deps;
    return dispatchTool({
      bus, sessionId: this.sessionId, tenant: this.tenant, workspace: this.meta!.workspace, sessionMode: this.state.mode,
      defined: this.state.definedTools,
      append: (...drafts) => this.append(...drafts), toolTimeoutMs: settings.toolTimeoutMs, silenceMs: settings.silenceMs, retry: settings.retry,
    }, call, mode, turn, step);
  }
}

function surfaceFor(assistantSeq: number) {
  return { kind: Surface_Kind.KIND_APPEND, replaceFromSeq: 0, replaceToSeq: 0, sourceSeqs: [assistantSeq], origin: "tool" };
}

function toolsByName(tools: readonly ToolSpec[]): Map<string, ToolSpec> {
  return new Map(tools.map((t) => [t.name, t]));
}

function sameHeader(a: RequestHeader, b: Omit<RequestHeader, "reason">): boolean {
  return a.model === b.model && a.systemPrompt === b.systemPrompt && a.temperature === b.temperature && a.maxTokens === b.maxTokens
    && JSON.stringify(a.tools) === JSON.stringify(b.tools);
}
