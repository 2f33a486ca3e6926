// @tack/client: a typed client of Tack's gateway (REST + SSE) for browsers and Node.
export { TackClient, type TackClientOptions } from "./client.js";
export { TackApiError, errorFromBody, isUnavailable, type ErrorBody } from "./errors.js";
export { eventTimeMs, type EventJson, type EventPayloads, type ToolCallJson, type UsageJson } from "./events.js";
export { sseMessages, streamSessionEvents, type EventStreamOptions, type ReconnectOptions, type StreamRequest, type StreamState } from "./sse.js";
export type * from "./types.js";
