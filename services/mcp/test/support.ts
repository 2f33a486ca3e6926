// Shared pieces of the MCP bridge's tests: the installed reference servers and the fixture server.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { z } from "zod";
import type { StdioServerConfig } from "@tack/mcp-config";

const bin = (name: string) => fileURLToPath(new URL(`../../../node_modules/.bin/${name}`, import.meta.url));

/** A stdio server configuration with every optional field at its default. */
export function stdio(command: string, args: string[] = [], extra: Partial<StdioServerConfig> = {}): StdioServerConfig {
  return { command, args, env: {}, ...extra };
}

export const everything = (extra: Partial<StdioServerConfig> = {}) => stdio(bin("mcp-server-everything"), ["stdio"], extra);
export const filesystem = (dir: string) => stdio(bin("mcp-server-filesystem"), [dir]);
export const memory = (file: string) => stdio(bin("mcp-server-memory"), [], { env: { MEMORY_FILE_PATH: file } });
export const fixture = (flavour = "main", extra: Partial<StdioServerConfig> = {}) =>
  stdio(process.execPath, [fileURLToPath(new URL("./fixtures/server.mjs", import.meta.url)), flavour], extra);

/** A Streamable HTTP MCP server on 127.0.0.1 (stateless: a fresh server and transport per request). */
export async function startHttpServer(): Promise<{ url: string; close(): Promise<void>; headers: string[] }> {
  const headers: string[] = [];
  const http: Server = createServer(async (req, res) => {
    headers.push(String(req.headers["x-test"] ?? ""));
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = chunks.length ? JSON.parse(Buffer.concat(chunks).toString()) : undefined;
    const server = new McpServer({ name: "http-fixture", version: "1.0.0" });
    server.registerTool("add", { description: "adds two numbers", inputSchema: { a: z.number(), b: z.number() } }, async ({ a, b }) => ({ content: [{ type: "text", text: String(a + b) }] }));
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    res.on("close", () => void transport.close());
    await server.connect(transport);
    await transport.handleRequest(req, res, body);
  });
  await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve));
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    headers,
    close: () => new Promise<void>((resolve) => { http.closeAllConnections(); http.close(() => resolve()); }),
  };
}
