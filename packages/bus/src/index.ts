// The bus: typed protobuf request/reply over NATS, subjects and trace propagation.
export { Bus, ERROR_HEADER, inboxPrefix, MAX_BUS_PAYLOAD, type BusAuth, type BusCredentials, type BusOptions, type BusTls, type Codec, type RequestContext } from "./bus.js";
export { TackError } from "./errors.js";
export { assertToken, names, type Names } from "./subjects.js";
export { extractTrace, injectTrace, inSpan } from "./trace.js";
export { requestStream, serveStream, type StreamWriter } from "./stream.js";
export { retryAfterMs, retryDelay, retrying, retryPolicy, type RetryNote, type RetryOptions, type RetryPolicy } from "./retry.js";
