// OpenTelemetry setup shared by every service, and the one structured JSON logger (pino) that stamps trace ids.
import { context, propagation, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BatchSpanProcessor, NodeTracerProvider, type SpanProcessor } from "@opentelemetry/sdk-trace-node";
import { pino } from "pino";
import { traceExporterFromEnv } from "./otlp.js";

export { OTLP_PROTOCOLS, traceExporterFromEnv, type OtlpProtocol } from "./otlp.js";

/** Options for `initTelemetry`. */
export interface TelemetryOptions {
  /** `service.name` of every span this process exports, e.g. `tack-loop`. */
  serviceName: string;
  /**
   * OTLP base URL (e.g. http://127.0.0.1:4318); default OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (full URL) or
   * OTEL_EXPORTER_OTLP_ENDPOINT; none → spans are not exported. The transport is OTEL_EXPORTER_OTLP_PROTOCOL
   * (`http/json` by default, `http/protobuf`, `grpc`); the sampler is OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG,
   * read by the OpenTelemetry SDK (default parentbased_always_on).
   */
  endpoint?: string;
}

/** A running telemetry setup; `shutdown` flushes pending spans. */
export interface Telemetry {
  shutdown(): Promise<void>;
}

let active: Telemetry | undefined;

/**
 * Installs context propagation (W3C traceparent) and, when an OTLP endpoint is configured,
 * span export. Idempotent per process: later calls return the first setup.
 */
export function initTelemetry(options: TelemetryOptions): Telemetry {
  if (active) return active;
  let exporter: ReturnType<typeof traceExporterFromEnv>;
  try {
    exporter = traceExporterFromEnv(process.env, options.endpoint);
  } catch (error) {
    // A service's first step: a bad OTEL_* value stops it like any bad configuration, in one log line, before it connects anywhere.
    const component = options.serviceName.replace(/^tack-/, "");
    logger(component).error("start-up failed", { code: "config.invalid", error: (error as Error).message });
    process.exit(1);
  }
  const spanProcessors: SpanProcessor[] = exporter ? [new BatchSpanProcessor(exporter, { scheduledDelayMillis: 200 })] : [];
  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ "service.name": options.serviceName, "service.namespace": "tack" }),
    spanProcessors,
  });
  provider.register({ contextManager: new AsyncLocalStorageContextManager(), propagator: new W3CTraceContextPropagator() });
  active = { shutdown: () => provider.shutdown() };
  return active;
}

/** Makes sure trace context propagates in this process even without export (tests, tools). */
export function ensurePropagation(): void {
  if (!active && propagation.fields().length === 0) {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  }
}

/**
 * The one logger of every Tack service (pino underneath): one JSON line per record on stderr,
 * `{"level":"info","time":"<ISO 8601>","component":"loop",...,"msg":"..."}`, with the level as
 * a word, the fields given (and those of `child`), and `trace_id`/`span_id` of the active
 * OpenTelemetry span when there is one. An `Error` under `err` or `error` is written with its
 * type, message and stack.
 */
export interface Logger {
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
  /** A logger that adds `fields` to every record, e.g. `{ session, tenant }` for one session's work. */
  child(fields: Record<string, unknown>): Logger;
}

const errorField = (value: unknown) => (value instanceof Error ? pino.stdSerializers.err(value) : value);

const root = pino(
  {
    base: null,
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
    serializers: { err: errorField, error: errorField },
    mixin() {
      const span = trace.getSpan(context.active())?.spanContext();
      return span && trace.isSpanContextValid(span) ? { trace_id: span.traceId, span_id: span.spanId } : {};
    },
  },
  // Synchronous on Linux for files, pipes and terminals alike, so a line written just before
  // process.exit is not lost.
  process.stderr,
);

/** A logger for one component (`gateway`, `loop`, `tack-sandbox`, ...). */
export function logger(component: string): Logger {
  return wrap(root.child({ component }));
}

function wrap(log: pino.Logger): Logger {
  // The message is passed as the only argument after the fields: pino then never reads `%s`
  // and friends in it as format directives.
  return {
    info: (message, fields) => (fields ? log.info(fields, message) : log.info(message)),
    warn: (message, fields) => (fields ? log.warn(fields, message) : log.warn(message)),
    error: (message, fields) => (fields ? log.error(fields, message) : log.error(message)),
    child: (fields) => wrap(log.child(fields)),
  };
}
