// The bus service: mcp.list and mcp.call over NATS, and micro discovery, with the operator's
// `run: "host"` servers (the sandboxed path is test/sandbox.test.ts).
import { randomBytes } from "node:crypto";
import { Bus, McpRpc } from "@tack/bus";
import { waitFor } from "@tack/testkit";
import { afterEach, beforeEach, expect, it } from "vitest";
import { startMcpService, type McpService } from "../src/index.js";
import { everything, stdio } from "./support.js";

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
let namespace: string;
let service: McpService;
let client: Bus;

beforeEach(async () => {
  namespace = `t${randomBytes(6).toString("hex")}`;
  service = await startMcpService({
    natsUrl: NATS_URL,
    namespace,
    servers: {
      everything: everything({ approval: { echo: "never" }, run: "host" }),
      broken: stdio(process.execPath, ["-e", "process.exit(2)"], { run: "host" }),
    },
    home: null,
  });
  client = await Bus.connect({ url: NATS_URL, namespace, name: "test-client" });
});
afterEach(async () => {
  await client.close();
  await service.stop();
});

const request = (sessionId: string) => ({ tenant: "acme", sessionId, workspace: "", sandboxMode: "workspace-write" });

it("lists tools and server states and calls a tool over the bus", async () => {
  const configured = await client.request(McpRpc.ListTools, request(""));
  expect(configured.servers.map((s) => [s.name, s.state, s.source, s.transport])).toEqual([["everything", "configured", "operator", "stdio"], ["broken", "configured", "operator", "stdio"]]);
  expect(configured.tools).toEqual([]);

  const listed = await client.request(McpRpc.ListTools, request("h1"), { timeoutMs: 60_000 });
  const echo = listed.tools.find((t) => t.publicName === "mcp__everything__echo")!;
  expect(echo).toMatchObject({ server: "everything", tool: "echo", approval: "never" });
  expect(JSON.parse(echo.parametersJson)).toMatchObject({ type: "object", required: ["message"] });
  expect(listed.tools.find((t) => t.tool === "get-sum")!.approval).toBe("ask");
  expect(listed.servers.map((s) => [s.name, s.state])).toEqual([["everything", "ready"], ["broken", "failed"]]);
  expect(listed.servers[1]!.error).toContain('MCP server "broken" did not start');
  expect(listed.servers[1]!.warnings).toEqual([listed.servers[1]!.error]);
  expect(listed.servers[0]!.tools).toContain("mcp__everything__echo");

  const call = await client.request(McpRpc.CallTool, { publicName: "mcp__everything__echo", argumentsJson: '{"message":"bus"}', callId: "c1", ...request("h1") });
  expect(call).toMatchObject({ content: "Echo: bus", isError: false, server: "everything", tool: "echo" });
  expect(JSON.parse(call.rawJson)).toEqual({ content: [{ type: "text", text: "Echo: bus" }] });
  expect(call.durationMs).toBeGreaterThan(0);

  // Host servers are shared: a second session gets the same client.
  await client.request(McpRpc.ListTools, request("h2"), { timeoutMs: 60_000 });
  expect(service.sessions.bridge("h2", "everything")).toBe(service.sessions.bridge("h1", "everything"));

  await expect(client.request(McpRpc.CallTool, { publicName: "mcp__nobody__x", argumentsJson: "{}", callId: "c2", ...request("h1") }))
    .rejects.toMatchObject({ code: "mcp.unknown_tool" });
  await expect(client.request(McpRpc.CallTool, { publicName: "mcp__everything__echo", argumentsJson: "{}", callId: "c3", ...request("") }))
    .rejects.toMatchObject({ code: "mcp.bad_request" });
});

it("answers micro discovery as tack-mcp in its namespace", async () => {
  // Other test runs on the same NATS answer too: find this namespace's instance among the answers.
  const replies = await client.nc.requestMany("$SRV.INFO.tack-mcp", undefined, { maxWait: 2_000 });
  const infos: Array<{ name: string; metadata: Record<string, string> }> = [];
  for await (const reply of replies) infos.push(JSON.parse(new TextDecoder().decode(reply.data)));
  const info = infos.find((i) => i.metadata.namespace === namespace)!;
  expect(info.name).toBe("tack-mcp");
  expect(info.metadata).toMatchObject({ namespace, service: "mcp" });
});

it("stops a session's clients after its idle time, and a host server no session uses any more", async () => {
  const idle = await startMcpService({ natsUrl: NATS_URL, namespace: `t${randomBytes(6).toString("hex")}`, servers: { everything: everything({ run: "host" }) }, home: null, idleMs: 300 });
  try {
    const listed = await idle.sessions.list({ ...request("i1") });
    expect(listed.servers[0]!.state).toBe("ready");
    const bridge = idle.sessions.bridge("i1", "everything")!;
    const pid = bridge.pid("everything")!;
    expect(() => process.kill(pid, 0)).not.toThrow();
    await waitFor("i1 idled out", () => (idle.sessions.sessions.length === 0 ? true : undefined), { timeoutMs: 10_000 });
    await waitFor("the host server stopped", () => {
      try {
        process.kill(pid, 0);
        return undefined;
      } catch {
        return true;
      }
    }, { timeoutMs: 10_000 });
  } finally {
    await idle.stop();
  }
});
