import { BusError } from "@tack/proto";

/** Base error of Tack: a stable `code`, a one-line message that says how to fix it, and whether retrying can help. */
export class TackError extends Error {
  readonly code: string;
  readonly retryable: boolean;
  readonly details: Readonly<Record<string, string>>;

  constructor(code: string, message: string, options: { retryable?: boolean; details?: Record<string, string>; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "TackError";
    this.code = code;
    this.retryable = options.retryable ?? false;
    this.details = options.details ?? {};
  }

  /** The wire form of this error. */
  toBusError(): BusError {
    return { code: this.code, message: this.message, retryable: this.retryable, details: { ...this.details } };
  }

  /** Rebuilds an error that crossed the bus. */
  static fromBusError(error: BusError): TackError {
    return new TackError(error.code, error.message, { retryable: error.retryable, details: error.details });
  }

  /** Wraps anything thrown into a TackError, keeping TackErrors as they are. */
  static from(error: unknown, code = "internal"): TackError {
    if (error instanceof TackError) return error;
    const message = error instanceof Error ? error.message : String(error);
    return new TackError(code, message, { cause: error });
  }
}
