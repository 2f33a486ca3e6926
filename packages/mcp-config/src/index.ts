// MCP server configuration: validation and the imports of .mcp.json, Claude Desktop's and Codex's files; shared by the MCP bridge and `tack mcp`.
export {
  Approval, HttpServerConfig, importMcpConfig, importMcpJsonLenient, loadMcpConfigFile, parseServers, parseServersLenient, StdioServerConfig,
  type LenientServers, type McpConfigFormat, type McpServerConfig,
} from "./config.js";
