import { spec } from "../spec.js";

/** Failures of the message bus itself (`packages/bus`), as any service's request or handler meets them. */
export const BUS_CODES = {
  "bus.bad_request": spec(502, "INTERNAL", false, "A service received a request it could not decode; the sender and the handler speak different contract versions, so run every service from the same Tack version."),
  "bus.bad_response": spec(502, "INTERNAL", false, "A reply could not be decoded as the rpc's response message; the replica that answered speaks another contract version, so run every service from the same Tack version."),
  "bus.forbidden": spec(502, "INTERNAL", false, "This service's NATS user may not publish to (or hear replies from) the subject it used; the permissions come from packages/config/src/bus-permissions.ts, so fix the table or the subject."),
  "bus.invalid_credentials": spec(500, "FAILED_PRECONDITION", false, "The NATS user name given to a service is not 1-64 letters, digits, '_' or '-'; fix TACK_NATS_CREDENTIALS or TACK_NATS_USER."),
  "bus.micro_invalid": spec(500, "FAILED_PRECONDITION", false, "A service could not register for NATS micro-service discovery because its name or version is malformed; use letters, digits, '-' or '_' and a semantic version."),
  "bus.no_responders": spec(503, "UNAVAILABLE", true, "No process of the service answers on its subject; start Tack with `tack up` (or the missing service) and retry."),
  "bus.payload_too_large": spec(502, "INTERNAL", false, "A message is over the bus's payload limit; large content must travel through the object store, so this is a bug in the sender."),
  "bus.request_failed": spec(502, "UNAVAILABLE", true, "A request failed on its way over NATS (connection lost or refused); retry, and check NATS if it persists."),
  "bus.timeout": spec(504, "DEADLINE_EXCEEDED", true, "The service did not answer within the request's timeout; retry, and look at that service's log if it persists."),
  "bus.unauthorized": spec(500, "FAILED_PRECONDITION", false, "NATS refused the service's user or password; check TACK_NATS_CREDENTIALS (or TACK_NATS_USER/TACK_NATS_PASSWORD) against the server's configuration."),
  "bus.unknown_route": spec(500, "INTERNAL", false, "An rpc was addressed with subject parameters it has no route for (e.g. a session route on an rpc served only by queue group); a bug in the caller: use the parameters its proto `subject:` lines declare."),
  "bus.unreachable": spec(503, "UNAVAILABLE", true, "NATS cannot be reached at the configured URL; start it with `tack up` or point NATS_URL at a running server."),
  "bus.worker_lost": spec(502, "UNAVAILABLE", true, "The process handling a request stopped sending heartbeats (it died or lost its connection) or none took it; the request is retried on another replica."),
  "bus.wrong_rpc": spec(502, "INTERNAL", false, "A request reached a subject that serves another rpc (or its reply came from one): caller and replica disagree on the contract; run every service from the same Tack version and regenerate the descriptors (`make gen`)."),
} as const;

/** Codes every part of Tack shares: an unexpected failure, and operator configuration refused at start. */
export const COMMON_CODES = {
  "internal": spec(500, "INTERNAL", false, "Something failed that Tack did not expect (a bug or an unhandled library error); retry, and give the operator the request id from the answer if it persists."),
  "config.invalid": spec(500, "FAILED_PRECONDITION", false, "A service's configuration (its environment or the operator configuration) holds a value it cannot use; the message names the setting, fix it and restart the service."),
} as const;
