// The span exporter chosen by the standard OpenTelemetry variables: OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT
// and OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL (`http/json`, `http/protobuf`, `grpc`). The HTTP ones are the
// OpenTelemetry SDK's; gRPC is a unary call over node:http2 (no gRPC library), carrying the same
// protobuf request the SDK serializes. @opentelemetry/otlp-exporter-base and otlp-transformer are the
// exact-version dependencies of @opentelemetry/exporter-trace-otlp-http.
import { connect, constants, type ClientHttp2Session } from "node:http2";
import { OTLPExporterBase, createOtlpNetworkExportDelegate, getSharedConfigurationDefaults, mergeOtlpSharedConfigurationWithDefaults, type ExportResponse, type IExporterTransport } from "@opentelemetry/otlp-exporter-base";
import { convertLegacyHttpOptions, createOtlpHttpExportDelegate, createOtlpHttpExporterMetrics } from "@opentelemetry/otlp-exporter-base/node-http";
import { ProtobufTraceSerializer, TraceExporterMetricsHelper } from "@opentelemetry/otlp-transformer";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import type { SpanExporter } from "@opentelemetry/sdk-trace-base";

/** The OTLP transports Tack exports spans over. */
export const OTLP_PROTOCOLS = ["http/json", "http/protobuf", "grpc"] as const;
export type OtlpProtocol = (typeof OTLP_PROTOCOLS)[number];

/** The gRPC method of the OTLP trace service. */
const GRPC_EXPORT_PATH = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
/** gRPC status codes the OTLP specification calls retryable (CANCELLED, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED, OUT_OF_RANGE, UNAVAILABLE, DATA_LOSS). */
const GRPC_RETRYABLE = new Set(["1", "4", "8", "10", "11", "14", "15"]);

/**
 * The exporter for `env`'s OTLP settings, or undefined when no endpoint is set (spans are then not
 * exported). `endpoint` (initTelemetry's option) takes the place of OTEL_EXPORTER_OTLP_ENDPOINT.
 * Throws naming the variable when the protocol is not one of OTLP_PROTOCOLS or the endpoint is not a URL.
 * Without a protocol it is `http/json` (what Tack always sent; Jaeger and collectors take both).
 */
export function traceExporterFromEnv(env: NodeJS.ProcessEnv = process.env, endpoint?: string): SpanExporter | undefined {
  const protocolVariable = env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ? "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" : "OTEL_EXPORTER_OTLP_PROTOCOL";
  const protocol = (env[protocolVariable] || "http/json").trim();
  if (!(OTLP_PROTOCOLS as readonly string[]).includes(protocol)) {
    throw new Error(`${protocolVariable} is ${JSON.stringify(protocol)}: use http/protobuf or http/json (OTLP/HTTP, Jaeger's port 4318) or grpc (port 4317)`);
  }
  // A signal-specific endpoint is the full URL; the general one is a base to which /v1/traces is added (HTTP).
  const full = endpoint === undefined ? env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT || undefined : undefined;
  const base = endpoint ?? (full ? undefined : env.OTEL_EXPORTER_OTLP_ENDPOINT || undefined);
  const raw = full ?? base;
  if (!raw) return undefined;
  const variable = endpoint !== undefined ? "the telemetry endpoint option" : full ? "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" : "OTEL_EXPORTER_OTLP_ENDPOINT";
  let url: URL;
  try {
    url = new URL(raw);
    if (url.protocol !== "http:" && url.protocol !== "https:") throw new Error("not http");
  } catch {
    throw new Error(`${variable} is ${JSON.stringify(raw)}: give an http:// or https:// URL such as http://jaeger:4318 (grpc: http://jaeger:4317)`);
  }
  if (protocol === "grpc") return grpcExporter(url);
  const traces = full ? raw : `${raw.replace(/\/$/, "")}/v1/traces`;
  if (protocol === "http/json") return new OTLPTraceExporter({ url: traces });
  return new OTLPExporterBase(createOtlpHttpExportDelegate(
    convertLegacyHttpOptions({ url: traces }, "TRACES", "v1/traces", { "Content-Type": "application/x-protobuf" }),
    ProtobufTraceSerializer, "otlp_http_span_exporter", TraceExporterMetricsHelper, undefined,
  )) as unknown as SpanExporter;
}

function grpcExporter(url: URL): SpanExporter {
  const options = mergeOtlpSharedConfigurationWithDefaults({}, {}, getSharedConfigurationDefaults());
  const metrics = createOtlpHttpExporterMetrics("otlp_grpc_span_exporter", TraceExporterMetricsHelper, url.href, undefined);
  return new OTLPExporterBase(createOtlpNetworkExportDelegate(options, ProtobufTraceSerializer, metrics, new GrpcTransport(url))) as unknown as SpanExporter;
}

/** One unary gRPC call per export over a kept HTTP/2 connection (h2c for http://, TLS for https://). */
class GrpcTransport implements IExporterTransport {
  readonly #origin: string;
  #session: ClientHttp2Session | undefined;

  constructor(url: URL) {
    this.#origin = url.origin;
  }

  #connect(): ClientHttp2Session {
    if (this.#session && !this.#session.closed && !this.#session.destroyed) return this.#session;
    const session = connect(this.#origin);
    // Errors end up in the request; the session must not crash the process nor keep it alive.
    session.on("error", () => undefined);
    session.unref();
    this.#session = session;
    return session;
  }

  send(data: Uint8Array, timeoutMillis: number): Promise<ExportResponse> {
    return new Promise((resolve) => {
      // A gRPC message: not compressed (0), its length (4 bytes, big-endian), the protobuf.
      const frame = Buffer.alloc(5 + data.length);
      frame.writeUInt32BE(data.length, 1);
      frame.set(data, 5);
      let request;
      try {
        request = this.#connect().request({ ":method": "POST", ":path": GRPC_EXPORT_PATH, "content-type": "application/grpc", te: "trailers" });
      } catch (error) {
        resolve({ status: "retryable", error: error as Error });
        return;
      }
      let status: string | undefined;
      let message = "";
      const chunks: Buffer[] = [];
      const settle = (headers: Record<string, unknown>) => {
        if (headers["grpc-status"] !== undefined) status = String(headers["grpc-status"]);
        if (headers["grpc-message"] !== undefined) message = decodeURIComponent(String(headers["grpc-message"]));
      };
      request.setTimeout(timeoutMillis, () => {
        request.close(constants.NGHTTP2_CANCEL);
        resolve({ status: "retryable", error: new Error(`OTLP gRPC export to ${this.#origin} timed out after ${timeoutMillis} ms`) });
      });
      request.on("response", settle);
      request.on("trailers", settle);
      request.on("data", (chunk: Buffer) => chunks.push(chunk));
      request.on("error", (error) => resolve({ status: "retryable", error }));
      request.on("close", () => {
        if (status === "0") resolve({ status: "success", data: Buffer.concat(chunks).subarray(5) });
        else if (status !== undefined && !GRPC_RETRYABLE.has(status)) resolve({ status: "failure", error: new Error(`OTLP gRPC export to ${this.#origin} failed: grpc-status ${status} ${message}`.trim()) });
        else resolve({ status: "retryable", error: new Error(`OTLP gRPC export to ${this.#origin} failed: ${status === undefined ? "no grpc-status" : `grpc-status ${status} ${message}`}`.trim()) });
      });
      request.end(frame);
    });
  }

  shutdown(): void {
    this.#session?.close();
    this.#session = undefined;
  }
}
