// REST + SSE on Fastify: one route per operation of the contract (src/gen/contract.ts, generated
// from proto/tack/gateway/v1/gateway.proto), validated by Fastify's ajv with the generated JSON
// Schemas, calling the same operation functions as gRPC.
import type { IncomingMessage, ServerResponse } from "node:http";
import { Socket } from "node:net";
import type { Duplex } from "node:stream";
import { context as otelContext, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Span } from "@opentelemetry/api";
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from "fastify";
import { Event, gatewayV1 } from "@tack/proto";
import type { Logger } from "@tack/telemetry";
import { authenticateKey } from "./auth.js";
import { endpointOf, type Call, type Endpoint } from "./call.js";
import type { Exchange, Handler } from "./http.js";
import { errorReply, GatewayError, toHttpError } from "./errors.js";
import { openEvents, streamPosition } from "./events.js";
import { CONTRACT, type OperationSpec } from "./gen/contract.js";
import { restWorkspace } from "./gen/rest-json.js";
import type { GatewayContext } from "./gateway-context.js";
import { schemaError, validatorCompiler, type SchemaIssue } from "./validation.js";
import type { WorkspaceOperations } from "./workspaces.js";

/** Largest JSON request body the gateway reads. */
export const MAX_BODY_BYTES = 1024 * 1024;

/** Largest session bundle `POST /v1/sessions/import` reads. */
export const MAX_IMPORT_BYTES = 64 * 1024 * 1024;

/** Routes outside the contract: no API key needed (marked `config: OPEN` where they are added). */
export const OPEN_ROUTES = [
  { method: "GET", route: "/healthz" },
  { method: "GET", route: "/v1/openapi.json" },
] as const;

/**
 * The route option that marks a route as served without an API key. Whether a request needs a key
 * is decided on the route the router matched (after it decoded the path), never on how the
 * request spelled its target: every other route, and every request that matches none, needs one.
 */
export const OPEN = { open: true } as const;

/** Deepest nesting of arrays and objects a JSON body may have (validating a deeper one would exhaust the stack). */
export const MAX_JSON_DEPTH = 64;

/** What a JSON route accepts as its body's content type. */
const JSON_TYPES = "Content-Type: application/json (with charset=utf-8 or no charset)";

/** What the REST server serves. */
export interface RestOptions {
  readonly context: GatewayContext;
  /** The unary operations by rpc name. */
  readonly operations: Readonly<Record<string, Endpoint>>;
  readonly workspaces: WorkspaceOperations;
  /** `GET /healthz`. */
  readonly health: () => Promise<{ status: number; body: unknown }>;
  /** `GET /v1/openapi.json`. */
  readonly openapi: () => unknown;
  readonly log: Logger;
  /**
   * Registers what the gateway serves beside the API (the web UI's static files: src/ui.ts).
   * Called last, in its own Fastify scope, so its routes and hooks cannot shadow the API's.
   */
  readonly extra?: (app: FastifyInstance) => Promise<void> | void;
  /** Told of every route as it is added (not HEAD), the web registration's too. */
  readonly onRoute?: (method: string, url: string) => void;
}

const tracer = trace.getTracer("@tack/gateway");

interface RequestState {
  span: Span;
  ended: boolean;
  call?: Call;
}

declare module "fastify" {
  interface FastifyContextConfig {
    /** Served without an API key (see `OPEN`). */
    open?: boolean;
  }
}

/** Builds the Fastify app (not listening yet). */
export async function buildRest(options: RestOptions): Promise<FastifyInstance> {
  const { context, log } = options;
  const states = new WeakMap<FastifyRequest, RequestState>();
  const app = Fastify({
    logger: false,
    bodyLimit: MAX_BODY_BYTES,
    routerOptions: { maxParamLength: 500 },
    forceCloseConnections: "idle",
    // A request target that is not a valid path (a bad %-escape, a segment over maxParamLength) is the caller's mistake.
    frameworkErrors: (error, _request, reply) => {
      const bad = error.code === "FST_ERR_BAD_URL"
        ? new GatewayError(400, "gateway.bad_url", "the request target is not a valid path (a bad %-escape?); send a path such as /v1/sessions")
        : error.code === "FST_ERR_MAX_PARAM_LENGTH"
          ? new GatewayError(400, "gateway.bad_url", "a segment of the request path is over 500 characters; ids and names are far shorter, so check the path")
          : error;
      const answer = errorReply(bad, { log });
      void (reply as FastifyReply).code(answer.status).headers(answer.headers).send(answer.body);
    },
  });
  app.setValidatorCompiler(validatorCompiler);
  // Node hands a CONNECT request to `connect` listeners, not to Fastify, and without one drops the
  // connection unanswered: the gateway is no proxy, and says so.
  app.server.on("connect", (_request: IncomingMessage, socket: Duplex) => {
    const answer = errorReply(new GatewayError(405, "gateway.method_not_allowed", "CONNECT is not supported: the gateway is no proxy; send GET, POST or DELETE to a route under /v1"), { log });
    const data = JSON.stringify(answer.body);
    socket.on("error", () => undefined);
    // The socket is no longer the server's (closeAllConnections does not see it): read and drop
    // whatever else the client sends, so its end is seen and the socket closes, and cut it after 5 s.
    socket.resume();
    if (socket instanceof Socket) socket.setTimeout(5_000, () => socket.destroy());
    socket.end(`HTTP/1.1 405 Method Not Allowed\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(data)}\r\nallow: GET, POST, DELETE\r\nconnection: close\r\n\r\n${data}`);
  });
  app.addHook("onRoute", (route) => {
    for (const method of [route.method].flat()) if (method !== "HEAD") options.onRoute?.(method, route.url);
  });

  // JSON bodies: sent as application/json (UTF-8, the only charset JSON has), strict UTF-8, nested
  // at most MAX_JSON_DEPTH deep, and a parse failure names where the JSON breaks. An empty body
  // is no body, whatever type it names. Any other content type is a 415 naming what was sent.
  const parseJson = (request: FastifyRequest, body: Buffer, done: (error: Error | null, value?: unknown) => void) => {
    if (body.length === 0) return done(null, undefined);
    const type = request.headers["content-type"];
    if (!isJsonType(type)) return done(unsupportedMediaType(type, JSON_TYPES));
    if (jsonDepth(body) > MAX_JSON_DEPTH) {
      return done(new GatewayError(400, "gateway.malformed_json", `request body is nested more than ${MAX_JSON_DEPTH} arrays or objects deep; no request of the API needs that, so flatten it`));
    }
    let text: string;
    try {
      text = new TextDecoder("utf-8", { fatal: true }).decode(body);
    } catch {
      return done(new GatewayError(400, "gateway.malformed_json", "request body is not valid UTF-8; send JSON encoded as UTF-8"));
    }
    if (text.trim() === "") return done(null, undefined);
    try {
      return done(null, JSON.parse(text));
    } catch (error) {
      return done(new GatewayError(400, "gateway.malformed_json", `request body is not valid JSON: ${describeJsonError(text, error instanceof Error ? error.message : String(error))}`));
    }
  };
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("*", { parseAs: "buffer" }, parseJson);

  // One decision point for the key and the rate limit: the route the router matched (it decoded
  // the path first), or none. Only routes marked OPEN go without a key; a request that matches
  // no route is authenticated too, so without a key it learns nothing of the routes (401, not 404).
  app.addHook("onRequest", async (request) => {
    const route = request.routeOptions.url ?? "(unmatched)";
    const path = request.raw.url?.split("?")[0] ?? "/";
    const parent = propagation.extract(ROOT_CONTEXT, request.headers);
    const attributes = { "http.request.method": request.method, "http.route": route, "url.path": path };
    const span = tracer.startSpan(`gateway ${request.method} ${route}`, { kind: SpanKind.SERVER, attributes }, parent);
    const state: RequestState = { span, ended: false };
    states.set(request, state);
    const open = request.routeOptions.url !== undefined && request.routeOptions.config.open === true;
    if (!open) {
      const { tenant, caller } = await authenticateKey(context.index, request.headers.authorization);
      state.call = { tenant, caller, label: `${request.method} ${route}` };
      span.setAttribute("tack.tenant", tenant);
      context.policy.spendRequest(tenant);
    }
  });
  // A callback hook, not an async one: no promise per response.
  app.addHook("onResponse", (request, reply, done) => {
    endSpan(states.get(request), request, reply.statusCode);
    // While stopping, a connection that finished its response is idle: close it now.
    if (context.shutdown.aborted) setImmediate(() => app.server.closeIdleConnections());
    done();
  });

  app.setErrorHandler((error: Error & { code?: string; validation?: SchemaIssue[]; validationContext?: string }, request, reply) => {
    const answer = errorReply(restError(error, request), { log, fields: { method: request.method, route: request.routeOptions.url } });
    if (error instanceof MethodNotAllowed) answer.headers.allow = error.allow;
    if (reply.sent || reply.raw.headersSent) {
      reply.raw.end();
      return;
    }
    void reply.code(answer.status).headers(answer.headers).send(answer.body);
  });

  app.setNotFoundHandler(async (request) => {
    const path = request.raw.url?.split("?")[0] ?? "/";
    const allowed = allRoutes().filter((r) => matchPattern(r.route, path)).map((r) => r.method);
    if (allowed.length > 0) {
      throw new MethodNotAllowed(`${request.method} is not supported on ${path}; use ${allowed.join(" or ")}`, allowed.join(", "));
    }
    throw new GatewayError(404, "gateway.route_not_found", `no route ${request.method} ${path}; the API is under /v1/sessions`);
  });

  /** The authenticated call of a request on a route that needs a key (onRequest made it, or refused the request). */
  const callOf = (request: FastifyRequest): Call => {
    const call = states.get(request)?.call;
    if (!call) throw new Error(`no authenticated call for ${request.method} ${request.routeOptions.url ?? "(unmatched)"}: a route that needs a key is missing from the authentication hook`);
    return call;
  };
  /** Runs `work` inside the request's span, so the bus requests it makes are its children. */
  const inSpan = <T>(request: FastifyRequest, work: () => Promise<T>): Promise<T> =>
    otelContext.with(trace.setSpan(otelContext.active(), states.get(request)!.span), work);

  app.get("/healthz", { config: OPEN }, async (_request, reply) => {
    const { status, body } = await options.health();
    return reply.code(status).send(body);
  });
  app.get("/v1/openapi.json", { config: OPEN }, async () => options.openapi());

  for (const spec of CONTRACT.operations) {
    if (spec.rpc === "StreamEvents" || spec.rpc === "CreateWorkspace" || spec.rpc === "ExportWorkspace") continue;
    const operation = endpointOf(options.operations, spec);
    const query = queryFields(spec);
    app.route({
      method: spec.method, url: spec.route, schema: spec.schemas,
      // A bundle to import holds a whole log and its spilled objects.
      ...(spec.rpc === "ImportSession" ? { bodyLimit: MAX_IMPORT_BYTES } : {}),
      preValidation: async (request) => requireBody(spec, request),
      handler: async (request, reply) => {
        const result = await inSpan(request, () => operation.run(callOf(request), requestOf(query, request)));
        return reply.code(spec.status).headers(result.headers ?? {}).type("application/json; charset=utf-8").send(result.json());
      },
    });
  }

  const events = operationSpec("StreamEvents");
  const eventsQuery = queryFields(events);
  app.route({
    method: "GET", url: events.route, schema: events.schemas,
    handler: async (request, reply) => {
      const message = gatewayV1.StreamEventsRequest.fromJSON(requestOf(eventsQuery, request));
      const lastEventId = request.headers["last-event-id"];
      const position = streamPosition({ lastEventId: typeof lastEventId === "string" ? lastEventId : undefined, from: message.from, follow: message.follow });
      const gone = new AbortController();
      reply.raw.on("close", () => gone.abort());
      const stream = await inSpan(request, () => openEvents(context, callOf(request), message.id, position, gone.signal));
      reply.hijack();
      await sendEvents(reply.raw, stream, context.options.keepaliveMs);
      endSpan(states.get(request), request, 200);
    },
  });

  // Workspace uploads are tar archives, streamed through, not JSON: their own scope without the JSON parser.
  await app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser("*", (_request, payload, done) => done(null, payload));
    const create = operationSpec("CreateWorkspace");
    scope.route({
      method: "POST", url: create.route, schema: create.schemas, bodyLimit: Number.MAX_SAFE_INTEGER,
      handler: async (request, reply) => {
        const { workspaces } = options;
        const declared = Number(request.headers["content-length"] ?? "0");
        const chunked = request.headers["transfer-encoding"] !== undefined;
        workspaces.checkDeclaredSize(declared);
        const hasBody = declared > 0 || chunked;
        const type = (request.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase();
        if (hasBody && !["application/x-tar", "application/tar", "application/gzip", "application/x-gzip", "application/octet-stream"].includes(type)) {
          throw new GatewayError(415, "gateway.unsupported_media_type", `a workspace upload must be a tar archive (content-type application/x-tar, or application/gzip for .tar.gz), got ${JSON.stringify(type || "none")}; send no body for an empty workspace`);
        }
        const { title } = gatewayV1.CreateWorkspaceRequest.fromJSON(request.query);
        const result = await inSpan(request, () => workspaces.create(callOf(request), { title, archive: hasBody ? request.raw : undefined }));
        return reply.code(create.status).headers(result.headers ?? {}).type("application/json; charset=utf-8").send(JSON.stringify(restWorkspace(result.message)));
      },
    });
    const exported = operationSpec("ExportWorkspace");
    scope.route({
      method: "GET", url: exported.route, schema: exported.schemas,
      handler: async (request, reply) => {
        const { id } = gatewayV1.ExportWorkspaceRequest.fromJSON(request.params);
        const archive = await inSpan(request, () => options.workspaces.archive(callOf(request), id));
        reply.raw.once("close", () => void archive.done());
        return reply.code(200).headers({ "content-type": "application/x-tar", "content-disposition": `attachment; filename="${archive.id}.tar"`, "content-length": String(archive.size) }).send(archive.data);
      },
    });
  });

  if (options.extra) await app.register(async (scope) => options.extra!(scope));
  return app;
}

/** The contract's spec of `rpc`. */
export function operationSpec(rpc: string): OperationSpec {
  const spec = CONTRACT.operations.find((o) => o.rpc === rpc);
  if (!spec) throw new Error(`no operation ${rpc} in the contract`);
  return spec;
}

/** Every route the REST server answers: the contract's and the open ones. */
export function allRoutes(): { method: string; route: string }[] {
  return [...OPEN_ROUTES, ...CONTRACT.operations.map((o) => ({ method: o.method, route: o.route }))];
}

/** A route with a JSON body schema refuses a request without a body before validating it. */
async function requireBody(spec: OperationSpec, request: FastifyRequest): Promise<void> {
  if (spec.schemas.body && request.body === undefined) {
    throw new GatewayError(400, "gateway.malformed_json", "request body is not valid JSON: expected a JSON object, found the end of the body");
  }
}

/** The query fields an operation's contract declares. */
function queryFields(spec: OperationSpec): readonly string[] {
  const properties = spec.schemas.querystring?.properties;
  return isRecord(properties) ? Object.keys(properties) : [];
}

/** The operation's request in its REST form: the declared query fields, the body, then the path parameters. */
function requestOf(declared: readonly string[], request: FastifyRequest): Record<string, unknown> {
  const form: Record<string, unknown> = {};
  const { query, body, params } = request;
  if (isRecord(query)) for (const key of declared) if (query[key] !== undefined) form[key] = query[key];
  if (isRecord(body)) Object.assign(form, body);
  if (isRecord(params)) Object.assign(form, params);
  return form;
}

/** Whether a parsed JSON value (or Fastify's query or path parameters) is an object. */
function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Fastify's path parameters of a route (all text). */
function stringParams(params: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  if (isRecord(params)) for (const [key, value] of Object.entries(params)) if (typeof value === "string") out[key] = value;
  return out;
}

/** A 405 with the methods the path takes (the `allow` header). */
class MethodNotAllowed extends GatewayError {
  readonly allow: string;

  constructor(message: string, allow: string) {
    super(405, "gateway.method_not_allowed", message);
    this.allow = allow;
  }
}

/** Fastify's own refusals in the gateway's words and codes. */
function restError(error: Error & { code?: string; validation?: SchemaIssue[]; validationContext?: string }, request: FastifyRequest): unknown {
  if (error.validation) return schemaError(error.validationContext === "body" ? "body" : "query", error.validation);
  switch (error.code) {
    // A Content-Type header that is no media type at all (Fastify refuses it before any parser runs).
    case "FST_ERR_CTP_INVALID_MEDIA_TYPE":
      return unsupportedMediaType(request.headers["content-type"], request.routeOptions.url === operationSpec("CreateWorkspace").route ? UPLOAD_TYPES : JSON_TYPES);
    case "FST_ERR_CTP_BODY_TOO_LARGE":
      return new GatewayError(413, "gateway.body_too_large", `request body is over ${MAX_BODY_BYTES} bytes (1 MiB; a session bundle to import: ${MAX_IMPORT_BYTES / 1024 / 1024} MiB); send less per request`);
    case "FST_ERR_CTP_INVALID_CONTENT_LENGTH":
      return new GatewayError(400, "gateway.malformed_json", "request body does not have the length its Content-Length header announces (cut short?); send the whole body");
    case "FST_ERR_CTP_EMPTY_JSON_BODY":
      return new GatewayError(400, "gateway.malformed_json", "request body is not valid JSON: expected a JSON object, found the end of the body");
  }
  return error;
}

/** What a workspace upload accepts as its content type. */
const UPLOAD_TYPES = "Content-Type: application/x-tar, or application/gzip for a .tar.gz";

/** A 415 naming the content type sent (`none` when there was no header) and what the route takes. */
export function unsupportedMediaType(sent: string | undefined, accepted: string): GatewayError {
  const shown = sent === undefined || sent.trim() === "" ? "none" : JSON.stringify(sent.length > 100 ? `${sent.slice(0, 100)}…` : sent);
  return new GatewayError(415, "gateway.unsupported_media_type", `the request body's content type is ${shown}, which this route does not take; send ${accepted}`, {
    details: { content_type: sent ?? "", accepted },
  });
}

/** Whether a Content-Type header names JSON in UTF-8: `application/json`, with `charset=utf-8` (any case, quoted or not) or no charset. */
export function isJsonType(header: string | undefined): boolean {
  if (header === undefined) return false;
  const [type, ...parameters] = header.split(";").map((part) => part.trim());
  if (type!.toLowerCase() !== "application/json") return false;
  return parameters.every((parameter) => {
    const [name, value = ""] = parameter.split("=").map((part) => part.trim());
    if (name!.toLowerCase() !== "charset") return parameter === "" || value !== "";
    return value.replace(/^"(.*)"$/, "$1").toLowerCase() === "utf-8";
  });
}

/** How deep a JSON text nests arrays and objects, counted in one pass outside strings (stops once past the limit). */
export function jsonDepth(body: Buffer): number {
  let depth = 0;
  let deepest = 0;
  let inString = false;
  for (let i = 0; i < body.length; i++) {
    const byte = body[i]!;
    if (inString) {
      if (byte === 0x5c) i++; // a backslash escapes the next byte
      else if (byte === 0x22) inString = false;
    } else if (byte === 0x22) inString = true;
    else if (byte === 0x5b || byte === 0x7b) {
      depth++;
      if (depth > deepest) deepest = depth;
      if (deepest > MAX_JSON_DEPTH) return deepest;
    } else if (byte === 0x5d || byte === 0x7d) depth--;
  }
  return deepest;
}

function endSpan(state: RequestState | undefined, request: FastifyRequest, status: number): void {
  if (!state || state.ended) return;
  state.ended = true;
  state.span.setAttribute("http.response.status_code", status);
  const { params } = request;
  const id = isRecord(params) ? params.id : undefined;
  if (typeof id === "string" && id !== "" && request.routeOptions.url?.startsWith("/v1/sessions/")) state.span.setAttribute("tack.session_id", id);
  if (status >= 500) state.span.setStatus({ code: SpanStatusCode.ERROR });
  state.span.end();
}

/**
 * Each event's SSE frame as a complete HTTP/1.1 chunk (size line, frame, CRLF), encoded once
 * however many followers of its session it is sent to, and written straight to their sockets:
 * one buffer and one write per follower and batch, instead of the response's three per event.
 */
const chunks = new WeakMap<Event, Buffer>();

function sseChunk(event: Event): Buffer {
  let chunk = chunks.get(event);
  if (!chunk) {
    const frame = Buffer.from(`id: ${event.seq}\nevent: ${event.type}\ndata: ${JSON.stringify(Event.toJSON(event))}\n\n`, "utf8");
    chunk = Buffer.concat([Buffer.from(`${frame.length.toString(16)}\r\n`, "latin1"), frame, CRLF]);
    chunks.set(event, chunk);
  }
  return chunk;
}

const CRLF = Buffer.from("\r\n", "latin1");

/** The SSE frame inside an `sseChunk` (for a response that is not chunked: an HTTP/1.0 client). */
function frameOf(chunk: Buffer): Buffer {
  const start = chunk.indexOf(CRLF) + 2;
  return chunk.subarray(start, chunk.length - 2);
}

/**
 * Writes a batch of events on an SSE response whose headers were sent: as ready chunks straight
 * to the socket when the response is chunked (nothing else is buffered in the response then, so
 * the order is kept), else through the response. False: wait for `drain` before writing more.
 */
function writeBatch(res: ServerResponse, batch: readonly Event[]): boolean {
  const chunked = "chunkedEncoding" in res && res.chunkedEncoding === true;
  if (!chunked || !res.socket) return res.write(Buffer.concat(batch.map(sseChunk).map(frameOf)));
  return res.socket.write(batchChunk(batch));
}

/** A live batch is one array shared by every follower of the session: its bytes are joined once. */
const batchChunks = new WeakMap<readonly Event[], Buffer>();

function batchChunk(batch: readonly Event[]): Buffer {
  if (batch.length === 1) return sseChunk(batch[0]!);
  let chunk = batchChunks.get(batch);
  if (!chunk) {
    chunk = Buffer.concat(batch.map(sseChunk));
    batchChunks.set(batch, chunk);
  }
  return chunk;
}

/**
 * Writes an open event stream as Server-Sent Events (`id` = seq, `event` = type, `data` = the
 * event as JSON), with a comment every `keepaliveMs` so that proxies keep an idle connection
 * open; a failure after the status line is reported in-band (`event: error`) before the end.
 */
async function sendEvents(res: ServerResponse, stream: Awaited<ReturnType<typeof openEvents>>, keepaliveMs: number): Promise<void> {
  res.writeHead(200, {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache",
    connection: "keep-alive",
    "x-accel-buffering": "no",
  });
  res.flushHeaders();
  const keepalive = setInterval(() => res.write(": keepalive\n\n"), keepaliveMs);
  try {
    // One write (one system call) for the events that arrived together.
    await stream.pipe({ write: (batch) => writeBatch(res, batch), drained: () => drained(res) });
  } catch (error) {
    if (!stream.signal.aborted) res.write(`event: error\ndata: ${JSON.stringify(toHttpError(error).body)}\n\n`);
  } finally {
    clearInterval(keepalive);
    stream.close();
    res.end();
  }
}

/** Resolves when the response can take more (its socket, written to directly, or itself drained) or is closed. */
function drained(res: ServerResponse): Promise<void> {
  const emitters = [res, ...(res.socket ? [res.socket] : [])];
  return new Promise((resolve) => {
    const done = () => {
      for (const emitter of emitters) {
        emitter.off("drain", done);
        emitter.off("close", done);
      }
      resolve();
    };
    for (const emitter of emitters) {
      emitter.on("drain", done);
      emitter.on("close", done);
    }
  });
}

/** Matches a path against a pattern like `/v1/sessions/:id`. */
export function matchPattern(pattern: string, path: string): boolean {
  const want = pattern.split("/");
  const got = path.split("/");
  if (want.length !== got.length) return false;
  return want.every((w, i) => (w.startsWith(":") ? got[i] !== "" : w === got[i]));
}

/** V8's JSON.parse message with its character position as line and column. */
function describeJsonError(text: string, message: string): string {
  const at = /at position (\d+)/.exec(message);
  if (!at) return message;
  const offset = Number(at[1]);
  const before = text.slice(0, offset);
  const line = before.split("\n").length;
  const column = offset - before.lastIndexOf("\n");
  // Newer V8 (Node 22+) also appends "(line L column C)" itself: said once, in our words.
  return message.replace(/ \(line \d+ column \d+\)$/, "").replace(/ in JSON at position \d+| at position \d+/, ` at line ${line}, column ${column}`);
}

/**
 * Mounts routes that write their own responses (`{method, pattern, handler}`, e.g. the web UI's
 * `uiRoutes()` of src/ui.ts) as a `web` registration of `startGateway`. They need no API key and
 * may not be under /v1; HEAD follows GET (Fastify answers HEAD with the GET handler, whose
 * request says HEAD). A handler's refusal before it wrote anything is answered as JSON.
 */
export function rawRoutes(routes: readonly { method: string; pattern: string; handler: Handler }[], log: Logger): (app: FastifyInstance) => void {
  return (app) => {
    for (const route of routes) {
      if (route.method === "HEAD") continue;
      if (route.pattern === "/v1" || route.pattern.startsWith("/v1/")) throw new Error(`a raw route may not be under /v1: ${route.pattern}`);
      app.route({
        method: route.method, url: route.pattern, config: OPEN,
        handler: async (request, reply) => {
          reply.hijack();
          const exchange: Exchange = {
            req: request.raw, res: reply.raw, url: new URL(`http://gateway${request.raw.url ?? "/"}`), route: route.pattern,
            params: stringParams(request.params), tenant: undefined,
          };
          try {
            await route.handler(exchange);
          } catch (error) {
            if (reply.raw.headersSent) return void reply.raw.end();
            const answer = errorReply(error, { log, fields: { method: request.method, route: route.pattern } });
            const data = JSON.stringify(answer.body);
            reply.raw.writeHead(answer.status, { ...answer.headers, "content-type": "application/json; charset=utf-8", "content-length": Buffer.byteLength(data) });
            reply.raw.end(data);
          }
        },
      });
    }
  };
}
