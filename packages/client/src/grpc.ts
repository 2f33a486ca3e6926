// @tack/client/grpc: the gateway's operations over gRPC (@grpc/grpc-js), for Node callers that
// prefer it to REST: the same contract (proto/tack/gateway/v1/gateway.proto), typed by the code
// ts-proto generates from it, the key in the metadata, refusals as the same TackApiError as REST's
// (the code from the `tack-error-code` metadata, the HTTP status from the error catalogue), and
// StreamEvents as an async iterable that resumes after a dropped connection from the last seq.
// A separate entry point: browsers (the web UI) import "@tack/client" and never load grpc-js.
import { credentials as grpcCredentials, Metadata, status as GrpcCode, type CallOptions, type ChannelCredentials, type ClientOptions, type ClientReadableStream, type ClientUnaryCall, type ServiceError } from "@grpc/grpc-js";
import { errorSpec, GRPC_STATUS_NUMBERS, HTTP_FOR_GRPC, type GrpcStatus } from "@tack/errors";
import { gatewayV1, type Event } from "@tack/proto";
import { TackApiError } from "./errors.js";
import { resumeInOrder, type EventStreamOptions } from "./sse.js";

type Gateway = gatewayV1.GatewayClient;
type UnarySignature<Req, Res> = (request: Req, metadata: Metadata, options: Partial<CallOptions>, callback: (error: ServiceError | null, response: Res) => void) => ClientUnaryCall;

/** The contract's unary operations by their method name on the generated client (`getSession`, `postMessage`, …). */
export type GrpcUnary = {
  // Unary: a response callback as the last parameter (server streams like streamEvents take none).
  [K in keyof Gateway]: Gateway[K] extends (request: never, metadata: Metadata, options: Partial<CallOptions>, callback: infer C) => ClientUnaryCall
    ? (C extends (error: ServiceError | null, response: never) => void ? K : never)
    : never;
}[keyof Gateway];
/** The request message of a unary operation. */
export type GrpcRequest<K extends GrpcUnary> = Gateway[K] extends UnarySignature<infer Req, unknown> ? Req : never;
/** A request as a caller writes it: any field may be left out (it takes its proto default). */
export type GrpcInput<T> = T extends readonly (infer U)[] ? readonly GrpcInput<U>[] : T extends Uint8Array ? T : T extends object ? { [K in keyof T]?: GrpcInput<T[K]> } : T;
/** The response message of a unary operation. */
export type GrpcResponse<K extends GrpcUnary> = Gateway[K] extends UnarySignature<never, infer Res> ? Res : never;

export interface TackGrpcClientOptions {
  /** `host:port` of the gateway's gRPC listener (`TACK_GATEWAY_GRPC_PORT`). */
  readonly address: string;
  readonly apiKey: string;
  /** Default: insecure (a gateway on loopback or behind a TLS-terminating proxy); pass `credentials.createSsl()` for TLS. */
  readonly credentials?: ChannelCredentials;
  /** Per-call deadline in ms for unary calls (default 30 s). */
  readonly timeoutMs?: number;
  readonly channelOptions?: Partial<ClientOptions>;
}

const CODE_NAMES = new Map<number, GrpcStatus>(Object.entries(GRPC_STATUS_NUMBERS).map(([name, number]) => [number as number, name as GrpcStatus]));

/** A gRPC failure as the REST client reports it. */
export function grpcFailure(error: ServiceError): TackApiError {
  const code = error.metadata?.get("tack-error-code")[0];
  const requestId = error.metadata?.get("tack-request-id")[0];
  const detailsJson = error.metadata?.get("tack-error-details")[0];
  let details: Record<string, string> = {};
  if (typeof detailsJson === "string") {
    try {
      details = Object.fromEntries(Object.entries(JSON.parse(detailsJson) as Record<string, unknown>).map(([k, v]) => [k, String(v)]));
    } catch {
      details = {};
    }
  }
  const message = error.details || error.message;
  if (typeof code === "string") {
    const status = errorSpec(code)?.http ?? httpFor(error.code);
    return new TackApiError(status, code, message, { details, ...(typeof requestId === "string" ? { requestId } : {}), cause: error });
  }
  // No answer from the gateway itself: the channel could not reach it, or the call was cut.
  if (error.code === GrpcCode.UNAVAILABLE || error.code === GrpcCode.DEADLINE_EXCEEDED || error.code === GrpcCode.CANCELLED) {
    return new TackApiError(0, "client.unreachable", `the gateway's gRPC listener did not answer (${CODE_NAMES.get(error.code) ?? error.code}: ${message}); check the address and that TACK_GATEWAY_GRPC_PORT is set on the gateway`, { cause: error });
  }
  return new TackApiError(httpFor(error.code), `grpc.${(CODE_NAMES.get(error.code) ?? "UNKNOWN").toLowerCase()}`, message, { cause: error });
}

function httpFor(code: number): number {
  const name = CODE_NAMES.get(code);
  return name && name !== "OK" ? (HTTP_FOR_GRPC[name]?.[0] ?? 500) : 500;
}

/**
 * The gateway over gRPC. `call("getSession", { id })` runs any unary operation of the contract,
 * typed by its request and response messages; `events` streams a session's log.
 */
export class TackGrpcClient {
  readonly #client: Gateway;
  readonly #apiKey: string;
  readonly #timeoutMs: number;

  constructor(options: TackGrpcClientOptions) {
    if (!options.apiKey) throw new TackApiError(0, "client.no_api_key", "an API key is required: pass apiKey (the gateway refuses calls without one)");
    this.#client = new gatewayV1.GatewayClient(options.address, options.credentials ?? grpcCredentials.createInsecure(), options.channelOptions);
    this.#apiKey = options.apiKey;
    this.#timeoutMs = options.timeoutMs ?? 30_000;
  }

  #metadata(): Metadata {
    const metadata = new Metadata();
    metadata.set("authorization", `Bearer ${this.#apiKey}`);
    return metadata;
  }

  /** Runs one unary operation; a refusal rejects with a TackApiError (the same code and status as REST's). */
  call<K extends GrpcUnary>(operation: K, input: GrpcInput<GrpcRequest<K>>, options: { signal?: AbortSignal; timeoutMs?: number } = {}): Promise<GrpcResponse<K>> {
    const method = (this.#client[operation] as unknown as UnarySignature<GrpcRequest<K>, GrpcResponse<K>>).bind(this.#client);
    // Every request message of the contract is named after its rpc: getSession → GetSessionRequest.
    const messageName = `${operation[0]!.toUpperCase()}${operation.slice(1)}Request`;
    const message = (gatewayV1 as unknown as Record<string, { fromPartial(object: unknown): GrpcRequest<K> } | undefined>)[messageName];
    if (!message) throw new TackApiError(0, "client.bad_argument", `${operation} is not an operation of the gateway's contract`);
    const request = message.fromPartial(input);
    return new Promise((resolve, reject) => {
      const call = method(request, this.#metadata(), { deadline: Date.now() + (options.timeoutMs ?? this.#timeoutMs) }, (error, response) => {
        options.signal?.removeEventListener("abort", cancel);
        if (error) reject(grpcFailure(error));
        else resolve(response);
      });
      const cancel = () => call.cancel();
      options.signal?.addEventListener("abort", cancel, { once: true });
    });
  }

  /**
   * The session's events (`tack.log.v1.Event` messages) in seq order, each exactly once, with the
   * options and reconnection rules of `TackClient.events`: a followed stream that drops is opened
   * again from the seq after the last one received, after a backoff; a refusal (unknown session,
   * bad key) is thrown at once, and a skipped seq is an error rather than silently lost data.
   */
  events(id: string, options: EventStreamOptions = {}): AsyncGenerator<Event> {
    const follow = options.follow ?? true;
    const client = this.#client;
    const metadata = () => this.#metadata();
    return resumeInOrder<Event>(id, options, async function* (fromSeq, signal, opened) {
      const stream: ClientReadableStream<Event> = client.streamEvents({ id, from: String(fromSeq), follow: follow ? "1" : "0" }, metadata());
      const cancel = () => stream.cancel();
      signal.addEventListener("abort", cancel, { once: true });
      // gRPC says nothing when a stream opens: it is open once its headers came (it was not refused).
      stream.once("metadata", opened);
      try {
        yield* stream as AsyncIterable<Event>;
      } finally {
        signal.removeEventListener("abort", cancel);
        stream.cancel();
      }
    }, (error) => (error instanceof TackApiError ? error : grpcFailure(error as ServiceError)));
  }

  close(): void {
    this.#client.close();
  }
}
