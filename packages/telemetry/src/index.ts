// OpenTelemetry setup shared by every service, and a structured JSON logger that stamps trace ids.
import { context, propagation, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BatchSpanProcessor, NodeTracerProvider, type SpanProcessor } from "@opentelemetry/sdk-trace-node";

/** Options for `initTelemetry`. */
export interface TelemetryOptions {
  /** `service.name` of every span this process exports, e.g. `tack-loop`. */
  serviceName: string;
  /** OTLP/HTTP base URL (e.g. http://127.0.0.1:4318); default from OTEL_EXPORTER_OTLP_ENDPOINT; none → spans are not exported. */
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
  const endpoint = options.endpoint ?? process.env.OTEL_EXPORTER_OTLP_ENDPOINT;
  const spanProcessors: SpanProcessor[] = endpoint
    ? [new BatchSpanProcessor(new OTLPTraceExporter({ url: `${endpoint.replace(/\/$/, "")}/v1/traces` }), { scheduledDelayMillis: 200 })]
    : [];
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

/** Structured JSON logger writing one line per record to stderr. */
export interface Logger {
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

/** A logger for one component; each record carries the active trace and span ids. */
export function logger(component: string): Logger {
  const write = (level: string, message: string, fields: Record<string, unknown> = {}) => {
    const span = trace.getSpan(context.active())?.spanContext();
    const record = { time: new Date().toISOString(), level, component, message, ...fields, ...(span ? { trace_id: span.traceId, span_id: span.spanId } : {}) };
    process.stderr.write(`${JSON.stringify(record)}\n`);
  };
  return {
    info: (m, f) => write("info", m, f),
    warn: (m, f) => write("warn", m, f),
    error: (m, f) => write("error", m, f),
  };
}
