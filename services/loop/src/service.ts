import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import type { Subscription } from "@nats-io/nats-core";
import { assertToken, Bus, DEFAULT_SILENCE_MS, retryPolicy, TackError, type BusAuth, type Codec } from "@tack/bus";
import { registerMicro } from "@tack/bus";
import { ensureLogStream, FORMAT_VERSION, SpillBucket } from "@tack/log";
import {
  CancelTurnRequest, CancelTurnResponse, CompactSessionRequest, CompactSessionResponse, CopySessionRequest, CopySessionResponse, type Event,
  CheckModelRequest, CheckModelResponse, CreateSessionRequest, CreateSessionResponse, EnsureSandboxRequest, EnsureSandboxResponse, DecideApprovalRequest, DecideApprovalResponse, SetSandboxModeRequest,
  SetSandboxModeResponse, SubmitMessageRequest, SubmitMessageResponse, DeleteSessionRequest, DeleteSessionResponse,
} from "@tack/proto";
import { logger } from "@tack/telemetry";
import { z } from "zod";
import { APPROVAL_POLICIES, DECISIONS, type Decision, type DecidingKey } from "./approvals.js";
import { assertSandboxMode, assertToolsMode } from "./mode.js";
import { PLAN_DECISIONS } from "./session-tools.js";
import { Budgets } from "./budget.js";
import { deleteSessionData } from "./deletion.js";
import { Leases, type Lease } from "./lease.js";
import { SessionRuntime, type LoopSettings } from "./session.js";

const Options = z.object({
  natsUrl: z.string(),
  namespace: z.string().default("tack"),
  /** Lease lifetime; a crashed owner's sessions are taken over this long after its last renewal. */
  leaseTtlMs: z.number().int().min(300).default(10_000),
  stepLimit: z.number().int().min(1).default(100),
  parallelToolCalls: z.number().int().min(1).max(10).default(10),
  toolTimeoutMs: z.number().int().min(1_000).default(660_000),
  llmIdleTimeoutMs: z.number().int().min(1_000).default(120_000),
  /** A tools or llm worker silent this long (heartbeats included) counts as dead: its request is sent again. */
  silenceMs: z.number().int().min(300).default(DEFAULT_SILENCE_MS),
  /** How long llm and tools requests are retried after no replica answered or one died, before the turn fails. */
  retryWindowMs: z.number().int().min(0).default(60_000),
  /** A session with no turn running keeps its lease and in-memory state this long, so its next message finds it warm; 0 releases at once. */
  idleReleaseMs: z.number().int().min(0).default(300_000),
  /** Start a new session's sandbox at creation, so the first tool call finds it running. */
  prewarmSandbox: z.boolean().default(true),
  temperature: z.number().min(0).max(2).default(0),
  maxTokens: z.number().int().min(1).default(8_192),
  chunkPack: z.number().int().min(1).default(64),
  /** How long an approval waits for a person before it ends as unavailable; 0 = no one can answer, so escalations are denied at once. */
  approvalTimeoutMs: z.number().int().min(0).max(7 * 24 * 3_600_000).default(600_000),
  /** Spending limit per tenant in USD (tenants not listed have none). */
  tenantBudgets: z.record(z.string(), z.number().positive()).default({}),
  logReplicas: z.number().int().min(1).default(1),
  /** Size cap of the whole log stream (operator `retention.log_max_bytes`); absent = none. Applied to an existing stream too. */
  logMaxBytes: z.number().int().positive().optional(),
  /** Log messages older than this are removed by JetStream (operator `retention.log_max_age_days`); absent = kept. */
  logMaxAgeDays: z.number().positive().optional(),
  /** Tool results over this many UTF-8 bytes go whole to the object store; the model sees a preview and how to read the rest. */
  spillBytes: z.number().int().min(1_000).max(800_000).default(50_000),
  /** Characters at the head of a spilled result that the model sees. */
  spillPreviewChars: z.number().int().min(100).default(4_096),
  /** Context window in tokens of a model not listed in `contextWindows`. */
  contextWindowTokens: z.number().int().min(1_000).default(128_000),
  /** Context window in tokens by model reference (`<provider>:<model>`). */
  contextWindows: z.record(z.string(), z.number().int().min(1_000)).default({}),
  /** Prune old large tool results once the request reaches this fraction of the window. */
  pruneAt: z.number().gt(0).max(1).default(0.5),
  /** What a pruned tool result keeps: its first and last characters. */
  pruneHeadChars: z.number().int().min(0).default(4_096),
  pruneTailChars: z.number().int().min(0).default(1_024),
  /** The most recent part of the conversation, as a fraction of the window, is never pruned. */
  pruneKeep: z.number().min(0).max(1).default(0.3),
  /** Skip a prune that saves less than this fraction of the window (it would break the prefix cache for little). */
  pruneMinimum: z.number().min(0).max(1).default(0.08),
  /** Summarize the conversation once the request, after pruning, still reaches this fraction of the window. */
  summarizeAt: z.number().gt(0).max(1).default(0.8),
}).refine((o) => o.pruneAt <= o.summarizeAt, { message: "pruneAt must not exceed summarizeAt: pruning is the cheaper step and comes first", path: ["pruneAt"] });

/** Options of `startLoopService` (all but natsUrl have defaults). */
export type LoopOptions = z.input<typeof Options> & {
  /** NATS user and TLS files (`commonConfig().natsAuth`); none for an open NATS. */
  natsAuth?: BusAuth;
};

/** A running loop service. */
export interface LoopService {
  /** This process's owner id in the lease bucket. */
  readonly owner: string;
  /** The runtime of a session this process owns right now (tests and debugging). */
  session(sessionId: string, tenant?: string): SessionRuntime | undefined;
  stop(): Promise<void>;
}

/**
 * Starts a loop replica: serves session creation, user messages, approval decisions and sandbox mode changes, runs
 * turns, and takes over sessions whose owner stopped renewing its lease (crash recovery).
 */
export async function startLoopService(options: LoopOptions): Promise<LoopService> {
  const parsed = Options.safeParse(options);
  if (!parsed.success) throw new TackError("config.invalid", `loop options: ${parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`);
  const o = parsed.data;
  const log = logger("loop");
  const bus = await Bus.connect({ url: o.natsUrl, namespace: o.namespace, name: "tack-loop", ...options.natsAuth });
  await ensureLogStream(bus.nc, bus.names, {
    replicas: o.logReplicas,
    // Always given, so that limits removed from the configuration are lifted from the stream too.
    limits: { maxBytes: o.logMaxBytes, maxAgeMs: o.logMaxAgeDays === undefined ? undefined : o.logMaxAgeDays * 86_400_000 },
  });
  const owner = `loop-${hostname()}-${process.pid}-${randomBytes(3).toString("hex")}`;
  const leases = await Leases.open(bus.nc, bus.names, owner, o.leaseTtlMs, { replicas: o.logReplicas });
  const budgets = new Budgets(bus, o.tenantBudgets, { replicas: o.logReplicas });
  const settings: LoopSettings = {
    stepLimit: o.stepLimit, parallelToolCalls: o.parallelToolCalls, toolTimeoutMs: o.toolTimeoutMs, llmIdleTimeoutMs: o.llmIdleTimeoutMs,
    temperature: o.temperature, maxTokens: o.maxTokens, chunkPack: o.chunkPack, approvalTimeoutMs: o.approvalTimeoutMs,
    silenceMs: o.silenceMs, retry: retryPolicy({ windowMs: o.retryWindowMs, baseDelayMs: 250, maxDelayMs: 5_000 }, "config.invalid"),
    compaction: {
      spillBytes: o.spillBytes, spillPreviewChars: o.spillPreviewChars, contextWindowTokens: o.contextWindowTokens, contextWindows: o.contextWindows,
      pruneAt: o.pruneAt, pruneHeadChars: o.pruneHeadChars, pruneTailChars: o.pruneTailChars, pruneKeep: o.pruneKeep, pruneMinimum: o.pruneMinimum,
      summarizeAt: o.summarizeAt,
    },
  };
  // Created at the first spill, so that a namespace that never spills has no bucket to clean up.
  let spillBucket: Promise<SpillBucket> | undefined;
  const spills = () => {
    spillBucket ??= SpillBucket.ensure(bus.nc, bus.names, { replicas: o.logReplicas }).catch((error: unknown) => {
      spillBucket = undefined;
      throw error;
    });
    return spillBucket;
  };
  const owned = new Map<string, { runtime: SessionRuntime; subscriptions: Subscription[] }>();
  const acquiring = new Map<string, Promise<SessionRuntime>>();
  /** Sessions this process is deleting: never claimed again meanwhile (the lease is already ours). */
  const deleting = new Set<string>();
  let stopped = false;

  /** Idle sessions waiting for their release (warm: their next message needs no claim and no log read). */
  const idleTimers = new Map<string, NodeJS.Timeout>();
  const unschedule = (key: string) => {
    clearTimeout(idleTimers.get(key));
    idleTimers.delete(key);
  };
  /**
   * Stops serving a session and gives its lease back, unless the runtime gave the session up (lost
   * lease, broken writer): that lease is left to expire, so that a replica's scan takes the session
   * over and resumes a turn it may have been in. Deleted, no scan would ever see it again.
   */
  const release = (runtime: SessionRuntime) => {
    const key = Leases.key(runtime.tenant, runtime.sessionId);
    const entry = owned.get(key);
    if (!entry || entry.runtime !== runtime || runtime.working) return;
    const gaveUp = runtime.lost;
    unschedule(key);
    owned.delete(key);
    for (const subscription of entry.subscriptions) subscription.unsubscribe();
    runtime.dispose();
    if (!gaveUp) void leases.release(runtime.lease);
  };
  /**
   * Called when a session has nothing running: it stays warm (lease renewed, projection kept)
   * for `idleReleaseMs`, then is released. A lost lease or an empty session is released at once (a lost one left to expire).
   */
  const forget = (runtime: SessionRuntime) => {
    const key = Leases.key(runtime.tenant, runtime.sessionId);
    const entry = owned.get(key);
    if (!entry || entry.runtime !== runtime || runtime.working) return;
    if (runtime.lost || !runtime.meta || o.idleReleaseMs === 0 || stopped) return release(runtime);
    unschedule(key);
    const timer = setTimeout(() => {
      idleTimers.delete(key);
      release(runtime);
    }, o.idleReleaseMs);
    timer.unref();
    idleTimers.set(key, timer);
  };

  const submitOn = (runtime: SessionRuntime) => async (req: SubmitMessageRequest): Promise<SubmitMessageResponse> => {
    if (!req.text.trim()) throw new TackError("loop.empty_message", "the message text is empty; send the task as text");
    return SubmitMessageResponse.fromPartial(await runtime.submit(req.text));
  };

  /** Answers a call waiting for a person: an approval, a question or a plan (`kind`). */
  const decideOn = (runtime: SessionRuntime) => async (req: DecideApprovalRequest): Promise<DecideApprovalResponse> => {
    const kind = req.kind || "approval";
    if (!["approval", "question", "plan"].includes(kind)) {
      throw new TackError("loop.bad_decision", `kind ${JSON.stringify(kind)} is unknown; answer an approval, a question or a plan`);
    }
    const decisions: readonly string[] = kind === "approval" ? DECISIONS : kind === "plan" ? PLAN_DECISIONS : [""];
    if (!decisions.includes(req.decision)) {
      throw new TackError("loop.bad_decision", kind === "question"
        ? "a question is answered with answers, not a decision"
        : `decision ${JSON.stringify(req.decision)} is unknown; answer ${decisions.join(" or ")}`);
    }
    if (!req.decidedBy) throw new TackError("loop.bad_decision", "decided_by is empty; say who decided (the caller's tenant or user)");
    if (!runtime.meta || (req.tenant || "local") !== runtime.tenant) {
      throw new TackError("loop.unknown_session", `session ${req.sessionId} does not exist; create it first`);
    }
    // The owner subject opens before recovery has parked the session's waiting calls again: let recovery finish first.
    await acquiring.get(Leases.key(runtime.tenant, runtime.sessionId))?.catch(() => undefined);
    // The key that decided (the person), as the gateway authenticated it; logged beside the tenant.
    const key: DecidingKey = { name: req.decidedByKey ?? "", id: req.decidedByKeyId ?? "" };
    if (kind === "question") return { seq: await runtime.answerQuestion(req.callId, req.answers?.answers ?? [], req.decidedBy, key) };
    if (kind === "plan") return { seq: await runtime.decidePlan(req.callId, req.decision as "approve" | "reject", req.feedback ?? "", req.decidedBy, key) };
    return { seq: await runtime.decide(req.callId, req.decision as Decision, req.decidedBy, key) };
  };

  const modeOn = (runtime: SessionRuntime) => async (req: SetSandboxModeRequest): Promise<SetSandboxModeResponse> => {
    if (!runtime.meta || (req.tenant || "local") !== runtime.tenant) {
      throw new TackError("loop.unknown_session", `session ${req.sessionId} does not exist; create it first`);
    }
    if (!req.changedBy) throw new TackError("loop.bad_sandbox_mode", "changed_by is empty; say who changes the mode (the caller's tenant or user)");
    await acquiring.get(Leases.key(runtime.tenant, runtime.sessionId))?.catch(() => undefined);
    switch (req.setting || "sandbox") {
      case "sandbox":
        return { seq: await runtime.setSandboxMode(req.mode, req.changedBy) };
      case "plan":
        if (req.mode !== "on" && req.mode !== "off") throw new TackError("loop.bad_plan_mode", `plan mode ${JSON.stringify(req.mode)} is neither on nor off`);
        return { seq: await runtime.setPlanMode(req.mode === "on", req.changedBy) };
      case "session":
        return { seq: await runtime.setSessionMode(req.mode, req.changedBy) };
      default:
        throw new TackError("loop.bad_sandbox_mode", `setting ${JSON.stringify(req.setting)} is unknown; change the sandbox, plan or session mode`);
    }
  };

  /** Stops the running turn of a session this process owns (`stopTurn`); `cancelled: false` when none runs. */
  const cancelOn = (runtime: SessionRuntime) => async (req: CancelTurnRequest): Promise<CancelTurnResponse> => {
    if ((req.tenant || "local") !== runtime.tenant) throw new TackError("loop.unknown_session", `session ${req.sessionId} does not exist; create it first`);
    if (!runtime.busy) return { cancelled: false, turn: 0 };
    const turn = runtime.events.filter((e) => e.payload?.$case === "turnStart").length;
    await runtime.stopTurn(req.cancelledBy || "api");
    return { cancelled: true, turn };
  };

  /**
   * Compacts a session this process owns now (`compact`); refused while a turn runs. Afterwards
   * the session stays warm for `idleReleaseMs` again, as after a turn.
   */
  const compactOn = (runtime: SessionRuntime) => async (req: CompactSessionRequest): Promise<CompactSessionResponse> => {
    try {
      if (!runtime.meta || (req.tenant || "local") !== runtime.tenant) {
        throw new TackError("loop.unknown_session", `session ${req.sessionId} does not exist; create it first`);
      }
      // Recovery may start a turn (which then refuses the compaction as busy): let it get that far first.
      await acquiring.get(Leases.key(runtime.tenant, runtime.sessionId))?.catch(() => undefined);
      return CompactSessionResponse.fromPartial(await runtime.compact(req.compactedBy || "api", req.instructions));
    } finally {
      // Warm again for idleReleaseMs, as after a turn; a session that does not exist is let go at once.
      forget(runtime);
    }
  };

  /**
   * Deletes a session with everything kept for it (`deleteSessionData`) under its lease: taken
   * over from this process's idle runtime, or claimed. Refused (`loop.busy`) while a turn runs or
   * a sandbox mode change is checked here; a lease another loop keeps renewing past the wait is
   * `loop.session_busy`. The running turn is not cancelled: see docs/decisions/0006-deletion.md.
   */
  const remove = async (tenant: string, sessionId: string, deletedBy: string): Promise<DeleteSessionResponse> => {
    if (!deletedBy) throw new TackError("loop.bad_request", "deleted_by is empty; say who deletes the session (an API key id or retention)");
    const key = Leases.key(tenant, sessionId);
    const busy = (what: string) => new TackError("loop.busy", `session ${sessionId} ${what}; wait for its turn/end (answer or reject a pending approval to end it sooner), then delete it`, { retryable: true });
    if (deleting.has(key)) throw busy("is being deleted by another request");
    // A claim in flight may be about to resume an interrupted turn: let it decide first.
    await acquiring.get(key)?.catch(() => undefined);
    const entry = owned.get(key);
    if (entry?.runtime.working) throw busy("is running a turn or changing its sandbox mode");
    if (deleting.has(key)) throw busy("is being deleted by another request");
    deleting.add(key);
    try {
      let lease: Lease;
      if (entry) {
        // Idle but still ours: stop serving it, keep the lease for the deletion.
        unschedule(key);
        owned.delete(key);
        for (const subscription of entry.subscriptions) subscription.unsubscribe();
        entry.runtime.dispose();
        lease = entry.runtime.lease;
      } else {
        lease = (await leases.claim(key, o.leaseTtlMs + 1_000)).lease;
      }
      try {
        const deleted = await deleteSessionData({ bus, leases }, { tenant, sessionId }, lease);
        log.info("session deleted", { session: sessionId, tenant, deleted_by: deletedBy, ...deleted });
        return deleted;
      } catch (error) {
        // Released rather than left to expire, so no replica recovers (and resumes) what is half deleted.
        await leases.release(lease);
        throw error;
      }
    } finally {
      deleting.delete(key);
    }
  };

  const deleteOn = (runtime: SessionRuntime) => async (req: DeleteSessionRequest): Promise<DeleteSessionResponse> => {
    if ((req.tenant || "local") !== runtime.tenant) throw new TackError("loop.unknown_session", `session ${req.sessionId} does not exist; create it first`);
    return remove(runtime.tenant, runtime.sessionId, req.deletedBy);
  };

  /** Claims a session (waiting out another owner's lease), loads it and runs recovery. */
  const acquire = (tenant: string, sessionId: string, waitMs: number): Promise<SessionRuntime> => {
    const key = Leases.key(tenant, sessionId);
    if (deleting.has(key)) return Promise.reject(new TackError("loop.session_busy", `session ${sessionId} is being deleted`, { retryable: true }));
    const have = owned.get(key);
    if (have) {
      // Warm: in use again, so not released while it works (the turn's end schedules the release anew).
      unschedule(key);
      return Promise.resolve(have.runtime);
    }
    const inflight = acquiring.get(key);
    if (inflight) return inflight;
    const p = (async () => {
      const { lease, previousOwner } = await leases.claim(key, waitMs);
      let runtime: SessionRuntime;
      try {
        runtime = await SessionRuntime.load({ bus, leases, settings, log: log.child({ session: sessionId, tenant }), spills, budgets, onIdle: forget }, tenant, sessionId, lease);
      } catch (error) {
        // Reading the log or opening its writer failed (NATS restarting, a writer still finishing):
        // the lease is left to expire rather than deleted, so the recovery scan (here or on another
        // replica) tries again. A deleted lease is no longer scanned, which stranded a session whose
        // turn was interrupted (the chaos test caught one).
        log.warn("session not loaded; its lease is left to expire so that recovery tries again", { session: sessionId, tenant, error: (error as Error).message });
        throw error;
      }
      const subscriptions = [
        bus.serve(bus.names.loopSessionSubmit(sessionId), "loop-owner", SubmitMessageRequest, SubmitMessageResponse, submitOn(runtime)),
        bus.serve(bus.names.loopSessionDecide(sessionId), "loop-owner", DecideApprovalRequest, DecideApprovalResponse, decideOn(runtime)),
        bus.serve(bus.names.loopSessionMode(sessionId), "loop-owner", SetSandboxModeRequest, SetSandboxModeResponse, modeOn(runtime)),
        bus.serve(bus.names.loopSessionDelete(sessionId), "loop-owner", DeleteSessionRequest, DeleteSessionResponse, deleteOn(runtime)),
        bus.serve(bus.names.loopSessionCancel(sessionId), "loop-owner", CancelTurnRequest, CancelTurnResponse, cancelOn(runtime)),
        bus.serve(bus.names.loopSessionCompact(sessionId), "loop-owner", CompactSessionRequest, CompactSessionResponse, compactOn(runtime)),
      ];
      owned.set(key, { runtime, subscriptions });
      if (runtime.meta) {
        const recovered = await runtime.recover(previousOwner);
        if (recovered) log.info("session recovered", { session: sessionId, previous_owner: previousOwner });
      }
      return runtime;
    })().finally(() => acquiring.delete(key));
    acquiring.set(key, p);
    return p;
  };

  bus.serve(bus.names.loopCreate, "loop", CreateSessionRequest, CreateSessionResponse, async (req) => {
    const sessionId = req.sessionId || `s${Date.now().toString(36)}${randomBytes(4).toString("hex")}`;
    const tenant = req.tenant || "local";
    assertToken("session id", sessionId);
    assertToken("tenant", tenant);
    const mode = req.mode || "standard";
    const sandboxMode = req.sandboxMode || "workspace-write";
    assertSandboxMode(sandboxMode);
    const approvalPolicy = req.approvalPolicy || "ask";
    if (!(APPROVAL_POLICIES as readonly string[]).includes(approvalPolicy)) {
      throw new TackError("loop.bad_approval_policy", `approval policy ${JSON.stringify(approvalPolicy)} is unknown; use one of: ${APPROVAL_POLICIES.join(", ")}`);
    }
    if (!(req.budgetUsd >= 0) || !Number.isFinite(req.budgetUsd)) {
      throw new TackError("loop.bad_budget", `budget ${req.budgetUsd} is not a positive amount of US dollars; leave it out (or 0) for no budget`);
    }
    if (!req.model) throw new TackError("loop.missing_model", "no model given; use e.g. deepseek:deepseek-chat or scripted:/path/script.json");
    if (!req.workspace.startsWith("/")) throw new TackError("loop.bad_workspace", `workspace ${JSON.stringify(req.workspace)} must be an absolute path`);
    // The tools service owns the modes: it lists the tools of each, and refuses one it does not have.
    await assertToolsMode(bus, mode);
    // Fail at creation, not at the first step, when the model cannot be used (unknown, no key, bad script).
    await bus.request(bus.names.llmCheck, CheckModelRequest, { model: req.model }, CheckModelResponse, { timeoutMs: 10_000 }).catch((error: unknown) => {
      const e = TackError.from(error);
      if (e.code === "bus.no_responders" || e.code === "bus.timeout") {
        throw new TackError("loop.llm_unavailable", `no llm service answers (${e.message}); start Tack with \`tack up\``, { retryable: true, cause: e });
      }
      throw e;
    });
    const runtime = await acquire(tenant, sessionId, 0);
    try {
      await runtime.create({
        sessionId, tenant, mode, model: req.model, workspace: req.workspace, formatVersion: FORMAT_VERSION, title: req.title, budgetUsd: req.budgetUsd,
      }, sandboxMode, approvalPolicy, req.planMode ?? false);
    } finally {
      forget(runtime);
    }
    if (o.prewarmSandbox) {
      // The container starts (or is claimed from the pool) while the user writes the first
      // message, not on the first tool call's critical path. Best effort: the tools ensure anyway.
      // So do the reads of the first turn (hooks, tools, rules, skills, MCP), some in that container.
      runtime.prefetchFirstTurn();
      bus.request(bus.names.sandboxEnsure, EnsureSandboxRequest, { sessionId, tenant, workspace: req.workspace, mode: sandboxMode }, EnsureSandboxResponse, { timeoutMs: 120_000, silenceMs: DEFAULT_SILENCE_MS })
        .catch((error: unknown) => log.warn("sandbox pre-warm failed", { session: sessionId, code: TackError.from(error).code, error: (error as Error).message }));
    }
    return { sessionId, subject: bus.names.logSubject(tenant, sessionId) };
  });

  /**
   * A queue-group request for a session another replica keeps warm goes to that owner's own
   * subject (it holds the lease, so claiming would only wait it out); undefined when no other
   * process serves the session, so the caller claims it.
   */
  const viaOwner = async <Req, Res>(tenant: string, sessionId: string, subject: string, reqCodec: Codec<Req>, req: Req, resCodec: Codec<Res>): Promise<Res | undefined> => {
    const key = Leases.key(tenant, sessionId);
    if (owned.has(key) || acquiring.has(key) || deleting.has(key)) return undefined;
    try {
      return await bus.request(subject, reqCodec, req, resCodec, { timeoutMs: 5 * 60_000, silenceMs: DEFAULT_SILENCE_MS });
    } catch (error) {
      if (error instanceof TackError && (error.code === "bus.no_responders" || error.code === "bus.worker_lost")) return undefined;
      throw error;
    }
  };

  bus.serve(bus.names.loopSubmit, "loop", SubmitMessageRequest, SubmitMessageResponse, async (req) => {
    const tenant = req.tenant || "local";
    assertToken("session id", req.sessionId);
    assertToken("tenant", tenant);
    const forwarded = await viaOwner(tenant, req.sessionId, bus.names.loopSessionSubmit(req.sessionId), SubmitMessageRequest, req, SubmitMessageResponse);
    if (forwarded) return forwarded;
    const runtime = await acquire(tenant, req.sessionId, o.leaseTtlMs + 1_000);
    try {
      return await submitOn(runtime)(req);
    } catch (error) {
      // A message for a session that does not exist (e.g. one just deleted) must not keep its lease renewed.
      if (!runtime.meta && !runtime.working) forget(runtime);
      throw error;
    }
  });

  // A decision for a session no process owns: claim it like a message does; recovery parks its
  // pending approvals again, so the decision finds its call waiting.
  bus.serve(bus.names.loopDecide, "loop", DecideApprovalRequest, DecideApprovalResponse, async (req) => {
    const tenant = req.tenant || "local";
    assertToken("session id", req.sessionId);
    assertToken("tenant", tenant);
    const forwarded = await viaOwner(tenant, req.sessionId, bus.names.loopSessionDecide(req.sessionId), DecideApprovalRequest, req, DecideApprovalResponse);
    if (forwarded) return forwarded;
    const runtime = await acquire(tenant, req.sessionId, o.leaseTtlMs + 1_000);
    try {
      return await decideOn(runtime)(req);
    } finally {
      forget(runtime);
    }
  });

  // A mode change for a session no process owns: claim it like a message does (recovery may
  // start a turn, which then refuses the change as busy).
  bus.serve(bus.names.loopMode, "loop", SetSandboxModeRequest, SetSandboxModeResponse, async (req) => {
    const tenant = req.tenant || "local";
    assertToken("session id", req.sessionId);
    assertToken("tenant", tenant);
    const forwarded = await viaOwner(tenant, req.sessionId, bus.names.loopSessionMode(req.sessionId), SetSandboxModeRequest, req, SetSandboxModeResponse);
    if (forwarded) return forwarded;
    const runtime = await acquire(tenant, req.sessionId, o.leaseTtlMs + 1_000);
    try {
      return await modeOn(runtime)(req);
    } finally {
      forget(runtime);
    }
  });

  // A deletion of a session no process owns: claim its lease (without loading or recovering it) and delete.
  bus.serve(bus.names.loopDelete, "loop", DeleteSessionRequest, DeleteSessionResponse, async (req) => {
    const tenant = req.tenant || "local";
    assertToken("session id", req.sessionId);
    assertToken("tenant", tenant);
    const forwarded = await viaOwner(tenant, req.sessionId, bus.names.loopSessionDelete(req.sessionId), DeleteSessionRequest, req, DeleteSessionResponse);
    if (forwarded) return forwarded;
    return remove(tenant, req.sessionId, req.deletedBy);
  });

  // A new session from a copy of another's log (a fork at a turn boundary, an imported bundle):
  // written by this process as the new log's single writer, under its lease; nothing runs again.
  bus.serve(bus.names.loopCopy, "loop", CopySessionRequest, CopySessionResponse, async (req) => {
    const sessionId = req.sessionId || `s${Date.now().toString(36)}${randomBytes(4).toString("hex")}`;
    const tenant = req.tenant || "local";
    assertToken("session id", sessionId);
    assertToken("tenant", tenant);
    const bad = (why: string) => new TackError("loop.bad_copy", `cannot copy the session: ${why}`);
    const events = req.events;
    const first = events[0]?.payload;
    if (first?.$case !== "sessionCreated") throw bad("the events must start with session/created");
    let openTurn = 0;
    for (const [i, event] of events.entries()) {
      if (event.seq !== i + 1) throw bad(`event ${i + 1} has seq ${event.seq}; the events must run seq 1..${events.length} without gaps`);
      if (!event.payload) throw bad(`event ${event.seq} (${JSON.stringify(event.type)}) has no payload this loop knows`);
      if (event.payload.$case === "turnStart") openTurn = event.payload.value.turn;
      if (event.payload.$case === "turnEnd") openTurn = 0;
    }
    if (openTurn !== 0) throw bad(`turn ${openTurn} has no turn/end; copy up to a turn boundary (an ended turn)`);
    if (req.workspace && !req.workspace.startsWith("/")) throw bad(`workspace ${JSON.stringify(req.workspace)} must be an absolute path`);
    // Spilled objects keep their call ids under the new session's prefix; only the source's own are taken.
    const from = `${first.value.tenant}.${first.value.sessionId}.`;
    const rename = (name: string) => {
      if (!name.startsWith(from)) throw bad(`object ${JSON.stringify(name)} is not one of the source session's (${from}…)`);
      return `${tenant}.${sessionId}.${name.slice(from.length)}`;
    };
    const drafts = events.map((event: Event) => {
      let payload = event.payload!;
      if (payload.$case === "sessionCreated") {
        payload = { $case: "sessionCreated", value: { ...payload.value, sessionId, tenant, ...(req.workspace ? { workspace: req.workspace } : {}) } };
      } else if (payload.$case === "toolResult") {
        const value = payload.value;
        payload = { $case: "toolResult", value: { ...value, spillObject: value.spillObject ? rename(value.spillObject) : "", images: value.images.map((image) => ({ ...image, object: image.object ? rename(image.object) : "" })) } };
      }
      return { payload, source: event.source, surface: event.surface };
    });
    const objects = req.objects.map((object) => ({ name: rename(object.name), data: object.data }));
    const runtime = await acquire(tenant, sessionId, 0);
    try {
      if (runtime.events.length > 0) throw new TackError("loop.session_exists", `session ${sessionId} already exists; choose another id or leave it empty`);
      if (objects.length > 0) {
        const bucket = await spills();
        for (const object of objects) await bucket.put({ tenant, sessionId }, object.name.slice(`${tenant}.${sessionId}.`.length), object.data);
      }
      await runtime.append(...drafts);
    } finally {
      forget(runtime);
    }
    log.info("session copied", { session: sessionId, tenant, from: first.value.sessionId, events: drafts.length, objects: objects.length, copied_by: req.copiedBy });
    return { sessionId, subject: bus.names.logSubject(tenant, sessionId), events: drafts.length };
  });

  // A cancellation for a session no process owns: a turn runs only in its owner, so there is nothing to stop.
  bus.serve(bus.names.loopCancel, "loop", CancelTurnRequest, CancelTurnResponse, async (req) => {
    const tenant = req.tenant || "local";
    assertToken("session id", req.sessionId);
    assertToken("tenant", tenant);
    const forwarded = await viaOwner(tenant, req.sessionId, bus.names.loopSessionCancel(req.sessionId), CancelTurnRequest, req, CancelTurnResponse);
    return forwarded ?? { cancelled: false, turn: 0 };
  });

  // A compaction of a session no process owns: claim it like a message does (recovery may start
  // a turn, which then refuses the compaction as busy).
  bus.serve(bus.names.loopCompact, "loop", CompactSessionRequest, CompactSessionResponse, async (req) => {
    const tenant = req.tenant || "local";
    assertToken("session id", req.sessionId);
    assertToken("tenant", tenant);
    const forwarded = await viaOwner(tenant, req.sessionId, bus.names.loopSessionCompact(req.sessionId), CompactSessionRequest, req, CompactSessionResponse);
    if (forwarded) return forwarded;
    return compactOn(await acquire(tenant, req.sessionId, o.leaseTtlMs + 1_000))(req);
  });

    // Take over sessions whose owner stopped renewing (crashed or partitioned away).
  const scan = async () => {
    for (const state of await leases.all()) {
      if (stopped) return;
      // An expired lease of our own that no runtime here holds is one this process gave up (lost lease, broken writer): taken over like any other.
      if (state.expiresAt > Date.now() || owned.has(state.key)) continue;
      const dot = state.key.indexOf(".");
      const runtime = await acquire(state.key.slice(0, dot), state.key.slice(dot + 1), 0).catch(() => undefined);
      if (runtime) forget(runtime);
    }
  };
  let scanning = false;
  const scanner = setInterval(() => {
    if (scanning || stopped) return;
    scanning = true;
    scan().catch((error: unknown) => log.warn("recovery scan failed", { error: (error as Error).message })).finally(() => { scanning = false; });
  }, Math.max(100, Math.floor(o.leaseTtlMs / 2)));
  scanner.unref();
  // Make sure the server knows our subscriptions before anyone is told we are up.
  await bus.nc.flush();
  // Discoverable as micro-service tack-loop ($SRV.PING/INFO/STATS), with its lease owner id.
  await registerMicro(bus, { service: "loop", description: "runs sessions: turns, steps, tool calls, recovery", metadata: { owner } });

  return {
    owner,
    session: (sessionId, tenant = "local") => owned.get(Leases.key(tenant, sessionId))?.runtime,
    async stop() {
      stopped = true;
      clearInterval(scanner);
      for (const timer of idleTimers.values()) clearTimeout(timer);
      idleTimers.clear();
      for (const { runtime, subscriptions } of owned.values()) {
        for (const subscription of subscriptions) subscription.unsubscribe();
        runtime.dispose();
        // A session mid-turn keeps its lease until it expires, so another replica recovers it.
        if (!runtime.busy) await leases.release(runtime.lease);
      }
      owned.clear();
      await bus.close();
    },
  };
}
