/**
 * A failure of a gateway request, typed: the HTTP status (0 when no answer came), the gateway's
 * error code (`gateway.session_not_found`, `loop.busy`, …, or `client.*` for failures the
 * client itself saw), its message, `details` (limits, values) and, for a 5xx, the request id
 * the gateway logged it under.
 */
export class TackApiError extends Error {
  readonly status: number;
  readonly code: string;
  readonly details: Readonly<Record<string, string>>;
  readonly requestId: string | undefined;

  constructor(status: number, code: string, message: string, options: { details?: Record<string, string>; requestId?: string; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "TackApiError";
    this.status = status;
    this.code = code;
    this.details = { ...(options.details ?? {}) };
    this.requestId = options.requestId;
  }

  /**
   * True when trying again may work: no answer (status 0), 408, 429 and every 5xx. A caller's
   * mistake (any other 4xx) stays the same however often it is sent.
   */
  get retryable(): boolean {
    return this.status === 0 || this.status === 408 || this.status === 429 || this.status >= 500;
  }
}

/** The gateway's error body: `{ error: { code, message, details?, request_id? } }`. */
export interface ErrorBody {
  error: { code: string; message: string; details?: Record<string, string>; request_id?: string };
}

/** Reads an error body if `value` is one, else undefined. */
export function errorFromBody(status: number, value: unknown): TackApiError | undefined {
  if (!value || typeof value !== "object") return undefined;
  const error = (value as { error?: unknown }).error;
  if (!error || typeof error !== "object") return undefined;
  const { code, message, details, request_id: requestId } = error as Record<string, unknown>;
  if (typeof code !== "string" || typeof message !== "string") return undefined;
  const stringDetails: Record<string, string> = {};
  if (details && typeof details === "object") {
    for (const [k, v] of Object.entries(details as Record<string, unknown>)) stringDetails[k] = String(v);
  }
  return new TackApiError(status, code, message, { details: stringDetails, requestId: typeof requestId === "string" ? requestId : undefined });
}

/**
 * True when `error` says the gateway lacks the operation (an older gateway): 404
 * `gateway.route_not_found`, 405 or 501. Callers can then say the operation is not available yet.
 */
export function isUnavailable(error: unknown): boolean {
  if (!(error instanceof TackApiError)) return false;
  if (error.status === 405 || error.status === 501) return true;
  return error.status === 404 && (error.code === "gateway.route_not_found" || error.code.startsWith("client."));
}
