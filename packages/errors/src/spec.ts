/** The 17 status codes of gRPC, by the names grpc gives them (`OK` is never an error's). */
export type GrpcStatus =
  | "OK" | "CANCELLED" | "UNKNOWN" | "INVALID_ARGUMENT" | "DEADLINE_EXCEEDED" | "NOT_FOUND" | "ALREADY_EXISTS"
  | "PERMISSION_DENIED" | "RESOURCE_EXHAUSTED" | "FAILED_PRECONDITION" | "ABORTED" | "OUT_OF_RANGE" | "UNIMPLEMENTED"
  | "INTERNAL" | "UNAVAILABLE" | "DATA_LOSS" | "UNAUTHENTICATED";

/** Each gRPC status name with its number on the wire. */
export const GRPC_STATUS_NUMBERS: Readonly<Record<GrpcStatus, number>> = {
  OK: 0, CANCELLED: 1, UNKNOWN: 2, INVALID_ARGUMENT: 3, DEADLINE_EXCEEDED: 4, NOT_FOUND: 5, ALREADY_EXISTS: 6,
  PERMISSION_DENIED: 7, RESOURCE_EXHAUSTED: 8, FAILED_PRECONDITION: 9, ABORTED: 10, OUT_OF_RANGE: 11, UNIMPLEMENTED: 12,
  INTERNAL: 13, UNAVAILABLE: 14, DATA_LOSS: 15, UNAUTHENTICATED: 16,
};

/** The HTTP statuses Tack answers errors with. */
export type HttpStatus = 400 | 401 | 403 | 404 | 405 | 409 | 413 | 415 | 429 | 500 | 502 | 503 | 504;

/**
 * What one error code means to whoever receives it.
 *
 * - `http`: the status the gateway answers when the code reaches it. A failure inside a service
 *   behind the gateway that the caller cannot fix is 502 (503 when a service is not running,
 *   504 when it is too slow); the gateway's own failures are 500 or 503. Codes that never cross
 *   HTTP (`cli.*`, `launch.*`, `testkit.*`) carry the status their meaning has.
 * - `grpc`: the gRPC status for the same failure, in agreement with `http`.
 * - `retryable`: the default of `TackError.retryable` for the code (true when the same request
 *   may succeed later unchanged); a site may decide otherwise where the catalogue says "may".
 * - `meaning`: one sentence: what went wrong and what to do about it.
 */
export interface ErrorSpec {
  readonly http: HttpStatus;
  readonly grpc: Exclude<GrpcStatus, "OK">;
  readonly retryable: boolean;
  readonly meaning: string;
}

/** Shorthand for one catalogue entry. */
export function spec(http: HttpStatus, grpc: Exclude<GrpcStatus, "OK">, retryable: boolean, meaning: string): ErrorSpec {
  return { http, grpc, retryable, meaning };
}

/**
 * The HTTP statuses each gRPC status may pair with in the catalogue (gRPC's own HTTP mapping,
 * plus 409 for state conflicts and 502 for a failure behind the gateway, such as a sandbox host
 * that is not set up: FAILED_PRECONDITION).
 */
export const HTTP_FOR_GRPC: Readonly<Record<Exclude<GrpcStatus, "OK">, readonly HttpStatus[]>> = {
  CANCELLED: [503],
  UNKNOWN: [500, 502],
  INVALID_ARGUMENT: [400, 413, 415],
  DEADLINE_EXCEEDED: [504],
  NOT_FOUND: [404],
  ALREADY_EXISTS: [409],
  PERMISSION_DENIED: [403],
  RESOURCE_EXHAUSTED: [413, 429],
  FAILED_PRECONDITION: [400, 409, 500, 502],
  ABORTED: [409, 502],
  OUT_OF_RANGE: [400, 413],
  UNIMPLEMENTED: [405],
  INTERNAL: [500, 502],
  UNAVAILABLE: [502, 503],
  DATA_LOSS: [500, 502],
  UNAUTHENTICATED: [401],
};
