// gRPC (@grpc/grpc-js) serving the contract's operations: the API key in the metadata
// `authorization: Bearer <key>`, tenant-checked and rate-limited like REST, the same operation
// functions, errors as the catalogue's gRPC statuses, events as a server stream resumable from a seq.
import { Readable } from "node:stream";
import { context as otelContext, SpanKind, SpanStatusCode, trace } from "@opentelemetry/api";
import { Metadata, Server, ServerCredentials, status as GrpcCode, type ServerWritableStream, type ServiceDefinition, type ServiceError, type UntypedServiceImplementation } from "@grpc/grpc-js";
import { TackError } from "@tack/bus";
import { gatewayV1, healthV1, type Event } from "@tack/proto";
import type { Logger } from "@tack/telemetry";
import { authenticateKey } from "./auth.js";
import { endpointOf, type Call, type Endpoint } from "./call.js";
import { GatewayError, grpcStatusOf, toHttpError } from "./errors.js";
import { openEvents, streamPosition } from "./events.js";
import { CONTRACT } from "./gen/contract.js";
import type { GatewayContext } from "./gateway-context.js";
import { installGrpcRefusals } from "./grpc-refusals.js";
import { grpcRequest } from "./validation.js";
import type { WorkspaceOperations } from "./workspaces.js";

/** What the gRPC server serves (the same as REST's). */
export interface GrpcOptions {
  readonly context: GatewayContext;
  readonly operations: Readonly<Record<string, Endpoint>>;
  readonly workspaces: WorkspaceOperations;
  readonly log: Logger;
  /** The gateway's health (`GET /healthz`'s check): 200 when it can take calls. */
  readonly health: () => Promise<{ status: number }>;
  /** How often a `Health/Watch` call checks again (default 5 s). */
  readonly healthWatchMs?: number;
}

/** A running gRPC server. */
export interface GrpcGateway {
  readonly port: number;
  /** Stops accepting calls; running calls get a grace period, then are cut. */
  stop(): Promise<void>;
}

const tracer = trace.getTracer("@tack/gateway");
const CHUNK_BYTES = 64 * 1024;

type AnyCall = { metadata: Metadata; request: object };

/** The gRPC form of a failure: the catalogue's status, the REST message (5xx: the fixed sentence and request id) and the code in metadata. */
export function grpcError(error: unknown, log?: Logger, rpc?: string): Partial<ServiceError> {
  const { body } = toHttpError(error, { log, fields: { rpc } });
  const metadata = new Metadata();
  metadata.set("tack-error-code", body.error.code);
  if (body.error.request_id) metadata.set("tack-request-id", body.error.request_id);
  const retry = body.error.details?.retry_after_seconds;
  if (retry) metadata.set("retry-after", retry);
  if (body.error.details) metadata.set("tack-error-details", JSON.stringify(body.error.details));
  return { code: grpcStatusOf(error), details: body.error.message, metadata };
}

/** Starts serving on `host:port` (0 picks a free port). */
export async function startGrpc(options: GrpcOptions, host: string, port: number): Promise<GrpcGateway> {
  const { context, log } = options;
  installGrpcRefusals();
  const server = new Server({ "grpc.max_receive_message_length": 16 * 1024 * 1024 });

  /** Authenticates and rate-limits a call, then runs `work` inside its span. */
  const run = async <T>(rpc: string, call: AnyCall, work: (caller: Call) => Promise<T>): Promise<T> => {
    const span = tracer.startSpan(`gateway gRPC ${rpc}`, { kind: SpanKind.SERVER, attributes: { "rpc.system": "grpc", "rpc.service": CONTRACT.service, "rpc.method": rpc } });
    try {
      const header = call.metadata.get("authorization")[0];
      const { tenant, caller } = await authenticateKey(context.index, typeof header === "string" ? header : undefined);
      span.setAttribute("tack.tenant", tenant);
      context.policy.spendRequest(tenant);
      return await otelContext.with(trace.setSpan(otelContext.active(), span), () => work({ tenant, caller, label: `gRPC ${rpc}` }));
    } catch (error) {
      const code = grpcStatusOf(error);
      span.setAttribute("rpc.grpc.status_code", code);
      if (code === GrpcCode.INTERNAL || code === GrpcCode.UNKNOWN || code === GrpcCode.UNAVAILABLE) span.setStatus({ code: SpanStatusCode.ERROR });
      throw error;
    } finally {
      span.end();
    }
  };

  // The operation's response message is sent as it is.
  const unary = (rpc: string, operation: Endpoint) =>
    (call: AnyCall, callback: (error: Partial<ServiceError> | null, value?: unknown) => void) => {
      run(rpc, call, async (caller) => (await operation.run(caller, grpcRequest(rpc, decoded(rpc, call.request)))).message)
        .then((value) => callback(null, value), (error: unknown) => callback(grpcError(error, log, rpc)));
    };

  const implementation: UntypedServiceImplementation = {};
  for (const spec of CONTRACT.operations) {
    const name = spec.rpc[0]!.toLowerCase() + spec.rpc.slice(1);
    if (spec.rpc === "StreamEvents") implementation[name] = streamEvents(options, run);
    else if (spec.rpc === "ExportWorkspace") implementation[name] = exportWorkspace(options, run);
    else if (spec.rpc === "CreateWorkspace") implementation[name] = createWorkspace(options, run);
    else {
      implementation[name] = unary(spec.rpc, endpointOf(options.operations, spec));
    }
  }
  server.addService(tolerantDecoding(gatewayV1.GatewayService), implementation);
  const health = healthService(options);
  server.addService(healthV1.HealthService, health.implementation);

  const bound = await new Promise<number>((resolve, reject) => {
    server.bindAsync(`${host.includes(":") ? `[${host}]` : host}:${port}`, ServerCredentials.createInsecure(), (error, actual) => {
      if (error) {
        reject(new TackError("gateway.listen_failed", `cannot listen for gRPC on ${host}:${port} (${error.message}); set TACK_GATEWAY_GRPC_PORT to a free port or stop the other process`, { cause: error }));
      } else resolve(actual);
    });
  });
  let stopped: Promise<void> | undefined;
  return {
    port: bound,
    stop: () => stopped ??= new Promise<void>((resolve) => {
      health.stop();
      const grace = setTimeout(() => server.forceShutdown(), 5_000);
      server.tryShutdown(() => {
        clearTimeout(grace);
        resolve();
      });
    }),
  };
}

const { ServingStatus } = { ServingStatus: healthV1.HealthCheckResponse_ServingStatus };

/**
 * `grpc.health.v1.Health` (no key, like `GET /healthz`): SERVING for "" and the gateway's service
 * while the session index answers and the NATS connection is open, NOT_SERVING otherwise; `Check`
 * of another name is NOT_FOUND, `Watch` of one sends SERVICE_UNKNOWN. `stop` (the server is
 * stopping) sends NOT_SERVING to every watcher and ends its call, so shutdown does not wait on them.
 */
function healthService(options: GrpcOptions): { implementation: UntypedServiceImplementation; stop(): void } {
  let stopping = false;
  const watchers = new Set<() => void>();
  const known = (service: string) => service === "" || service === CONTRACT.service;
  const status = async (): Promise<healthV1.HealthCheckResponse_ServingStatus> => {
    if (stopping) return ServingStatus.NOT_SERVING;
    const answer = await options.health().catch(() => ({ status: 503 }));
    return answer.status === 200 ? ServingStatus.SERVING : ServingStatus.NOT_SERVING;
  };
  const implementation: UntypedServiceImplementation = {
    check: (call: { request: healthV1.HealthCheckRequest }, callback: (error: Partial<ServiceError> | null, value?: healthV1.HealthCheckResponse) => void) => {
      const service = call.request?.service ?? "";
      if (!known(service)) {
        callback({ code: GrpcCode.NOT_FOUND, details: `no service ${JSON.stringify(service)} is served here; ask for "" (the server) or ${JSON.stringify(CONTRACT.service)}` });
        return;
      }
      status().then((value) => callback(null, { status: value }), (error: unknown) => callback(grpcError(error, options.log, "Health/Check")));
    },
    watch: (call: ServerWritableStream<healthV1.HealthCheckRequest, healthV1.HealthCheckResponse>) => {
      const service = call.request?.service ?? "";
      let last: healthV1.HealthCheckResponse_ServingStatus | undefined;
      let timer: NodeJS.Timeout | undefined;
      let ended = false;
      const end = () => {
        ended = true;
        clearTimeout(timer);
        watchers.delete(stopWatch);
      };
      const stopWatch = () => {
        if (ended) return;
        end();
        if (last !== ServingStatus.NOT_SERVING && known(service)) call.write({ status: ServingStatus.NOT_SERVING });
        call.end();
      };
      watchers.add(stopWatch);
      call.on("cancelled", end);
      call.on("close", end);
      const send = async () => {
        const value = known(service) ? await status() : ServingStatus.SERVICE_UNKNOWN;
        if (ended) return;
        if (value !== last) {
          last = value;
          call.write({ status: value });
        }
        timer = setTimeout(() => void send(), options.healthWatchMs ?? 5_000);
      };
      void send();
    },
  };
  return {
    implementation,
    stop: () => {
      stopping = true;
      for (const stopWatch of [...watchers]) stopWatch();
    },
  };
}

type Runner = <T>(rpc: string, call: AnyCall, work: (caller: Call) => Promise<T>) => Promise<T>;

/** `StreamEvents` as a server stream: each event as `tack.log.v1.Event`, from `from` (a seq, default 1); `follow` `0`/`false` ends at the log's end. */
function streamEvents(options: GrpcOptions, run: Runner) {
  return (call: ServerWritableStream<gatewayV1.StreamEventsRequest, Event>) => {
    const gone = new AbortController();
    call.on("cancelled", () => gone.abort());
    call.on("close", () => gone.abort());
    run("StreamEvents", call, async (caller) => {
      const request = gatewayV1.StreamEventsRequest.fromJSON(grpcRequest("StreamEvents", decoded("StreamEvents", call.request)));
      const position = streamPosition({ from: request.from, follow: request.follow });
      const stream = await openEvents(options.context, caller, request.id, position, gone.signal);
      try {
        for await (const batch of stream.batches) {
          let full = false;
          for (const event of batch) full = !call.write(event) || full;
          if (full) await new Promise<void>((resolve) => { call.once("drain", resolve); gone.signal.addEventListener("abort", () => resolve(), { once: true }); });
          if (stream.signal.aborted) break;
        }
      } finally {
        stream.close();
      }
    }).then(() => call.end(), (error: unknown) => {
      if (!gone.signal.aborted) call.emit("error", grpcError(error, options.log, "StreamEvents"));
    });
  };
}

/** `CreateWorkspace`: the archive comes as the `archive` bytes (at most the message size limit, 16 MiB; REST takes larger uploads). */
function createWorkspace(options: GrpcOptions, run: Runner) {
  return (call: { metadata: Metadata; request: gatewayV1.CreateWorkspaceRequest | Undecodable }, callback: (error: Partial<ServiceError> | null, value?: unknown) => void) => {
    run("CreateWorkspace", call, async (caller) => {
      const message = decoded("CreateWorkspace", call.request);
      const { title } = gatewayV1.CreateWorkspaceRequest.fromJSON(grpcRequest("CreateWorkspace", message));
      options.workspaces.checkDeclaredSize(message.archive.length);
      const archive = message.archive.length > 0 ? Readable.from([Buffer.from(message.archive)]) : undefined;
      return (await options.workspaces.create(caller, { title, archive })).message;
    }).then((value) => callback(null, value), (error: unknown) => callback(grpcError(error, options.log, "CreateWorkspace")));
  };
}

/** `ExportWorkspace` as a server stream of archive chunks (at most 64 KiB each). */
function exportWorkspace(options: GrpcOptions, run: Runner) {
  return (call: ServerWritableStream<gatewayV1.ExportWorkspaceRequest, gatewayV1.ArchiveChunk>) => {
    run("ExportWorkspace", call, async (caller) => {
      const request = gatewayV1.ExportWorkspaceRequest.fromJSON(grpcRequest("ExportWorkspace", decoded("ExportWorkspace", call.request)));
      const archive = await options.workspaces.archive(caller, request.id);
      try {
        for await (const chunk of archive.data) {
          const piece = Buffer.isBuffer(chunk) ? chunk : Buffer.from(String(chunk));
          for (let at = 0; at < piece.length; at += CHUNK_BYTES) {
            if (!call.write({ data: piece.subarray(at, at + CHUNK_BYTES) })) await new Promise((resolve) => call.once("drain", resolve));
          }
        }
      } finally {
        await archive.done();
      }
    }).then(() => call.end(), (error: unknown) => call.emit("error", grpcError(error, options.log, "ExportWorkspace")));
  };
}

/** What a request's bytes decode to when they are not a valid message: why not. */
class Undecodable {
  readonly problem: string;

  constructor(problem: string) {
    this.problem = problem;
  }
}

/**
 * The service definition with request decoders that do not throw: bytes that are not a valid
 * message (cut short, garbage) become an `Undecodable` that the handler refuses as
 * INVALID_ARGUMENT, instead of grpc-js's INTERNAL for a failed deserialization.
 */
function tolerantDecoding(service: ServiceDefinition): ServiceDefinition {
  return Object.fromEntries(Object.entries(service).map(([name, method]) => [name, {
    ...method,
    requestDeserialize: (bytes: Buffer) => {
      try {
        return method.requestDeserialize(bytes);
      } catch (error) {
        return new Undecodable(error instanceof Error ? error.message : String(error));
      }
    },
  }]));
}

/** Refuses a request whose bytes were not a valid message of its type. */
function decoded<T>(rpc: string, request: T | Undecodable): T {
  if (request instanceof Undecodable) {
    throw new GatewayError(400, "gateway.invalid_request", `the request is not a valid ${CONTRACT.operations.find((o) => o.rpc === rpc)?.requestType ?? rpc} message (${request.problem}); encode it with the tack.gateway.v1 protobuf definitions`);
  }
  return request;
}
