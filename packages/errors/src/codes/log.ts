import { spec } from "../spec.js";

/** Failures of the session log (`packages/log`) on JetStream. */
export const LOG_CODES = {
  "log.append_failed": spec(502, "UNAVAILABLE", false, "An event could not be appended to the session log (JetStream refused it, or NATS kept failing); check that NATS and the log stream are up, then retry."),
  "log.bad_limits": spec(500, "FAILED_PRECONDITION", false, "The operator configuration's `retention.log_max_bytes` or `log_max_age_days` is unusable (not positive, or shorter than the dedup window); fix it in the operator configuration."),
  "log.bad_replicas": spec(500, "FAILED_PRECONDITION", false, "The operator configuration's `log.replicas` is not 1, 3 or 5; set one of those."),
  "log.conflict": spec(502, "ABORTED", false, "Another writer appended to the session since this process last did, so it no longer owns the session and writes nothing more."),
  "log.event_too_large": spec(502, "INTERNAL", false, "An event is over the bus's payload limit; large content belongs in the object store with a reference in the log (a bug in the writer)."),
  "log.replicas_unavailable": spec(500, "FAILED_PRECONDITION", false, "NATS cannot keep the log with the replicas asked for; run a JetStream cluster of at least that many servers, or set log.replicas: 1."),
  "log.unknown_event_type": spec(500, "FAILED_PRECONDITION", false, "The log holds an event type this reader does not know and may not skip; upgrade Tack to read it."),
  "log.unsupported_format": spec(500, "FAILED_PRECONDITION", false, "The log was written in a format version this Tack does not read; upgrade Tack (newer log) or migrate it with an older release."),
} as const;
