// The bus service: mcp.list and mcp.call over NATS, and micro discovery.
import { randomBytes } from "node:crypto";
import { Bus } from "@tack/bus";
import { CallMcpToolRequest, CallMcpToolResponse, ListMcpToolsRequest, ListMcpToolsResponse } from "@tack/proto";
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
      everything: everything({ approval: { echo: "never" } }),
      broken: stdio(process.execPath, ["-e", "process.exit(2)"]),
    },
  });
  client = await Bus.connect({ url: NATS_URL, namespace, name: "test-client" });
});
afterEach(async () => {
  await client.close();
  await service.stop();
});

it("lists tools and server states and calls a tool over the bus", async () => {
  const listed = await client.request(client.names.mcpList, ListMcpToolsRequest, {}, ListMcpToolsResponse);
  const echo = listed.tools.find((t) => t.publicName === "mcp__everything__echo")!;
  expect(echo).toMatchObject({ server: "everything", tool: "echo", approval: "never" });
  expect(JSON.parse(echo.parametersJson)).toMatchObject({ type: "object", required: ["message"] });
  expect(listed.tools.find((t) => t.tool === "get-sum")!.approval).toBe("ask");
  expect(listed.servers.map((s) => [s.name, s.state])).toEqual([["everything", "ready"], ["broken", "failed"]]);
  expect(listed.servers[1]!.error).toContain('MCP server "broken" did not start');
  expect(listed.servers[0]!.tools).toContain("mcp__everything__echo");

  const call = await client.request(client.names.mcpCall, CallMcpToolRequest, { publicName: "mcp__everything__echo", argumentsJson: '{"message":"bus"}', callId: "c1" }, CallMcpToolResponse);
  expect(call).toMatchObject({ content: "Echo: bus", isError: false });
  expect(JSON.parse(call.rawJson)).toEqual({ content: [{ type: "text", text: "Echo: bus" }] });
  expect(call.durationMs).toBeGreaterThan(0);

  await expect(client.request(client.names.mcpCall, CallMcpToolRequest, { publicName: "mcp__nobody__x", argumentsJson: "{}", callId: "c2" }, CallMcpToolResponse))
    .rejects.toMatchObject({ code: "mcp.unknown_tool" });
});

it("answers micro discovery as tack-mcp in its namespace", async () => {
  const reply = await client.nc.request("$SRV.INFO.tack-mcp", undefined, { timeout: 5_000 });
  const info = JSON.parse(new TextDecoder().decode(reply.data)) as { name: string; metadata: Record<string, string> };
  expect(info.name).toBe("tack-mcp");
  expect(info.metadata).toMatchObject({ namespace, service: "mcp" });
});
