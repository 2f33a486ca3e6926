import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { InMemorySpanExporter, NodeTracerProvider, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-node";
import { TackError } from "@tack/bus";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { capResult, listTools, MAX_RESULT_BYTES } from "../src/registry.js";
import { makeWorkspace, type Workspace } from "./support/call.js";

let ws: Workspace;
beforeEach(async () => {
  ws = await makeWorkspace();
});
afterEach(async () => {
  await ws.remove();
});

describe("listing", () => {
  it("registry - standard lists its tools in a stable order", () => {
    expect(listTools("standard").map((tool) => tool.name)).toEqual(["read", "write", "edit", "glob", "grep", "bash", "job_list", "job_output", "job_kill", "todo_write", "ask_user_question", "exit_plan_mode", "session_search", "web_fetch", "web_search", "lsp"]);
  });

  it("registry - an unknown mode is a protocol error naming the known modes", () => {
    expect(() => listTools("turbo")).toThrow(TackError);
    expect(() => listTools("turbo")).toThrow('unknown tools mode "turbo"; known modes: standard');
  });
});

describe("calling", () => {
  it("registry - an unknown tool is a protocol error listing the available tools", async () => {
    const error = await ws.call("rm_rf", {}).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TackError);
    expect(error).toMatchObject({
      code: "tools.unknown_tool",
      message: 'unknown tool "rm_rf"; available tools: read, write, edit, glob, grep, bash, job_list, job_output, job_kill, todo_write, ask_user_question, exit_plan_mode, session_search, web_fetch, web_search, lsp',
    });
    expect(ws.sandbox.ensured).toHaveLength(0);
  });

  it("registry - invalid JSON is an error result that says so", async () => {
    const result = await ws.call("read", '{"path": ');
    expect(result.isError).toBe(true);
    expect(result.content).toMatch(/^Invalid arguments for read: not valid JSON \(.+\)$/);
    expect(ws.sandbox.ensured).toHaveLength(0);
  });

  it("registry - schema failures name each field", async () => {
    const result = await ws.call("read", { offset: "3", extra: true });
    expect(result).toMatchObject({
      isError: true,
      content:
        'Invalid arguments for read: path: Invalid input: expected string, received undefined; offset: Invalid input: expected number, received string; arguments: Unrecognized key: "extra"',
    });
  });

  it("registry - paths with NUL are rejected before reaching the sandbox", async () => {
    const result = await ws.call("write", { path: "a\u0000b", content: "x" });
    expect(result).toMatchObject({ isError: true, content: "Invalid arguments for write: path: must not contain NUL characters" });
    expect(ws.sandbox.ensured).toHaveLength(0);
  });

  it("registry - ensures the session's sandbox with the request's session, tenant, workspace and mode", async () => {
    await ws.call("glob", { pattern: "*" });
    expect(ws.sandbox.ensured).toEqual([{ sessionId: "s1", tenant: "t1", workspace: ws.root, mode: "workspace-write" }]);
  });

  it("registry - reports how long the call took", async () => {
    const result = await ws.call("bash", { command: "sleep 0.2" });
    expect(result.durationMs).toBeGreaterThanOrEqual(200);
  });

  it("registry - caps long results once for every tool, at what one bus message carries", async () => {
    // Each stream comes back at most 400,000 bytes, so both full streams plus the exit line pass the cap.
    const result = await ws.call("bash", { command: "head -c 500000 /dev/zero | tr '\\0' a; head -c 500000 /dev/zero | tr '\\0' b >&2" });
    expect(Buffer.byteLength(result.content)).toBeLessThanOrEqual(MAX_RESULT_BYTES);
    expect(result.content).toMatch(/^a{1000}/);
    expect(result.content).toMatch(/\n\n\.\.\. \[\d+ bytes left out\] \.\.\.\n\n/);
    expect(result.content).toMatch(/b{1000}\n\(output cut after 400000 bytes per stream; [^)]*\)\nexit code: 0$/);
  });

  it("registry - a result far over the log's spill threshold still comes back whole", async () => {
    const result = await ws.call("bash", { command: "head -c 120000 /dev/zero | tr '\\0' a; echo; echo END" });
    expect(result.content).toBe(`${"a".repeat(120_000)}\nEND\nexit code: 0`);
  });
});

describe("capResult", () => {
  it("capResult - keeps short text as it is", () => {
    expect(capResult("short")).toBe("short");
    expect(capResult("x".repeat(MAX_RESULT_BYTES))).toBe("x".repeat(MAX_RESULT_BYTES));
  });

  it("capResult - keeps head and tail and counts the bytes left out", () => {
    const text = "h".repeat(900_000) + "t".repeat(900_000);
    const capped = capResult(text);
    expect(Buffer.byteLength(capped)).toBeLessThanOrEqual(MAX_RESULT_BYTES);
    const match = /^(h+)\n\n\.\.\. \[(\d+) bytes left out\] \.\.\.\n\n(t+)$/.exec(capped);
    expect(match).not.toBeNull();
    expect(match![1]!.length + Number(match![2]) + match![3]!.length).toBe(text.length);
  });

  it("capResult - measures UTF-8 bytes and never cuts inside a character", () => {
    const text = "é".repeat(500_000); // 1,000,000 bytes, 2 per character
    const capped = capResult(text);
    expect(Buffer.byteLength(capped)).toBeLessThanOrEqual(MAX_RESULT_BYTES);
    expect(capped).not.toContain("\uFFFD");
    const match = /^(é+)\n\n\.\.\. \[(\d+) bytes left out\] \.\.\.\n\n(é+)$/.exec(capped);
    expect(match).not.toBeNull();
    expect(Buffer.byteLength(match![1]!) + Number(match![2]) + Buffer.byteLength(match![3]!)).toBe(1_000_000);
  });
});

describe("tracing", () => {
  const exporter = new InMemorySpanExporter();
  const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  beforeAll(() => provider.register({ contextManager: new AsyncLocalStorageContextManager() }));
  afterAll(() => provider.shutdown());

  it("registry - each call runs in span tool.<name> with call attributes and the outcome", async () => {
    await ws.call("read", { path: "missing.txt" });
    const span = exporter.getFinishedSpans().find((s) => s.name === "tool.read");
    expect(span?.attributes).toEqual({ "tool.name": "read", "tool.call_id": "call-1", "session.id": "s1", "tool.is_error": true });
  });
});
