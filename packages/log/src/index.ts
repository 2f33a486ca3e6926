// The session log on JetStream: single writer, validated reader, projection to the model request, the session's state, spilled results.
export { FORMAT_VERSION, LogConflictError, UnknownEventTypeError, UnsupportedFormatError } from "./errors.js";
export { draft, eventTypeInfo, isCase, materialize, now, timestampMs, type Draft, type EventOf, type Payload, type PayloadOf } from "./event.js";
export { deriveRequest, hookContextText, Projection, pruneText, serializeRequest, skillInvokedText, skillsCatalogText, type ModelRequest, type PrunePlan, type VisibleEntry } from "./projection.js";
export { SESSION_STATE_CASES, SessionState, sessionState, type SessionStateCase, type StateEvent, type TurnApproval, type Waiting } from "./session-state.js";
export { checkEvent, readAll, readSession, type ReadOptions } from "./reader.js";
export { parseSpillPath, SpillBucket, spillObjectName, spillPath, type SpillBucketOptions } from "./spill.js";
export { ensureLogStream, type LogStreamLimits, type LogStreamOptions } from "./stream.js";
export { SessionLogWriter, type SessionAddress } from "./writer.js";
