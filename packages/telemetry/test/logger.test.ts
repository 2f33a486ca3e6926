import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { trace } from "@opentelemetry/api";
import { afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { initTelemetry, logger } from "../src/index.js";

/** Runs `write` and returns the JSON records it wrote to stderr. */
function captured(write: () => void): Record<string, unknown>[] {
  const chunks: string[] = [];
  const spy = vi.spyOn(process.stderr, "write").mockImplementation((chunk: string | Uint8Array) => {
    chunks.push(typeof chunk === "string" ? chunk : Buffer.from(chunk).toString("utf8"));
    return true;
  });
  try {
    write();
  } finally {
    spy.mockRestore();
  }
  const text = chunks.join("");
  expect(text.endsWith("\n")).toBe(true);
  return text.trimEnd().split("\n").map((line) => JSON.parse(line) as Record<string, unknown>);
}

beforeAll(() => {
  // A tracer provider without export: spans get real ids, nothing leaves the process.
  initTelemetry({ serviceName: "tack-telemetry-test", endpoint: "" });
});

afterEach(() => vi.restoreAllMocks());

describe("logger", () => {
  it("logger - writes one JSON line per record with time, level word, component, msg and fields", () => {
    const log = logger("gateway");
    const before = Date.now();
    const records = captured(() => {
      log.info("listening", { url: "http://127.0.0.1:7700", port: 7700 });
      log.warn("slow", { ms: 1200 });
      log.error("failed");
    });
    expect(records).toHaveLength(3);
    expect(records.map((r) => r.level)).toEqual(["info", "warn", "error"]);
    expect(records[0]).toEqual({ level: "info", time: expect.any(String), component: "gateway", url: "http://127.0.0.1:7700", port: 7700, msg: "listening" });
    expect(records[1]).toMatchObject({ component: "gateway", ms: 1200, msg: "slow" });
    expect(records[2]).toEqual({ level: "error", time: expect.any(String), component: "gateway", msg: "failed" });
    const time = Date.parse(records[0]!.time as string);
    expect(records[0]!.time).toBe(new Date(time).toISOString());
    expect(time).toBeGreaterThanOrEqual(before - 1);
    expect(time).toBeLessThanOrEqual(Date.now());
    // Outside any span there are no trace ids.
    for (const record of records) expect(record).not.toHaveProperty("trace_id");
  });

  it("logger - stamps the active span's trace_id and span_id on every record inside it", () => {
    const log = logger("loop");
    const tracer = trace.getTracer("telemetry-test");
    let ids: { traceId: string; spanId: string } | undefined;
    let innerIds: { traceId: string; spanId: string } | undefined;
    const records = captured(() => {
      tracer.startActiveSpan("turn", (span) => {
        ids = span.spanContext();
        log.info("turn started");
        tracer.startActiveSpan("step", (inner) => {
          innerIds = inner.spanContext();
          log.warn("step slow");
          inner.end();
        });
        span.end();
      });
      log.info("after the span");
    });
    expect(ids!.traceId).toMatch(/^[0-9a-f]{32}$/);
    expect(records[0]).toMatchObject({ msg: "turn started", trace_id: ids!.traceId, span_id: ids!.spanId });
    expect(records[1]).toMatchObject({ msg: "step slow", trace_id: ids!.traceId, span_id: innerIds!.spanId });
    expect(innerIds!.spanId).not.toBe(ids!.spanId);
    expect(records[2]).not.toHaveProperty("trace_id");
    expect(records[2]).not.toHaveProperty("span_id");
  });

  it("logger - a child adds its fields to every record, and children nest", () => {
    const log = logger("loop");
    const session = log.child({ session: "s1", tenant: "acme" });
    const turn = session.child({ turn: 3 });
    const records = captured(() => {
      session.info("session loaded");
      turn.error("tool failed", { tool: "bash" });
      log.info("parent unchanged");
    });
    expect(records[0]).toEqual({ level: "info", time: expect.any(String), component: "loop", session: "s1", tenant: "acme", msg: "session loaded" });
    expect(records[1]).toEqual({ level: "error", time: expect.any(String), component: "loop", session: "s1", tenant: "acme", turn: 3, tool: "bash", msg: "tool failed" });
    expect(records[2]).not.toHaveProperty("session");
    expect(records[2]).not.toHaveProperty("tenant");
  });

  it("logger - writes messages verbatim and errors with their message and stack", () => {
    const records = captured(() => logger("llm").warn("100% of %s used", { error: new Error("boom"), note: "a \"quoted\"\nline" }));
    expect(records).toHaveLength(1);
    expect(records[0]!.msg).toBe("100% of %s used");
    expect(records[0]!.note).toBe("a \"quoted\"\nline");
    expect(records[0]!.error).toMatchObject({ type: "Error", message: "boom", stack: expect.stringContaining("Error: boom") });
  });

  it("logger - writes to stderr only, and a line written right before process.exit is kept", () => {
    const script = [
      `import { logger } from ${JSON.stringify(join(import.meta.dirname, "../src/index.ts"))};`,
      `logger("tack-tools").error("could not connect", { code: "bus.unreachable" });`,
      "process.exit(1);",
    ].join("\n");
    const result = spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], { encoding: "utf8", cwd: import.meta.dirname });
    expect(result.status).toBe(1);
    expect(result.stdout).toBe("");
    const lines = result.stderr.trimEnd().split("\n");
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0]!)).toMatchObject({ level: "error", component: "tack-tools", code: "bus.unreachable", msg: "could not connect" });
  });
});
