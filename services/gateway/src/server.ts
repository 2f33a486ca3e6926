import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { jetstreamManager } from "@nats-io/jetstream";
import type { Kysely } from "kysely";
import { Bus, TackError } from "@tack/bus";
import { registerMicro } from "@tack/bus";
import { logger } from "@tack/telemetry";
import { createKey, listKeys, listTenants, revokeKey } from "./admin.js";
import { answerQuestion, decideApproval, decidePlan } from "./approvals.js";
import { AuditLog, callerKeyId, listAudit } from "./audit.js";
import { authenticate } from "./auth.js";
import { openDatabase, ping, type Database } from "./db.js";
import { deleteSession, deleteSessionRoute, startRetentionSweep } from "./deletion.js";
import { GatewayError, respondWithErrors } from "./errors.js";
import { streamEvents } from "./events.js";
import { compose, sendJson, type Exchange, type Handler } from "./http.js";
import { setPlanMode, setSandboxMode, setSessionMode } from "./mode.js";
import { tenantUsage } from "./usage.js";
import { sessionContext } from "./context.js";
import { compileOptions, type GatewayOptions } from "./options.js";
import { TenantPolicies } from "./policy.js";
import { getTodos } from "./session-state.js";
import { createSession, getSession, listSessions, submitMessage, type GatewayContext } from "./sessions.js";
import { SessionIndex } from "./store.js";
import { traceRequest } from "./tracing.js";
import { WorkspaceIndex, WorkspaceRoutes } from "./workspaces.js";
import { webSearchHealth } from "./web.js";

/** A running gateway. */
export interface Gateway {
  /** Base URL, e.g. `http://127.0.0.1:7700`. */
  readonly url: string;
  readonly port: number;
  /** Ends event streams, stops accepting requests, and closes the bus and the index. */
  stop(): Promise<void>;
}

interface Route {
  readonly method: string;
  readonly pattern: string;
  readonly handler: Handler;
}

const log = logger("gateway");

/**
 * Starts the HTTP gateway: opens and migrates the session index, stores the configured API
 * key hashes, connects to the bus and listens.
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
      throw new TackError("gateway.jetstream_unavailable", `NATS at ${compiled.natsUrl} has no JetStream (${(error as Error).message}); start nats-server with -js`, { cause: error });
    });
    const shutdown = new AbortController();
    const context: GatewayContext = { bus, jsm, index, options: compiled, policy, shutdown: shutdown.signal, audit: new AuditLog(db), workspaces: new WorkspaceIndex(db) };
    const workspaceRoutes = new WorkspaceRoutes(context, context.workspaces, async (exchange, sessionId) => {
      const row = await index.getSession(exchange.tenant!, sessionId);
      if (row) await deleteSession(context, row, { kind: "api_key", keyId: callerKeyId(exchange) }, { reason: "workspace deleted" });
    });
    const { retention } = compiled.operator;
    const sweeper = startRetentionSweep(context, { maxAgeDays: retention.sessionMaxAgeDays, intervalMs: retention.sweepIntervalMinutes * 60_000 }, log);
    cleanup.push(() => sweeper.stop());

    const routes: Route[] = [
      { method: "GET", pattern: "/healthz", handler: health(context, db) },
      { method: "POST", pattern: "/v1/sessions", handler: createSession(context) },
      { method: "GET", pattern: "/v1/sessions", handler: listSessions(context) },
      { method: "GET", pattern: "/v1/sessions/:id", handler: getSession(context) },
      { method: "DELETE", pattern: "/v1/sessions/:id", handler: deleteSessionRoute(context) },
      { method: "POST", pattern: "/v1/sessions/:id/messages", handler: submitMessage(context) },
      { method: "GET", pattern: "/v1/sessions/:id/events", handler: streamEvents(context) },
      { method: "POST", pattern: "/v1/sessions/:id/approvals/:call_id", handler: decideApproval(context) },
      { method: "POST", pattern: "/v1/sessions/:id/sandbox_mode", handler: setSandboxMode(context) },
      { method: "POST", pattern: "/v1/sessions/:id/questions/:call_id", handler: answerQuestion(context) },
      { method: "POST", pattern: "/v1/sessions/:id/plan", handler: decidePlan(context) },
      { method: "POST", pattern: "/v1/sessions/:id/plan_mode", handler: setPlanMode(context) },
      { method: "POST", pattern: "/v1/sessions/:id/mode", handler: setSessionMode(context) },
      { method: "GET", pattern: "/v1/sessions/:id/todos", handler: getTodos(context) },
      { method: "GET", pattern: "/v1/sessions/:id/context", handler: sessionContext(context) },
      { method: "GET", pattern: "/v1/usage", handler: tenantUsage(context) },
      { method: "GET", pattern: "/v1/audit", handler: listAudit(context.audit) },
      { method: "GET", pattern: "/v1/web/search/health", handler: webSearchHealth(context) },
      { method: "POST", pattern: "/v1/workspaces", handler: workspaceRoutes.create() },
      { method: "GET", pattern: "/v1/workspaces", handler: workspaceRoutes.list() },
      { method: "GET", pattern: "/v1/workspaces/:id/archive", handler: workspaceRoutes.archive() },
      { method: "DELETE", pattern: "/v1/workspaces/:id", handler: workspaceRoutes.delete() },
      { method: "POST", pattern: "/v1/admin/keys", handler: createKey(context) },
      { method: "GET", pattern: "/v1/admin/keys", handler: listKeys(context) },
      { method: "DELETE", pattern: "/v1/admin/keys/:id", handler: revokeKey(context) },
      { method: "GET", pattern: "/v1/admin/tenants", handler: listTenants(context) },
    ];
    const interceptors = [traceRequest, respondWithErrors(log), authenticate(index), policy.limitRequests()];
    const chains = new Map(routes.map((r) => [r, compose(interceptors, r.handler)]));
    const unmatched = compose(interceptors, async (exchange) => {
      const allowed = routes.filter((r) => matchPattern(r.pattern, exchange.url.pathname)).map((r) => r.method);
      if (allowed.length > 0) {
        exchange.res.setHeader("allow", allowed.join(", "));
        throw new GatewayError(405, "gateway.method_not_allowed", `${exchange.req.method} is not supported on ${exchange.url.pathname}; use ${allowed.join(" or ")}`);
      }
      throw new GatewayError(404, "gateway.route_not_found", `no route ${exchange.req.method} ${exchange.url.pathname}; the API is under /v1/sessions`);
    });

    const serve = (req: IncomingMessage, res: ServerResponse) => {
      let url: URL;
      try {
        // Prefix instead of a base URL so that a path like `//host/x` is not read as a host.
        url = new URL(`http://gateway${req.url ?? "/"}`);
      } catch {
        sendJson(res, 400, { error: { code: "gateway.bad_url", message: `request target ${JSON.stringify(req.url)} is not a valid path` } });
        return;
      }
      let chain = unmatched;
      let route: Route | undefined;
      let params: Record<string, string> = {};
      for (const r of routes) {
        const found = r.method === req.method ? matchPattern(r.pattern, url.pathname) : undefined;
        if (found) {
          [route, params, chain] = [r, found, chains.get(r)!];
          break;
        }
      }
      // While stopping, a connection that finishes its response is idle: close it now rather
      // than after the keep-alive timeout.
      res.once("finish", () => {
        if (shutdown.signal.aborted) setImmediate(() => server.closeIdleConnections());
      });
      const exchange: Exchange = { req, res, url, route: route?.pattern, params, tenant: undefined };
      chain(exchange).catch((error: unknown) => {
        // respondWithErrors catches handler failures; this is only reached if writing the error failed.
        log.error("request aborted", { error: (error as Error).message });
        res.destroy();
      });
    };
    // Discoverable as micro-service tack-gateway ($SRV.PING/INFO/STATS).
    await registerMicro(bus, { service: "gateway", description: "HTTP API of Tack" });
    const server = createServer(serve);
    await new Promise<void>((resolve, reject) => {
      server.once("error", (error: NodeJS.ErrnoException) => reject(new TackError(
        "gateway.listen_failed",
        `cannot listen on ${compiled.host}:${compiled.port} (${error.code ?? error.message}); set TACK_GATEWAY_PORT to a free port or stop the other process`,
        { cause: error },
      )));
      server.listen(compiled.port, compiled.host, () => resolve());
    });
    const port = (server.address() as AddressInfo).port;
    const host = compiled.host.includes(":") ? `[${compiled.host}]` : compiled.host;
    let stopped: Promise<void> | undefined;
    return {
      url: `http://${host}:${port}`,
      port,
      stop: () => stopped ??= (async () => {
        shutdown.abort();
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        server.closeIdleConnections();
        // Requests still running after a grace period are cut rather than holding the stop forever.
        const grace = setTimeout(() => server.closeAllConnections(), 5_000);
        await closed;
        clearTimeout(grace);
        await unwind();
      })(),
    };
  } catch (error) {
    await unwind();
    throw error;
  }
}

/** Matches a path against a pattern like `/v1/sessions/:id`; returns the parameters or undefined. */
function matchPattern(pattern: string, path: string): Record<string, string> | undefined {
  const want = pattern.split("/");
  const got = path.split("/");
  if (want.length !== got.length) return undefined;
  const params: Record<string, string> = {};
  for (let i = 0; i < want.length; i++) {
    const w = want[i]!;
    const g = got[i]!;
    if (w.startsWith(":")) {
      if (g === "") return undefined;
      try {
        params[w.slice(1)] = decodeURIComponent(g);
      } catch {
        return undefined;
      }
    } else if (w !== g) return undefined;
  }
  return params;
}

/** `GET /healthz` (no auth): 200 when the index answers and the bus connection is open, else 503. */
function health(context: GatewayContext, db: Kysely<Database>): Handler {
  return async (exchange) => {
    const problems: string[] = [];
    await ping(db).catch((error: unknown) => problems.push(`session index: ${(error as Error).message}`));
    if (context.bus.nc.isClosed()) problems.push("bus: the NATS connection is closed");
    sendJson(exchange.res, problems.length === 0 ? 200 : 503, problems.length === 0 ? { status: "ok" } : { status: "unavailable", problems });
  };
}
