// The MCP bridge service: tools of configured MCP servers (stdio or Streamable HTTP) over the bus.
export { startMcpService, type McpService, type McpServiceOptions } from "./service.js";
export { McpBridge, DESCRIPTION_CAP, type BackoffOptions, type BridgeOptions, type BridgeTool, type McpCallResult, type ServerState, type ServerStatus } from "./bridge.js";
export { importMcpConfig, loadMcpConfigFile, parseServers, type HttpServerConfig, type McpConfigFormat, type McpServerConfig, type StdioServerConfig } from "./config.js";
export { publicToolName, toolHash } from "./names.js";
export { renderContent } from "./content.js";
export { createTransport, serverEnv, spawnOnHost, PASSED_ENV, type Spawn, type SpawnedTransport } from "./transport.js";
