import { trace } from "@opentelemetry/api";
import { TackError } from "@tack/bus";
import type { Logger } from "@tack/telemetry";
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

/** The JSON body of every error response. */
export interface ErrorBody {
  error: { code: string; message: string; details?: Record<string, string> };
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
  "llm.unknown_model": 400,
  "llm.missing_key": 400,
  "llm.bad_script": 400,
};

/**
 * Maps any failure to an HTTP status and body. Bus failures keep their TackError code so a
 * client can tell "no loop is running" (503) from "the loop is too slow" (504) from "the loop
 * refused" (502); anything else unexpected is a 500.
 */
export function toHttpError(error: unknown): { status: number; body: ErrorBody } {
  const e = TackError.from(error);
  const details = Object.keys(e.details).length > 0 ? { details: { ...e.details } } : {};
  let status: number;
  let message = e.message;
  if (e instanceof GatewayError) status = e.status;
  else if (e.code === "bus.no_responders") {
    status = 503;
    message = "no loop service answers; start Tack with `tack up`";
  } else if (e.code === "bus.unreachable") status = 503;
  else if (e.code === "bus.timeout") status = 504;
  else if (e.code === "internal") status = 500;
  else if (e.code in CALLER_ERROR_STATUS) status = CALLER_ERROR_STATUS[e.code]!;
  else status = 502;
  return { status, body: { error: { code: e.code, message, ...details } } };
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
      const { status, body } = toHttpError(error);
      trace.getActiveSpan()?.recordException(error as Error);
      if (status >= 500) log.error("request failed", { method: exchange.req.method, route: exchange.route, code: body.error.code, error: (error as Error).message });
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
