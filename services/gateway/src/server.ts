import { jetstreamManager } from "@nats-io/jetstream";
import type { Kysely } from "kysely";
import { Bus, TackError } from "@tack/bus";
import { gatewayV1 } from "@tack/proto";
import { registerMicro } from "@tack/bus";
import { logger } from "@tack/telemetry";
import { createKey, listKeys, listTenants, revokeKey } from "./admin.js";
import { answerQuestion, decideApproval, decidePlan } from "./approvals.js";
import { AuditLog, callerActor, listAudit } from "./audit.js";
import { forgetKey } from "./auth.js";
import { ReplicaChanges } from "./changes.js";
import { endpoint, type Endpoint } from "./call.js";
import { sessionContext } from "./context.js";
import { forkSession, importSession } from "./copy.js";
import { openDatabase, ping, type Database } from "./db.js";
import { deleteSession, deleteSessionRoute, startRetentionSweep } from "./deletion.js";
import { exportSession } from "./export.js";
import { SessionFeeds } from "./feeds.js";
import { startGrpc, type GrpcGateway } from "./grpc.js";
import { restApiKey, restCancelTurnResponse, restCompactSessionResponse, restCreatedKey, restDecisionResponse, restDeleteSessionResponse, restDeleteWorkspaceResponse, restGetContextResponse, restGetTodosResponse, restGetUsageResponse, restListAuditResponse, restListKeysResponse, restListSessionsResponse, restListTenantsResponse, restListWorkspacesResponse, restSession, restSessionBundle, restSessionDetail, restSetPlanModeResponse, restSetSandboxModeResponse, restSetSessionModeResponse, restSubmitMessageResponse, restWebSearchHealthResponse } from "./gen/rest-json.js";
import { setPlanMode, setSandboxMode, setSessionMode } from "./mode.js";
import { openApiDocument } from "./openapi.js";
import { compileOptions, type GatewayOptions } from "./options.js";
import { TenantPolicies } from "./policy.js";
import { buildRest } from "./rest.js";
import type { GatewayContext } from "./gateway-context.js";
import { archiveSession, cancelTurn, compactSession, createSession, getSession, getTodos, listSessions, submitMessage } from "./sessions.js";
import { SessionIndex } from "./store.js";
import { tenantUsage } from "./usage.js";
import { webSearchHealth } from "./web.js";
import { WorkspaceIndex, WorkspaceOperations } from "./workspaces.js";
import { errorMessage } from "./thrown.js";

/** A running gateway. */
export interface Gateway {
  /** Base URL, e.g. `http://127.0.0.1:7700`. */
  readonly url: string;
  readonly port: number;
  /** The gRPC port, when gRPC is served (`grpcPort`). */
  readonly grpcPort: number | undefined;
  /** Every REST route the server answers (method and Fastify path, HEAD left out), for checking the OpenAPI document against. */
  readonly routes: readonly { readonly method: string; readonly url: string }[];
  /** Ends event streams, stops accepting requests, and closes the bus and the index. */
  stop(): Promise<void>;
}

const log = logger("gateway");
const VERSION = "0.1.0";

/**
 * Starts the gateway: opens and migrates the session index, stores the configured API key
 * hashes, connects to the bus, and serves REST + SSE (Fastify) and, with `grpcPort`, gRPC.
 * `options.web` registers what the gateway serves beside the API (the web UI, src/ui.ts).
 */
export async function startGateway(options: GatewayOptions): Promise<Gateway> {
  const compiled = compileOptions(options);
  const cleanup: (() => Promise<unknown>)[] = [];
  const unwind = async () => {
    for (const step of cleanup.reverse()) await step().catch(() => undefined);
  };
  try {
    const db = await openDatabase(compiled.database);
    cleanup.push(() => db.destroy());
    const index = new SessionIndex(db);
    await index.replaceConfiguredKeys(compiled.keys, Object.keys(compiled.operator.tenants));
    const policy = new TenantPolicies(compiled.operator, index, compiled.keepaliveMs);
    cleanup.push(async () => policy.close());
    const bus = await Bus.connect({ url: compiled.natsUrl, namespace: compiled.namespace, name: "tack-gateway", ...options.natsAuth });
    cleanup.push(() => bus.close());
    const jsm = await jetstreamManager(bus.nc).catch((error: unknown) => {
      throw new TackError("gateway.jetstream_unavailable", `NATS at ${compiled.natsUrl} has no JetStream (${errorMessage(error)}); start nats-server with -js`, { cause: error });
    });
    const shutdown = new AbortController();
    // What another replica changed: a revoked key is no longer trusted here and its streams end; a changed session row is read again.
    const changes = new ReplicaChanges(bus, (change) => {
      if ("key" in change) {
        forgetKey(index, change.key);
        policy.endStreamsOf(change.key);
      } else index.forgetSession(change.session);
    });
    cleanup.push(async () => changes.close());
    index.onSessionChange((id) => changes.announce({ session: id }));
    const feeds = new SessionFeeds(bus, jsm);
    cleanup.push(async () => feeds.close());
    const context: GatewayContext = { bus, jsm, index, options: compiled, policy, shutdown: shutdown.signal, audit: new AuditLog(db), workspaces: new WorkspaceIndex(db), feeds, changes };
    const workspaces = new WorkspaceOperations(context, context.workspaces, async (call, sessionId) => {
      const row = await index.getSession(call.tenant, sessionId);
      if (row) await deleteSession(context, row, callerActor(call), { reason: "workspace deleted" });
    });
    const { retention } = compiled.operator;
    const sweeper = startRetentionSweep(context, { maxAgeDays: retention.sessionMaxAgeDays, intervalMs: retention.sweepIntervalMinutes * 60_000 }, log);
    cleanup.push(() => sweeper.stop());

    // One function per unary rpc of tack.gateway.v1.Gateway, bound to its request message and its response message's REST encoder; REST and gRPC both call these.
    const operations: Record<string, Endpoint> = {
      CreateSession: endpoint(gatewayV1.CreateSessionRequest, restSession, createSession(context)),
      ListSessions: endpoint(gatewayV1.ListSessionsRequest, restListSessionsResponse, listSessions(context)),
      GetSession: endpoint(gatewayV1.GetSessionRequest, restSessionDetail, getSession(context)),
      DeleteSession: endpoint(gatewayV1.DeleteSessionRequest, restDeleteSessionResponse, deleteSessionRoute(context)),
      SubmitMessage: endpoint(gatewayV1.SubmitMessageRequest, restSubmitMessageResponse, submitMessage(context)),
      DecideApproval: endpoint(gatewayV1.DecideApprovalRequest, restDecisionResponse, decideApproval(context)),
      AnswerQuestion: endpoint(gatewayV1.AnswerQuestionRequest, restDecisionResponse, answerQuestion(context)),
      DecidePlan: endpoint(gatewayV1.DecidePlanRequest, restDecisionResponse, decidePlan(context)),
      SetPlanMode: endpoint(gatewayV1.SetPlanModeRequest, restSetPlanModeResponse, setPlanMode(context)),
      SetSessionMode: endpoint(gatewayV1.SetSessionModeRequest, restSetSessionModeResponse, setSessionMode(context)),
      SetSandboxMode: endpoint(gatewayV1.SetSandboxModeRequest, restSetSandboxModeResponse, setSandboxMode(context)),
      GetTodos: endpoint(gatewayV1.GetTodosRequest, restGetTodosResponse, getTodos(context)),
      GetContext: endpoint(gatewayV1.GetContextRequest, restGetContextResponse, sessionContext(context)),
      CancelTurn: endpoint(gatewayV1.CancelTurnRequest, restCancelTurnResponse, cancelTurn(context)),
      CompactSession: endpoint(gatewayV1.CompactSessionRequest, restCompactSessionResponse, compactSession(context)),
      ArchiveSession: endpoint(gatewayV1.ArchiveSessionRequest, restSession, archiveSession(context)),
      ExportSession: endpoint(gatewayV1.ExportSessionRequest, restSessionBundle, exportSession(context)),
      ForkSession: endpoint(gatewayV1.ForkSessionRequest, restSession, forkSession(context)),
      ImportSession: endpoint(gatewayV1.ImportSessionRequest, restSession, importSession(context)),
      GetUsage: endpoint(gatewayV1.GetUsageRequest, restGetUsageResponse, tenantUsage(context)),
      ListAudit: endpoint(gatewayV1.ListAuditRequest, restListAuditResponse, listAudit(context.audit)),
      WebSearchHealth: endpoint(gatewayV1.WebSearchHealthRequest, restWebSearchHealthResponse, webSearchHealth(context)),
      ListWorkspaces: endpoint(gatewayV1.ListWorkspacesRequest, restListWorkspacesResponse, workspaces.list()),
      DeleteWorkspace: endpoint(gatewayV1.DeleteWorkspaceRequest, restDeleteWorkspaceResponse, workspaces.delete()),
      CreateKey: endpoint(gatewayV1.CreateKeyRequest, restCreatedKey, createKey(context)),
      ListKeys: endpoint(gatewayV1.ListKeysRequest, restListKeysResponse, listKeys(context)),
      RevokeKey: endpoint(gatewayV1.RevokeKeyRequest, restApiKey, revokeKey(context)),
      ListTenants: endpoint(gatewayV1.ListTenantsRequest, restListTenantsResponse, listTenants(context)),
    };
    let document: Record<string, unknown> | undefined;
    const routes: { method: string; url: string }[] = [];
    const app = await buildRest({
      context, operations, workspaces, log,
      health: () => health(context, db),
      openapi: () => (document ??= openApiDocument(VERSION)),
      extra: options.web,
      onRoute: (method, url) => routes.push({ method, url }),
    });
    cleanup.push(() => app.close());
    // Discoverable as micro-service tack-gateway ($SRV.PING/INFO/STATS).
    await registerMicro(bus, { service: "gateway", description: "HTTP and gRPC API of Tack" });
    await app.listen({ port: compiled.port, host: compiled.host }).catch((error: NodeJS.ErrnoException) => {
      throw new TackError("gateway.listen_failed", `cannot listen on ${compiled.host}:${compiled.port} (${error.code ?? error.message}); set TACK_GATEWAY_PORT to a free port or stop the other process`, { cause: error });
    });
    let grpc: GrpcGateway | undefined;
    if (compiled.grpcPort !== undefined) {
      grpc = await startGrpc({ context, operations, workspaces, log, health: () => health(context, db) }, compiled.host, compiled.grpcPort);
      cleanup.push(() => grpc!.stop());
    }
    const address = app.server.address();
    const port = address !== null && typeof address === "object" ? address.port : compiled.port;
    const host = compiled.host.includes(":") ? `[${compiled.host}]` : compiled.host;
    let stopped: Promise<void> | undefined;
    return {
      url: `http://${host}:${port}`,
      port,
      grpcPort: grpc?.port,
      routes,
      stop: () => stopped ??= (async () => {
        shutdown.abort();
        // Requests still running after a grace period are cut rather than holding the stop forever.
        const grace = setTimeout(() => app.server.closeAllConnections(), 5_000);
        await Promise.all([app.close(), grpc?.stop()]);
        clearTimeout(grace);
        await unwind();
      })(),
    };
  } catch (error) {
    await unwind();
    throw error;
  }
}

/** `GET /healthz` (no auth): 200 when the index answers and the bus connection is open, else 503. */
async function health(context: GatewayContext, db: Kysely<Database>): Promise<{ status: number; body: unknown }> {
  const problems: string[] = [];
  await ping(db).catch((error: unknown) => problems.push(`session index: ${errorMessage(error)}`));
  if (context.bus.nc.isClosed()) problems.push("bus: the NATS connection is closed");
  return problems.length === 0 ? { status: 200, body: { status: "ok" } } : { status: 503, body: { status: "unavailable", problems } };
}
