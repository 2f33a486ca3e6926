import { TackError } from "./errors.js";

/**
 * Every subject, stream and bucket name of one Tack deployment, derived from its namespace.
 * Tests use a unique namespace so that they never meet another run's services on a shared NATS.
 * Rpcs are served and asked through the descriptors generated from the proto services
 * (`LoopRpc`, `SandboxRpc`, …; docs/decisions/0022-bus-descriptors.md); their subjects stay
 * here, equal to the descriptors' (a test checks), until the loop and the gateway use those.
 */
export interface Names {
  readonly namespace: string;
  readonly llmComplete: string;
  readonly llmCheck: string;
  readonly llmEstimate: string;
  readonly llmCount: string;
  readonly toolsCall: string;
  readonly toolsList: string;
  /** State of web_search's providers (one token under `tools.`, like the others, so the tools user's `<ns>.tools.*` grant covers it). */
  readonly toolsWebHealth: string;
  /** The rules files (AGENTS.md, CLAUDE.md) of workspace folders, read in the session's sandbox for the loop. */
  readonly toolsRules: string;
  /** The workspace's hooks files, read in the session's sandbox for the loop. */
  readonly toolsHookConfig: string;
  /** One hook command run in the session's sandbox for the loop. */
  readonly toolsHookRun: string;
  /** Skills of a workspace (catalog, one skill's body, re-reading a root after a write), served by the skills service (queue group `skills`). */
  readonly skillsCatalog: string;
  readonly skillsLoad: string;
  readonly skillsInvalidate: string;
  /** The MCP bridge: the tools of the configured MCP servers and their state, and calls to them (queue group `mcp`). */
  readonly mcpList: string;
  readonly mcpCall: string;
  readonly sandboxEnsure: string;
  readonly sandboxExec: string;
  readonly sandboxRelease: string;
  /** The live processes of a session's sandbox container, listed by its exec agent (queue group `sandbox`). */
  readonly sandboxProcesses: string;
  /** Managed workspaces: create (empty or from an archive), export as an archive, delete; served by the sandbox service. */
  readonly workspaceCreate: string;
  readonly workspaceExport: string;
  readonly workspaceDelete: string;
  /** Object store bucket the archives of managed workspaces travel through. */
  readonly workspacesBucket: string;
  readonly loopCreate: string;
  readonly loopSubmit: string;
  readonly loopDecide: string;
  /** Sandbox mode changes of sessions no process owns (queue group `loop`). */
  readonly loopMode: string;
  /** Subject the current owner of a session takes sandbox mode changes on. */
  loopSessionMode(sessionId: string): string;
  /** Deletions of sessions no process owns (queue group `loop`). */
  readonly loopDelete: string;
  /** Subject the current owner of a session takes its deletion on (refused while a turn runs). */
  loopSessionDelete(sessionId: string): string;
  /** New sessions written from a copy of another's log (a fork, an import), queue group `loop`. */
  readonly loopCopy: string;
  /** Cancellations of the running turn of sessions no process owns (queue group `loop`; such a session has no turn to stop). */
  readonly loopCancel: string;
  /** Subject the current owner of a session takes the cancellation of its running turn on. */
  loopSessionCancel(sessionId: string): string;
  /** Compactions of sessions no process owns (queue group `loop`; the replica claims the session). */
  readonly loopCompact: string;
  /** Subject the current owner of a session takes a compaction on (refused while a turn runs). */
  loopSessionCompact(sessionId: string): string;
  /** Gateway replicas tell each other here what they just changed (a revoked key, a session's index row), so none keeps using its old copy. */
  readonly gatewayChanged: string;
  /** Subject the current owner of a session takes approval decisions on. */
  loopSessionDecide(sessionId: string): string;
  /** Answers to the questions of sessions no process owns (queue group `loop`). */
  readonly loopAnswer: string;
  /** Subject the current owner of a session takes answers to its questions on. */
  loopSessionAnswer(sessionId: string): string;
  /** Plan decisions of sessions no process owns (queue group `loop`). */
  readonly loopDecidePlan: string;
  /** Subject the current owner of a session takes plan decisions on. */
  loopSessionDecidePlan(sessionId: string): string;
  /** Plan mode changes of sessions no process owns (queue group `loop`). */
  readonly loopPlanMode: string;
  /** Subject the current owner of a session takes plan mode changes on. */
  loopSessionPlanMode(sessionId: string): string;
  /** Session mode changes (the tools it has) of sessions no process owns (queue group `loop`). */
  readonly loopToolsMode: string;
  /** Subject the current owner of a session takes session mode changes on. */
  loopSessionToolsMode(sessionId: string): string;
  /** Subject the current owner of a session listens on. */
  loopSessionSubmit(sessionId: string): string;
  /** Log subject of one session. */
  logSubject(tenant: string, sessionId: string): string;
  readonly logSubjects: string;
  readonly logStream: string;
  readonly leaseBucket: string;
  /** Object store bucket holding spilled tool results and other large payloads. */
  readonly spillBucket: string;
  /** KV bucket of money spent per tenant (USD), for tenant budgets and the usage API. */
  readonly spendBucket: string;
  /** KV bucket of sandbox placements, one key per session and mode (written by the sandbox service, purged with a deleted session). */
  readonly sandboxBucket: string;
}

const TOKEN = /^[a-z0-9][a-z0-9_-]*$/;

/** Checks that `value` can be one subject token (tenant ids, session ids, namespaces). */
export function assertToken(kind: string, value: string): void {
  if (!TOKEN.test(value) || value.length > 64) {
    throw new Error(`invalid ${kind} ${JSON.stringify(value)}: use 1-64 lowercase letters, digits, '_' or '-'`);
  }
}

/**
 * The namespace a service starts in (default `tack`), after checking what every service checks
 * first: a NATS URL is given and the namespace is a valid token. Failures are TackError
 * `<service>.invalid_options` saying what to set.
 */
export function serviceNamespace(service: string, options: { readonly natsUrl: string; readonly namespace?: string }): string {
  const namespace = options.namespace ?? "tack";
  if (!options.natsUrl) throw new TackError(`${service}.invalid_options`, "natsUrl is empty; set NATS_URL, e.g. nats://127.0.0.1:4222");
  try {
    assertToken("namespace", namespace);
  } catch (error) {
    throw new TackError(`${service}.invalid_options`, (error as Error).message, { cause: error });
  }
  return namespace;
}

/** Derives all names from a namespace (default `tack`). */
export function names(namespace = "tack"): Names {
  assertToken("namespace", namespace);
  const upper = namespace.toUpperCase().replace(/-/g, "_");
  return {
    namespace,
    llmComplete: `${namespace}.llm.complete`,
    llmCheck: `${namespace}.llm.check`,
    llmEstimate: `${namespace}.llm.estimate`,
    llmCount: `${namespace}.llm.count`,
    toolsCall: `${namespace}.tools.call`,
    toolsList: `${namespace}.tools.list`,
    toolsWebHealth: `${namespace}.tools.web_health`,
    toolsRules: `${namespace}.tools.rules`,
    toolsHookConfig: `${namespace}.tools.hook_config`,
    toolsHookRun: `${namespace}.tools.hook_run`,
    skillsCatalog: `${namespace}.skills.catalog`,
    skillsLoad: `${namespace}.skills.load`,
    skillsInvalidate: `${namespace}.skills.invalidate`,
    mcpList: `${namespace}.mcp.list`,
    mcpCall: `${namespace}.mcp.call`,
    sandboxEnsure: `${namespace}.sandbox.ensure`,
    sandboxExec: `${namespace}.sandbox.exec`,
    sandboxRelease: `${namespace}.sandbox.release`,
    sandboxProcesses: `${namespace}.sandbox.processes`,
    workspaceCreate: `${namespace}.sandbox.workspace.create`,
    workspaceExport: `${namespace}.sandbox.workspace.export`,
    workspaceDelete: `${namespace}.sandbox.workspace.delete`,
    workspacesBucket: `${upper}_WORKSPACES`,
    loopCreate: `${namespace}.loop.create`,
    loopSubmit: `${namespace}.loop.submit`,
    loopDecide: `${namespace}.loop.decide`,
    loopMode: `${namespace}.loop.mode`,
    loopSessionMode: (sessionId) => `${namespace}.loop.session.${sessionId}.mode`,
    loopDelete: `${namespace}.loop.delete`,
    loopSessionDelete: (sessionId) => `${namespace}.loop.session.${sessionId}.delete`,
    loopCancel: `${namespace}.loop.cancel`,
    loopCopy: `${namespace}.loop.copy`,
    loopSessionCancel: (sessionId) => `${namespace}.loop.session.${sessionId}.cancel`,
    loopCompact: `${namespace}.loop.compact`,
    loopSessionCompact: (sessionId) => `${namespace}.loop.session.${sessionId}.compact`,
    gatewayChanged: `${namespace}.gateway.changed`,
    loopSessionDecide: (sessionId) => `${namespace}.loop.session.${sessionId}.decide`,
    loopAnswer: `${namespace}.loop.answer`,
    loopSessionAnswer: (sessionId) => `${namespace}.loop.session.${sessionId}.answer`,
    loopDecidePlan: `${namespace}.loop.decide_plan`,
    loopSessionDecidePlan: (sessionId) => `${namespace}.loop.session.${sessionId}.decide_plan`,
    loopPlanMode: `${namespace}.loop.plan_mode`,
    loopSessionPlanMode: (sessionId) => `${namespace}.loop.session.${sessionId}.plan_mode`,
    loopToolsMode: `${namespace}.loop.session_mode`,
    loopSessionToolsMode: (sessionId) => `${namespace}.loop.session.${sessionId}.session_mode`,
    loopSessionSubmit: (sessionId) => `${namespace}.loop.session.${sessionId}.submit`,
    logSubject: (tenant, sessionId) => `${namespace}.log.${tenant}.${sessionId}`,
    logSubjects: `${namespace}.log.>`,
    logStream: `${upper}_LOG`,
    leaseBucket: `${upper}_LEASES`,
    spillBucket: `${upper}_SPILL`,
    spendBucket: `${upper}_SPEND`,
    sandboxBucket: `${upper}_SANDBOXES`,
  };
}
