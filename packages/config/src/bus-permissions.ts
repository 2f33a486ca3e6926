// The one table of who may do what on the bus (decision 0007): each service's NATS user may
// publish only the requests it really makes and subscribe only to its own command subjects and
// its own reply inboxes. `tack up` renders it into the nats-server configuration; a cluster
// deployment and the tests use the same function, so the three cannot drift apart.
// Every service also answers NATS micro-service discovery for its own name (`$SRV.PING|INFO|STATS`,
// `microSubjects` of @tack/bus): the one grant outside the namespace, to subscribe only.
import { inboxPrefix, LlmRpc, LoopRpc, McpRpc, microName, microSubjects, names, rpcSubject, rpcSubjectPatterns, SandboxRpc, SkillsRpc, ToolsRpc, WorkspacesRpc, type Rpc } from "@tack/bus";

/**
 * Every NATS user of a deployment: one per service, `probe` for container health checks (it may only
 * ping Tack's micro-services), plus `admin` for the operator and the launcher's start-up probes.
 */
export const BUS_USERS = ["gateway", "loop", "llm", "tools", "sandbox", "skills", "mcp", "probe", "admin"] as const;

/** The users that are Tack services (and answer micro-service discovery as `tack-<user>`). */
const SERVICE_USERS = BUS_USERS.filter((user) => user !== "probe" && user !== "admin");

/** One NATS user of a deployment. */
export type BusUser = (typeof BUS_USERS)[number];

/** What one user may do, in nats-server terms. */
export interface BusPermissions {
  /** Subjects (wildcards allowed) the user may publish to; requests go here. */
  readonly publish: readonly string[];
  /** Subjects the user may subscribe to, each `subject` or `subject queue`. */
  readonly subscribe: readonly string[];
  /**
   * Replies allowed per request received (nats-server `allow_responses`): at most `max`
   * messages within `expires` of receiving it. Absent: the user answers nothing.
   */
  readonly responses?: { readonly max: number; readonly expires: string };
}

// JetStream API subjects take the stream name as one token, so every grant below names one
// of this namespace's streams: a service's credentials never reach another deployment's data.
// Found by running every service under nats-server's trace (decision 0007), then checked
// against the client libraries for paths a happy run does not take.
const js = (operation: string, stream: string) => `$JS.API.${operation}.${stream}`;

/** Looking a stream up and creating it when missing (the log, and buckets opened with `create`). */
function streamEnsure(stream: string): string[] {
  return [js("STREAM.INFO", stream), js("STREAM.CREATE", stream)];
}

/** One message by subject or sequence: a KV get, an object's metadata, the last event of a session. */
function messageGet(stream: string): string[] {
  return [js("STREAM.MSG.GET", stream), `${js("DIRECT.GET", stream)}.>`];
}

/**
 * Reading a stream through ordered consumers (the log is pulled, an object's chunks are pushed
 * with flow control) plus single messages and the stream's info. The client checks a consumer
 * (`CONSUMER.INFO`), deletes and recreates it when it misses a heartbeat or sees a gap.
 */
function streamRead(stream: string): string[] {
  return [
    js("STREAM.INFO", stream), ...messageGet(stream),
    `${js("CONSUMER.CREATE", stream)}.>`, `${js("CONSUMER.MSG.NEXT", stream)}.>`,
    `${js("CONSUMER.INFO", stream)}.>`, `${js("CONSUMER.DELETE", stream)}.>`, `$JS.FC.${stream}.>`,
  ];
}

/** Removing messages by subject: a deleted session's entries, an object's replaced or deleted chunks. */
const purge = (stream: string) => js("STREAM.PURGE", stream);

/**
 * The permission table of namespace `namespace`. Subjects and buckets come from `names()`;
 * the sandbox replicas' subjects are spelled out as in services/sandbox/src/placements.ts
 * (a test checks that they agree).
 */
export function busPermissions(namespace: string): Readonly<Record<BusUser, BusPermissions>> {
  const table = permissionTable(namespace);
  // The helpers overlap (a stream that is ensured and read is looked up by both): list each subject once.
  for (const user of BUS_USERS) table[user] = { ...table[user], publish: [...new Set(table[user].publish)] };
  return table;
}

function permissionTable(namespace: string): Record<BusUser, BusPermissions> {
  const n = names(namespace);
  const ns = n.namespace;
  const log = n.logStream;
  const leases = `KV_${n.leaseBucket}`;
  const spend = `KV_${n.spendBucket}`;
  const placements = `KV_${n.sandboxBucket}`;
  const spill = `OBJ_${n.spillBucket}`;
  const workspaces = `OBJ_${n.workspacesBucket}`;
  const inbox = (user: BusUser) => `${inboxPrefix(user)}.>`;
  // Rpc subjects come from the generated descriptors: the queue-group subject, and every subject of an rpc with its parameters as `*`.
  const rpc = (r: Rpc) => rpcSubject(ns, r);
  const loopRpcs = Object.values(LoopRpc) as Rpc[];
  // Every JetStream client starts by asking for the account's JetStream info.
  const jsInfo = "$JS.API.INFO";
  return {
    gateway: {
      publish: [
        // Session commands, to any loop replica or to the session's current owner.
        ...loopRpcs.map(rpc), ...loopRpcs.flatMap((r) => rpcSubjectPatterns(ns, r).slice(1)),
        // GET /v1/sessions/:id/context counts tokens.
        rpc(LlmRpc.CountTokens),
        // GET /v1/web/search/health asks the tools service for its search providers' state.
        rpc(ToolsRpc.WebSearchHealth),
        // Managed workspaces: the sandbox service unpacks and packs their archives, which pass
        // through an object store; nothing else of the sandbox's.
        rpc(WorkspacesRpc.CreateWorkspace), rpc(WorkspacesRpc.ExportWorkspace), rpc(WorkspacesRpc.DeleteWorkspace),
        `$O.${n.workspacesBucket}.>`, ...streamEnsure(workspaces), ...streamRead(workspaces), purge(workspaces),
        // Reads the session log (events, context) and the tenants' spend (usage); writes neither.
        jsInfo, ...streamRead(log), ...messageGet(spend),
        // A session's export bundles the spilled tool results its log names.
        ...streamRead(spill),
        // What one replica changed (a revoked key, a session's row) every other drops from its caches at once.
        n.gatewayChanged,
        // Whether loop replicas run when none serves a loop rpc (they are older than the gateway: gateway.loop_outdated).
        `$SRV.PING.${microName("loop")}`,
      ],
      subscribe: [inbox("gateway"), ...microSubjects("gateway"), n.gatewayChanged],
      // Answers only micro-service discovery ($SRV.PING/INFO/STATS): one reply each.
      responses: { max: 1, expires: "1m" },
    },
    loop: {
      publish: [
        // A queue-group command for a session another replica keeps warm is passed to that owner.
        ...loopRpcs.flatMap((r) => rpcSubjectPatterns(ns, r).slice(1)),
        rpc(LlmRpc.Complete), rpc(LlmRpc.CheckModel), rpc(LlmRpc.EstimateCost),
        rpc(ToolsRpc.ListTools), rpc(ToolsRpc.CallTool), rpc(ToolsRpc.ReadRules), rpc(ToolsRpc.ReadHooksConfig), rpc(ToolsRpc.RunHook),
        // The skill catalog, a skill's body, and re-reading a skills root after a write or edit there.
        rpc(SkillsRpc.Catalog), rpc(SkillsRpc.LoadSkill), rpc(SkillsRpc.Invalidate),
        // A session's MCP tools (each step header) and calls to them.
        rpc(McpRpc.ListTools), rpc(McpRpc.CallTool),
        // The sandbox-mode guard lists the processes left from a wider mode; deleting a session releases its containers;
        // a new session's sandbox is started at creation (pre-warm).
        rpc(SandboxRpc.ListProcesses), rpc(SandboxRpc.ReleaseSandbox), rpc(SandboxRpc.EnsureSandbox),
        // The only writer of session logs: creates the stream (and applies its limits), appends,
        // reads back, purges a deleted session's subject.
        n.logSubjects, jsInfo, ...streamEnsure(log), js("STREAM.UPDATE", log), ...streamRead(log), purge(log),
        // Session leases (scanned for expired ones), tenant spend, spilled tool results; a deleted session's entries are purged.
        `$KV.${n.leaseBucket}.>`, ...streamEnsure(leases), ...streamRead(leases), purge(leases),
        `$KV.${n.spendBucket}.>`, ...streamEnsure(spend), ...messageGet(spend),
        `$O.${n.spillBucket}.>`, ...streamEnsure(spill), ...messageGet(spill), purge(spill),
        // A deleted session's sandbox placements: the sandbox service deletes them, the loop purges the delete markers.
        purge(placements),
      ],
      // Every `<ns>.loop.*` subject is the loop's own: the queue-group commands and each owned session's subjects.
      subscribe: [`${ns}.loop.>`, inbox("loop"), ...microSubjects("loop")],
      // Its handlers wait at most for a lease to expire, a model check, a process listing or a
      // session's deletion, sending a heartbeat every second meanwhile when the caller asks.
      responses: { max: 1_000, expires: "5m" },
    },
    llm: {
      // Answers; calls nothing. Reads the images of tool results from the spill bucket (ImageRef), whose chunks come to its inbox.
      publish: [jsInfo, ...streamRead(spill)],
      subscribe: [`${ns}.llm.*`, inbox("llm"), ...microSubjects("llm")],
      // A completion is streamed as one message per delta to the caller's inbox; reasoning
      // models can think for many minutes before the last one.
      responses: { max: 1_000_000, expires: "1h" },
    },
    tools: {
      publish: [
        rpc(SandboxRpc.EnsureSandbox), rpc(SandboxRpc.Exec),
        // A run_code program runs in the session's container as a stdio stream (decision 0020).
        rpc(SandboxRpc.OpenStdio), n.stdioInputs,
        // `read` of a spilled result (`tack-spill:<call_id>`).
        jsInfo, ...streamRead(spill),
      ],
      // Its own subjects, and the output of its programs' streams (stream ids are random per stream).
      subscribe: [`${ns}.tools.*`, n.stdioOutputs, inbox("tools"), ...microSubjects("tools")],
      // A tool call may run a command for up to 600 s (bash's limit) plus the sandbox's margin,
      // sending a heartbeat every second meanwhile (so the loop can tell a dead worker in 5 s).
      responses: { max: 10_000, expires: "15m" },
    },
    sandbox: {
      publish: [
        // Forwards to the replica that holds a session's container, and pings it.
        `${ns}.sandbox.replica.*.*`,
        // Output of the long-lived processes (MCP stdio servers) whose stdio travels over the bus (decision 0016).
        n.stdioOutputs,
        // Checks a request against the session's first log event (its tenant and workspace); reads nothing else of the log.
        jsInfo, ...messageGet(log),
        // Container placements across replicas, and the archives of managed workspaces.
        `$KV.${n.sandboxBucket}.>`, ...streamEnsure(placements), ...messageGet(placements),
        `$O.${n.workspacesBucket}.>`, ...streamEnsure(workspaces), ...streamRead(workspaces), purge(workspaces),
      ],
      // Every `<ns>.sandbox.*` subject is the sandbox's own: the queue-group commands, workspaces and the replicas' subjects.
      subscribe: [`${ns}.sandbox.>`, inbox("sandbox"), ...microSubjects("sandbox")],
      // Exec runs a command for up to 600 s, sending a heartbeat every second meanwhile; a
      // forwarded request answers after the replica does.
      responses: { max: 10_000, expires: "15m" },
    },
    skills: {
      // Answers; calls nothing: the skills are files on its host, not on the bus.
      publish: [],
      subscribe: [`${ns}.skills.*`, inbox("skills"), ...microSubjects("skills")],
      // Each request reads a few small files: one reply, and a heartbeat a second when the caller asks.
      responses: { max: 100, expires: "1m" },
    },
    mcp: {
      // Stdio MCP servers run in the session's sandbox (decision 0016): it ensures the container,
      // opens a stdio stream there and writes the stream's input; nothing else of the sandbox's.
      publish: [rpc(SandboxRpc.EnsureSandbox), rpc(SandboxRpc.OpenStdio), n.stdioInputs],
      // Its own subjects, and the output of its streams (stream ids are random per stream).
      subscribe: [`${ns}.mcp.*`, n.stdioOutputs, inbox("mcp"), ...microSubjects("mcp")],
      // A call waits for its MCP server up to the call timeout (60 s by default, configurable), with heartbeats meanwhile.
      responses: { max: 10_000, expires: "15m" },
    },
    // `<service main> --probe` in a container (deploy/k8s): pings one Tack service by name
    // ($SRV.PING.tack-<service>, no instance-wide verbs, nothing else) and reads the answers.
    // NATS wildcards stand for whole tokens, so each name is listed.
    probe: { publish: SERVICE_USERS.map((service) => `$SRV.PING.${microName(service)}`), subscribe: [inbox("probe")] },
    // The operator's identity: `tack up`'s start-up probes, the `nats` CLI, test cleanup.
    // Never given to a service.
    admin: { publish: [">"], subscribe: [">"] },
  };
}

/**
 * The `authorization` block of a nats-server configuration (JSON, which nats-server reads
 * as its config format) with one user per entry of `passwords` and its permissions from
 * `busPermissions(namespace)`. There is no `no_auth_user`, so a client without credentials is refused.
 * A cluster deployment may pass bcrypt hashes (`nats server passwd`) as the passwords; nats-server
 * recognises them, and only the services hold the plain ones.
 */
export function natsServerAuthorization(namespace: string, passwords: Readonly<Record<BusUser, string>>): { authorization: { users: unknown[] } } {
  const table = busPermissions(namespace);
  return {
    authorization: {
      users: BUS_USERS.map((user) => {
        const { publish, subscribe, responses } = table[user];
        return {
          user,
          password: passwords[user],
          permissions: {
            // An empty allow list would mean "anything"; deny everything instead (replies still pass through allow_responses).
            publish: publish.length > 0 ? { allow: publish } : { deny: [">"] },
            subscribe: { allow: subscribe },
            ...(responses ? { allow_responses: { max: responses.max, expires: responses.expires } } : {}),
          },
        };
      }),
    },
  };
}
