import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { assertToken, Bus, DEFAULT_SILENCE_MS, endpoint, LlmRpc, LoopRpc, retryPolicy, SandboxRpc, startService, TackError, type BusAuth } from "@tack/bus";
import { ensureLogStream, FORMAT_VERSION, SpillBucket } from "@tack/log";
import type { CopySessionRequest, CopySessionResponse, CreateSessionRequest, CreateSessionResponse } from "@tack/proto";
import { logger } from "@tack/telemetry";
import { z } from "zod";
import { APPROVAL_POLICIES } from "./approvals.js";
import { Budgets } from "./budget.js";
import { sessionCopy } from "./copy.js";
import { Leases } from "./lease.js";
import { assertSandboxMode, assertToolsMode } from "./mode.js";
import { Ownership } from "./ownership.js";
import { SessionRouter } from "./router.js";
import { sessionRoutes } from "./routes.js";
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
  const ownership: Ownership = new Ownership({
    bus, leases, log, leaseTtlMs: o.leaseTtlMs, idleReleaseMs: o.idleReleaseMs,
    load: (tenant, sessionId, lease, onIdle) => SessionRuntime.load({ bus, leases, settings, log: log.child({ session: sessionId, tenant }), spills, budgets, onIdle }, tenant, sessionId, lease),
    serve: (runtime) => router.serveOwned(runtime),
  });
  const router = new SessionRouter(bus, sessionRoutes(ownership));

  const createSession = async (req: CreateSessionRequest): Promise<CreateSessionResponse> => {
    const sessionId = req.sessionId || newSessionId();
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
    await bus.request(LlmRpc.CheckModel, { model: req.model }, { timeoutMs: 10_000 }).catch((error: unknown) => {
      const e = TackError.from(error);
      if (e.code === "bus.no_responders" || e.code === "bus.timeout") {
        throw new TackError("loop.llm_unavailable", `no llm service answers (${e.message}); start Tack with \`tack up\``, { retryable: true, cause: e });
      }
      throw e;
    });
    const runtime = await ownership.acquire(tenant, sessionId, 0);
    try {
      await runtime.create({
        sessionId, tenant, mode, model: req.model, workspace: req.workspace, formatVersion: FORMAT_VERSION, title: req.title, budgetUsd: req.budgetUsd,
      }, sandboxMode, approvalPolicy, req.planMode ?? false);
    } finally {
      ownership.forget(runtime);
    }
    if (o.prewarmSandbox) {
      // The container starts (or is claimed from the pool) while the user writes the first
      // message, not on the first tool call's critical path. Best effort: the tools ensure anyway.
      // So do the reads of the first turn (hooks, tools, rules, skills, MCP), some in that container.
      runtime.prefetchFirstTurn();
      bus.request(SandboxRpc.EnsureSandbox, { sessionId, tenant, workspace: req.workspace, mode: sandboxMode }, { timeoutMs: 120_000, silenceMs: DEFAULT_SILENCE_MS })
        .catch((error: unknown) => log.warn("sandbox pre-warm failed", { session: sessionId, code: TackError.from(error).code, error: (error as Error).message }));
    }
    return { sessionId, subject: bus.names.logSubject(tenant, sessionId) };
  };

  // A new session from a copy of another's log (a fork at a turn boundary, an imported bundle):
  // written by this process as the new log's single writer, under its lease; nothing runs again.
  const copySession = async (req: CopySessionRequest): Promise<CopySessionResponse> => {
    const sessionId = req.sessionId || newSessionId();
    const tenant = req.tenant || "local";
    assertToken("session id", sessionId);
    assertToken("tenant", tenant);
    const { drafts, objects, from } = sessionCopy(req, tenant, sessionId);
    const runtime = await ownership.acquire(tenant, sessionId, 0);
    try {
      if (runtime.events.length > 0) throw new TackError("loop.session_exists", `session ${sessionId} already exists; choose another id or leave it empty`);
      if (objects.length > 0) {
        const bucket = await spills();
        for (const object of objects) await bucket.put({ tenant, sessionId }, object.name.slice(`${tenant}.${sessionId}.`.length), object.data);
      }
      await runtime.append(...drafts);
    } finally {
      ownership.forget(runtime);
    }
    log.info("session copied", { session: sessionId, tenant, from, events: drafts.length, objects: objects.length, copied_by: req.copiedBy });
    return { sessionId, subject: bus.names.logSubject(tenant, sessionId), events: drafts.length };
  };

  // Serves the rpcs, then registers as micro-service tack-loop ($SRV.PING/INFO/STATS) with its lease owner id.
  const service = await startService({
    bus, name: "loop", description: "runs sessions: turns, steps, tool calls, recovery", metadata: { owner },
    endpoints: () => [endpoint(LoopRpc.CreateSession, createSession), endpoint(LoopRpc.CopySession, copySession), ...router.endpoints(ownership, o.leaseTtlMs)],
  });

  // Take over sessions whose owner stopped renewing (crashed or partitioned away).
  let scanning = false;
  let stopped = false;
  const scanner = setInterval(() => {
    if (scanning || stopped) return;
    scanning = true;
    ownership.scan().catch((error: unknown) => log.warn("recovery scan failed", { error: (error as Error).message })).finally(() => { scanning = false; });
  }, Math.max(100, Math.floor(o.leaseTtlMs / 2)));
  scanner.unref();

  return {
    owner,
    session: (sessionId, tenant = "local") => ownership.runtime(tenant, sessionId),
    async stop() {
      stopped = true;
      clearInterval(scanner);
      // No new requests; those in flight (a claim, a creation) finish before the sessions are let go.
      await service.stop();
      await ownership.stop();
      await bus.close();
    },
  };
}

/** A new session's id when the caller gives none: time-ordered, with 32 random bits. */
function newSessionId(): string {
  return `s${Date.now().toString(36)}${randomBytes(4).toString("hex")}`;
}
