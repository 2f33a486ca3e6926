import { TackError } from "@tack/bus";

/** The log format version this code writes and reads. */
export const FORMAT_VERSION = 1;

/** Raised when a log holds an event type this reader does not know and may not skip. */
export class UnknownEventTypeError extends TackError {
  constructor(type: string, seq: number) {
    super(
      "log.unknown_event_type",
      `event ${seq} has type ${JSON.stringify(type)}, unknown to this reader and not ignorable; upgrade Tack to read this log (reader knows format v${FORMAT_VERSION})`,
      { details: { type, seq: String(seq) } },
    );
  }
}

/** Raised when a log was written in a format version this reader does not know. */
export class UnsupportedFormatError extends TackError {
  constructor(version: number) {
    const side = version > FORMAT_VERSION ? "the log is newer than this Tack: upgrade Tack" : "the log is older than any format this Tack reads: migrate it with an older release";
    super("log.unsupported_format", `log format v${version} is not supported (this reader knows v${FORMAT_VERSION}); ${side}`, {
      details: { version: String(version) },
    });
  }
}

/** Raised when an append finds that someone else wrote to the session since we last did. */
export class LogConflictError extends TackError {
  constructor(subject: string, expected: number, cause?: unknown) {
    super(
      "log.conflict",
      `another writer appended to ${subject} (expected last stream sequence ${expected}); this process no longer owns the session`,
      { details: { subject, expected: String(expected) }, cause },
    );
  }
}
