import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Bus, SandboxRpc, TackError, ToolsRpc } from "@tack/bus";
import { SpillBucket } from "@tack/log";
import { CallToolRequest } from "@tack/proto";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { waitFor } from "@tack/testkit";
import { startToolsService, type ToolsService } from "../src/index.js";
import { LocalSandboxClient } from "./support/local-sandbox.js";

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";

let namespace: string;
let root: string;
let client: Bus;
let sandboxResponder: Bus;
/** What the current sandbox responder runs the commands with (it records every request). */
let sandbox: LocalSandboxClient;
let service: ToolsService;

beforeEach(async () => {
  namespace = `t${randomBytes(6).toString("hex")}`;
  root = await mkdtemp(join(tmpdir(), "tack-tools-bus-"));
  // Test-only stand-in for the sandbox service on its subjects; the real one is tested end to end.
  sandboxResponder = await startSandboxResponder();
  service = await startToolsService({ natsUrl: NATS_URL, namespace });
  client = await Bus.connect({ url: NATS_URL, namespace, name: "test-client" });
});

async function startSandboxResponder(): Promise<Bus> {
  const sandboxResponder = await Bus.connect({ url: NATS_URL, namespace, name: "test-sandbox" });
  const local = new LocalSandboxClient(root);
  sandbox = local;
  const never = new AbortController().signal;
  sandboxResponder.serve(SandboxRpc.EnsureSandbox, async (request) => {
    await local.ensure(request);
    return { containerId: `local-${request.sessionId}`, created: local.ensured.length === 1, runtime: "local" };
  });
  sandboxResponder.serve(SandboxRpc.Exec, (request) => local.exec(request, never));
  await sandboxResponder.nc.flush();
  return sandboxResponder;
}

afterEach(async () => {
  await (await SpillBucket.open(client.nc, client.names))?.destroy();
  await service.stop();
  await client.close();
  await sandboxResponder.close();
  await rm(root, { recursive: true, force: true });
});

const call = (name: string, args: unknown, sessionId = "s1") =>
  client.request(ToolsRpc.CallTool, CallToolRequest.fromPartial({ sessionId, tenant: "t1", callId: "c1", name, arguments: JSON.stringify(args), workspace: root, sandboxMode: "workspace-write" }), );

describe("bus", () => {
  it("bus - tools.list returns the standard tools with their JSON Schemas", async () => {
    const response = await client.request(ToolsRpc.ListTools, { mode: "standard" });
    expect(response.tools.map((tool) => tool.name)).toEqual(["read", "write", "edit", "glob", "grep", "bash", "job_list", "job_output", "job_kill", "todo_write", "ask_user_question", "exit_plan_mode", "session_search", "web_fetch", "web_search", "lsp"]);
    expect(JSON.parse(response.tools[0]!.parametersJson)).toMatchObject({ type: "object", required: ["path"] });
  });

  it("bus - tools.list with an unknown mode answers tools.unknown_mode", async () => {
    const error = await client.request(ToolsRpc.ListTools, { mode: "nope" }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TackError);
    expect(error).toMatchObject({ code: "tools.unknown_mode" });
  });

  it("bus - tools.call runs write, read and bash through the sandbox subjects", async () => {
    expect(await call("write", { path: "notes/hello.txt", content: "hello\n" })).toMatchObject({ isError: false, content: "Wrote 6 bytes to notes/hello.txt" });
    expect(await readFile(join(root, "notes/hello.txt"), "utf8")).toBe("hello\n");
    expect(await call("read", { path: "notes/hello.txt" })).toMatchObject({ isError: false, content: "     1\thello" });
    const result = await call("bash", { command: "cat notes/hello.txt; exit 2" });
    expect(result).toMatchObject({ isError: true, content: "hello\nexit code: 2" });
    expect(result.durationMs).toBeGreaterThan(0);
  });

  it("bus - read of a tack-spill path reads the session's result from the object store, and only that session's", async () => {
    const notFound = (path: string) => ({ isError: true, content: `No spilled result ${path} in this session; use the exact path given in the note of the shortened tool result` });
    // Before anything was spilled in the namespace there is no bucket at all.
    expect(await call("read", { path: "tack-spill:big" })).toMatchObject(notFound("tack-spill:big"));
    const bucket = await SpillBucket.ensure(client.nc, client.names);
    const text = Array.from({ length: 5000 }, (_, i) => `row ${i + 1} ${"z".repeat(20)}`).join("\n");
    await bucket.put({ tenant: "t1", sessionId: "s1" }, "big", Buffer.from(text));
    expect(await call("read", { path: "tack-spill:big", offset: 4999 })).toMatchObject({ isError: false, content: `  4999\trow 4999 ${"z".repeat(20)}\n  5000\trow 5000 ${"z".repeat(20)}` });
    expect(await call("read", { path: "tack-spill:big" }, "s2")).toMatchObject(notFound("tack-spill:big"));
  });

  it("bus - tools.call with an unknown tool answers tools.unknown_tool", async () => {
    const error = await call("teleport", {}).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TackError);
    expect(error).toMatchObject({ code: "tools.unknown_tool", message: 'unknown tool "teleport"; available tools: read, write, edit, glob, grep, bash, job_list, job_output, job_kill, todo_write, ask_user_question, exit_plan_mode, session_search, web_fetch, web_search, lsp' });
  });

  it("bus - tools.call without a sandbox service retries for the window, then answers bus.no_responders", async () => {
    await service.stop();
    service = await startToolsService({ natsUrl: NATS_URL, namespace, retryWindowMs: 1_000 });
    await sandboxResponder.close();
    const started = performance.now();
    const error = await call("read", { path: "x" }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: "bus.no_responders", retryable: true });
    // It kept trying for about the window (not once, not forever).
    // It kept trying (at least two waits of the backoff: 125-250 ms, then 250-500 ms), not once and not forever.
    expect(performance.now() - started).toBeGreaterThan(300);
    expect(performance.now() - started).toBeLessThan(10_000);
  });

  it("bus - a sandbox service that comes back within the window answers the call, and each retry is reported", async () => {
    await sandboxResponder.close();
    await writeFile(join(root, "back.txt"), "I am back\n");
    const pending = call("read", { path: "back.txt" });
    // A sandbox outage of 700 ms (the scenario itself, not a wait for a condition): attempts in it find no responder.
    await new Promise((resolve) => setTimeout(resolve, 700));
    sandboxResponder = await startSandboxResponder();
    const response = await pending;
    expect(response.isError).toBe(false);
    expect(response.content).toContain("I am back");
    expect(response.retries.length).toBeGreaterThan(0);
    expect(response.retries[0]).toMatchObject({ attempt: 1, code: "bus.no_responders" });
  });

  it("bus - stopping the service answers in-flight calls with tools.cancelled", async () => {
    const pending = call("bash", { command: "sleep 5", timeout_ms: 5000 }).catch((e: unknown) => e);
    await waitFor("the command to reach the sandbox", () => sandbox.executed.some((request) => request.argv.join(" ").includes("sleep 5")), { timeoutMs: 5_000, intervalMs: 10 });
    await service.stop();
    expect(await pending).toMatchObject({ code: "tools.cancelled", retryable: true });
    service = await startToolsService({ natsUrl: NATS_URL, namespace });
  });
});
