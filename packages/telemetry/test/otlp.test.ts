// The exporter follows the standard OTEL_* variables: each protocol really delivers a span to a
// receiver on loopback (OTLP/HTTP JSON and protobuf, OTLP/gRPC over HTTP/2), a bad protocol or
// endpoint is refused naming the variable, and the SDK's sampler variables are honoured.
import { createServer as createHttpServer, type IncomingHttpHeaders } from "node:http";
import { createServer as createHttp2Server, type IncomingHttpHeaders as Http2Headers } from "node:http2";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { InMemorySpanExporter, SimpleSpanProcessor, type SpanExporter } from "@opentelemetry/sdk-trace-base";
import { NodeTracerProvider } from "@opentelemetry/sdk-trace-node";
import { traceExporterFromEnv } from "../src/index.js";

type Received = { path: string; headers: IncomingHttpHeaders | Http2Headers; body: Buffer };
const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});

/** An OTLP/HTTP receiver on loopback; resolves its base URL and what it received. */
async function httpReceiver(): Promise<{ url: string; received: Received[] }> {
  const received: Received[] = [];
  const server = createHttpServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      received.push({ path: req.url ?? "", headers: req.headers, body: Buffer.concat(chunks) });
      res.writeHead(200, { "content-type": String(req.headers["content-type"]) }).end(req.headers["content-type"] === "application/json" ? "{}" : "");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  closers.push(() => new Promise((resolve) => server.close(() => resolve())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, received };
}

/** An OTLP/gRPC receiver (h2c) on loopback answering each call with `grpcStatus`. */
async function grpcReceiver(grpcStatus = "0"): Promise<{ url: string; received: Received[] }> {
  const received: Received[] = [];
  const server = createHttp2Server();
  server.on("stream", (stream, headers) => {
    const chunks: Buffer[] = [];
    stream.on("data", (chunk: Buffer) => chunks.push(chunk));
    stream.on("end", () => {
      received.push({ path: String(headers[":path"]), headers, body: Buffer.concat(chunks) });
      stream.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
      stream.on("wantTrailers", () => stream.sendTrailers({ "grpc-status": grpcStatus, ...(grpcStatus === "0" ? {} : { "grpc-message": "bad request" }) }));
      // An empty ExportTraceServiceResponse.
      stream.end(Buffer.from([0, 0, 0, 0, 0]));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  closers.push(() => new Promise((resolve) => server.close(() => resolve())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, received };
}

/** Ends one span named `name` through `exporter` and waits for the export's outcome. */
async function exportOne(exporter: SpanExporter, name: string): Promise<void> {
  const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  provider.getTracer("otlp-test").startSpan(name).end();
  await provider.forceFlush();
  await provider.shutdown();
}

describe("OTLP exporter from OTEL_* variables", () => {
  it("otlp - no endpoint means no exporter", () => {
    expect(traceExporterFromEnv({})).toBeUndefined();
  });

  it("otlp - http/protobuf posts a protobuf request to <endpoint>/v1/traces", async () => {
    const receiver = await httpReceiver();
    await exportOne(traceExporterFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: `${receiver.url}/`, OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf" })!, "turn-protobuf");
    expect(receiver.received).toHaveLength(1);
    expect(receiver.received[0]).toMatchObject({ path: "/v1/traces", headers: { "content-type": "application/x-protobuf" } });
    expect(receiver.received[0]!.body.includes("turn-protobuf")).toBe(true);
    expect(() => JSON.parse(receiver.received[0]!.body.toString())).toThrow();
  });

  it("otlp - http/json (the default) posts JSON; a traces endpoint is used as the full URL", async () => {
    const receiver = await httpReceiver();
    await exportOne(traceExporterFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url })!, "turn-json");
    await exportOne(traceExporterFromEnv({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${receiver.url}/custom/traces`, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "http/json", OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" })!, "turn-json-2");
    expect(receiver.received.map((r) => [r.path, r.headers["content-type"]])).toEqual([["/v1/traces", "application/json"], ["/custom/traces", "application/json"]]);
    expect(JSON.stringify(JSON.parse(receiver.received[0]!.body.toString()))).toContain('"name":"turn-json"');
  });

  it("otlp - grpc calls TraceService/Export over HTTP/2 with one length-prefixed protobuf message", async () => {
    const receiver = await grpcReceiver();
    await exportOne(traceExporterFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" })!, "turn-grpc");
    expect(receiver.received).toHaveLength(1);
    const [call] = receiver.received;
    expect(call).toMatchObject({ path: "/opentelemetry.proto.collector.trace.v1.TraceService/Export", headers: { "content-type": "application/grpc", te: "trailers" } });
    expect(call!.body[0]).toBe(0);
    expect(call!.body.readUInt32BE(1)).toBe(call!.body.length - 5);
    expect(call!.body.includes("turn-grpc")).toBe(true);
  });

  it("otlp - a gRPC error status fails the export instead of being taken for success", async () => {
    const receiver = await grpcReceiver("3");
    const exporter = traceExporterFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" })!;
    const provider = new NodeTracerProvider();
    const span = provider.getTracer("otlp-test").startSpan("turn-refused");
    span.end();
    const result = await new Promise<{ code: number; error?: Error }>((resolve) => exporter.export([span as never], resolve));
    expect(result.code).toBe(1);
    expect(result.error?.message).toMatch(/grpc-status 3 bad request/);
    await exporter.shutdown();
  });

  it("otlp - a protocol or endpoint that is not OTLP is refused naming the variable", () => {
    expect(() => traceExporterFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://x:4318", OTEL_EXPORTER_OTLP_PROTOCOL: "thrift" }))
      .toThrow('OTEL_EXPORTER_OTLP_PROTOCOL is "thrift": use http/protobuf or http/json (OTLP/HTTP, Jaeger\'s port 4318) or grpc (port 4317)');
    expect(() => traceExporterFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: "jaeger:4318" })).toThrow(/OTEL_EXPORTER_OTLP_ENDPOINT is "jaeger:4318": give an http:\/\/ or https:\/\/ URL/);
  });

  it("otlp - the SDK's OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG choose what is recorded", async () => {
    const saved = { sampler: process.env.OTEL_TRACES_SAMPLER, arg: process.env.OTEL_TRACES_SAMPLER_ARG };
    try {
      const recorded = async (sampler: string, arg?: string) => {
        process.env.OTEL_TRACES_SAMPLER = sampler;
        if (arg === undefined) delete process.env.OTEL_TRACES_SAMPLER_ARG;
        else process.env.OTEL_TRACES_SAMPLER_ARG = arg;
        const memory = new InMemorySpanExporter();
        const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(memory)] });
        for (let i = 0; i < 200; i++) provider.getTracer("otlp-test").startSpan(`s${i}`).end();
        await provider.forceFlush();
        const count = memory.getFinishedSpans().length;
        await provider.shutdown();
        return count;
      };
      expect(await recorded("always_on")).toBe(200);
      expect(await recorded("always_off")).toBe(0);
      expect(await recorded("traceidratio", "0")).toBe(0);
      const some = await recorded("parentbased_traceidratio", "0.5");
      expect(some).toBeGreaterThan(40);
      expect(some).toBeLessThan(160);
    } finally {
      if (saved.sampler === undefined) delete process.env.OTEL_TRACES_SAMPLER;
      else process.env.OTEL_TRACES_SAMPLER = saved.sampler;
      if (saved.arg === undefined) delete process.env.OTEL_TRACES_SAMPLER_ARG;
      else process.env.OTEL_TRACES_SAMPLER_ARG = saved.arg;
    }
  });
});
