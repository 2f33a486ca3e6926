import { randomBytes } from "node:crypto";
import { trace } from "@opentelemetry/api";
import { TackError } from "@tack/bus";
import { logger, type Logger } from "@tack/telemetry";
import { sendJson, type Interceptor } from "./http.js";

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

/** Refusals from the loop (and the llm checks it runs) that are the caller's to fix, with the status that says so. */
const CALLER_ERROR_STATUS: Record<string, number> = {
  "loop.unknown_mode": 400,
  "loop.bad_sandbox_mode": 400,
  "loop.bad_approval_policy": 400,
  "loop.missing_model": 400,
  "loop.bad_workspace": 400,
  "loop.empty_message": 400,
  "loop.unknown_session": 404,
  "loop.session_exists": 409,
  "loop.busy": 409,
  "loop.session_busy": 409,
  "loop.bad_budget": 400,
  "loop.bad_decision": 400,
  "loop.no_pending_approval": 404,
  "loop.mode_change_refused": 409,
  "loop.no_pending_question": 404,
  "loop.no_pending_plan": 404,
  "loop.bad_answer": 400,
  "loop.mode_fixed": 409,
  "loop.bad_plan_mode": 400,
  "llm.unknown_model": 400,
  "llm.missing_key": 400,
  "llm.bad_script": 400,
};

// Services named in 5xx sentences; a subject or code naming anything else says "a Tack service".
const SERVICES = new Set(["loop", "llm", "tools", "sandbox"]);

const defaultLog = logger("gateway");

/**
 * Maps any failure to an HTTP status and body. Bus failures keep their TackError code so a
 * client can tell "no loop is running" (503) from "the loop is too slow" (504) from "the loop
 * refused" (502); anything else unexpected is a 500. A 5xx body says only what happened and
 * what the caller can do, in a fixed sentence per code, with a request id: the failure's own
 * message and details can hold internal subjects, host paths or stack text, so they go to
 * `options.log` (default the gateway's logger) under that id and never to the caller.
 */
export function toHttpError(error: unknown, options: { log?: Logger; fields?: Record<string, unknown> } = {}): { status: number; body: ErrorBody } {
  const e = TackError.from(error);
  let status: number;
  if (e instanceof GatewayError) status = e.status;
  else if (e.code === "bus.no_responders" || e.code === "bus.unreachable") status = 503;
  else if (e.code === "bus.timeout") status = 504;
  else if (e.code === "internal") status = 500;
  else if (e.code in CALLER_ERROR_STATUS) status = CALLER_ERROR_STATUS[e.code]!;
  else status = 502;
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
  switch (e.code) {
    case "bus.no_responders":
      return `no ${service ?? "Tack"} service answers; start Tack with \`tack up\``;
    case "bus.unreachable":
      return "the gateway cannot reach the message bus; retry shortly, and ask the operator to check NATS if it persists";
    case "bus.timeout":
      return `${named} did not answer in time; retry`;
    case "bus.request_failed":
      return `the request to ${named} failed on the way; retry`;
    case "internal":
      return "the gateway failed unexpectedly; retry, and give the operator the request id if it persists";
  }
  if (e instanceof GatewayError) {
    return status === 503 ? "the gateway cannot serve this request right now; retry shortly"
      : "the gateway failed to handle the request; retry, and give the operator the request id if it persists";
  }
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
 * Turns anything a handler throws into a JSON error response (`{ error: { code, message } }`),
 * recording it on the request span and logging server-side failures.
 */
export function respondWithErrors(log: Logger): Interceptor {
  return async (exchange, next) => {
    try {
      await next();
    } catch (error) {
      // A 5xx is logged by toHttpError with its full message, under the request id its body carries.
      const { status, body } = toHttpError(error, { log, fields: { method: exchange.req.method, route: exchange.route } });
      trace.getActiveSpan()?.recordException(error as Error);
      if (exchange.res.headersSent) {
        exchange.res.end();
        return;
      }
      const headers: Record<string, string> = {};
      if (status === 401) headers["www-authenticate"] = 'Bearer realm="tack"';
      // Do not read the rest of an oversize upload: close the connection after answering.
      if (status === 413) headers.connection = "close";
      sendJson(exchange.res, status, body, headers);
    }
  };
}
