import { randomBytes } from "node:crypto";
import { trace } from "@opentelemetry/api";
import { TackError } from "@tack/bus";
import { errorSpec, GRPC_STATUS_NUMBERS, HTTP_FOR_GRPC, isErrorCode, type ErrorCode, type GrpcStatus } from "@tack/errors";
import { logger, type Logger } from "@tack/telemetry";

/** A request the gateway refuses: a TackError that also carries the HTTP status to answer with. */
export class GatewayError extends TackError {
  readonly status: number;

  constructor(status: number, code: string, message: string, options: { details?: Record<string, string>; cause?: unknown } = {}) {
    super(code, message, { retryable: status >= 500, ...options });
    this.name = "GatewayError";
    this.status = status;
  }
}

/** The JSON body of every error response; a server-side failure (5xx) carries the id its log line has. */
export interface ErrorBody {
  error: { code: string; message: string; details?: Record<string, string>; request_id?: string };
}

// Services named in 5xx sentences; a subject or code naming anything else says "a Tack service".
const SERVICES = new Set(["loop", "llm", "tools", "sandbox"]);

const defaultLog = logger("gateway");

/** The status a failure that is not a GatewayError gets when the catalogue does not hold its code: a service behind the gateway failed. */
const UNCATALOGUED_STATUS = 502;

/**
 * The HTTP status for a failure's code, from the error catalogue (`@tack/errors`, listed in
 * docs/errors.md): a caller's mistake keeps its 4xx wherever it was found (`loop.unknown_session`
 * is 404), "no loop is running" is 503, "the loop is too slow" 504, "the loop failed" 502,
 * the gateway's own unexpected failure (`internal`) 500; a code the catalogue lacks is 502.
 */
export function httpStatusOf(code: string): number {
  return errorSpec(code)?.http ?? UNCATALOGUED_STATUS;
}

/**
 * Maps any failure to an HTTP status and body. A GatewayError answers with its own status; any
 * other failure keeps its TackError code and gets the catalogue's status for it (`httpStatusOf`).
 * A 5xx body says only what happened and what the caller can do, in a fixed sentence per code,
 * with a request id: the failure's own message and details can hold internal subjects, host
 * paths or stack text, so they go to `options.log` (default the gateway's logger) under that id
 * and never to the caller.
 */
export function toHttpError(error: unknown, options: { log?: Logger; fields?: Record<string, unknown> } = {}): { status: number; body: ErrorBody } {
  const e = TackError.from(error);
  const status = e instanceof GatewayError ? e.status : httpStatusOf(e.code);
  if (status < 500) {
    const details = Object.keys(e.details).length > 0 ? { details: { ...e.details } } : {};
    return { status, body: { error: { code: e.code, message: e.message, ...details } } };
  }
  const requestId = randomBytes(8).toString("hex");
  (options.log ?? defaultLog).error("request failed", {
    ...options.fields, status, code: e.code, request_id: requestId, error: e.message, details: e.details,
  });
  return { status, body: { error: { code: e.code, message: `${serverFailureSentence(e, status)} (request id ${requestId})`, request_id: requestId } } };
}

/** What a 5xx means to the caller, from its code and status alone: what happened and what to do. */
function serverFailureSentence(e: TackError, status: number): string {
  const service = serviceOf(e);
  const named = service ? `the ${service} service` : "a Tack service behind the gateway";
  const code: ErrorCode | undefined = isErrorCode(e.code) ? e.code : undefined;
  switch (code) {
    case "bus.no_responders":
      return `no ${service ?? "Tack"} service answers; start Tack with \`tack up\``;
    case "gateway.loop_outdated":
      return `the loop service does not serve ${e.details.rpc ?? "this operation"} yet: the loops may be older than this gateway; upgrade the loops first, then the gateways, and retry`;
    case "bus.unreachable":
      return "the gateway cannot reach the message bus; retry shortly, and ask the operator to check NATS if it persists";
    case "bus.timeout":
      return `${named} did not answer in time; retry`;
    case "bus.request_failed":
      return `the request to ${named} failed on the way; retry`;
    case "internal":
      return "the gateway failed unexpectedly; retry, and give the operator the request id if it persists";
  }
  if (e instanceof GatewayError || e.code.startsWith("gateway.")) {
    return status === 503 ? "the gateway cannot serve this request right now; retry shortly"
      : "the gateway failed to handle the request; retry, and give the operator the request id if it persists";
  }
  // 503: a service the named one needs is not running (loop.tools_unavailable, …); 504: it was too slow.
  if (status === 503) return `${named} cannot serve this request right now; retry shortly, and start Tack with \`tack up\` if it persists`;
  if (status === 504) return `${named} did not finish in time; retry`;
  return `${named} failed to handle the request; retry, and give the operator the request id if it persists`;
}

/** The service a failure came from, by its code (`loop.…`) or bus subject (`<ns>.loop.…`); only known names, never the subject itself. */
function serviceOf(e: TackError): string | undefined {
  const fromCode = e.code.split(".")[0];
  if (fromCode && SERVICES.has(fromCode)) return fromCode;
  const fromSubject = e.details.subject?.split(".")[1];
  return fromSubject && SERVICES.has(fromSubject) ? fromSubject : undefined;
}

/**
 * The REST answer to a failure: status, body and headers (`www-authenticate` on 401,
 * `retry-after` when the refusal says when to retry, `connection: close` on 413 so that the rest
 * of an oversize upload is not read). A 5xx is logged by `toHttpError` under its request id.
 */
export function errorReply(error: unknown, options: { log?: Logger; fields?: Record<string, unknown> } = {}): { status: number; body: ErrorBody; headers: Record<string, string> } {
  const { status, body } = toHttpError(error, options);
  trace.getActiveSpan()?.recordException(error instanceof Error ? error : String(error));
  const headers: Record<string, string> = {};
  if (status === 401) headers["www-authenticate"] = 'Bearer realm="tack"';
  const retry = body.error.details?.retry_after_seconds;
  if (status === 429 && retry) headers["retry-after"] = retry;
  if (status === 413) headers.connection = "close";
  return { status, body, headers };
}

/** The gRPC status number for a failure: the catalogue's for its code, else the one that agrees with its HTTP status. */
export function grpcStatusOf(error: unknown): number {
  const e = TackError.from(error);
  const status = e instanceof GatewayError ? e.status : httpStatusOf(e.code);
  const catalogued = errorSpec(e.code);
  if (catalogued && (!(e instanceof GatewayError) || HTTP_FOR_GRPC[catalogued.grpc].some((http) => http === status))) return GRPC_STATUS_NUMBERS[catalogued.grpc];
  const byHttp: Record<number, GrpcStatus> = {
    400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 405: "UNIMPLEMENTED", 409: "FAILED_PRECONDITION",
    413: "INVALID_ARGUMENT", 415: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED",
  };
  return GRPC_STATUS_NUMBERS[byHttp[status] ?? "UNKNOWN"];
}
