// The MCP bridge service: tools of MCP servers (stdio in the session's sandbox, or Streamable HTTP) over the bus.
export { startMcpService, type McpService, type McpServiceOptions } from "./service.js";
export { McpBridge, DESCRIPTION_CAP, type BackoffOptions, type BridgeOptions, type BridgeTool, type McpCallResult, type ServerState, type ServerStatus } from "./bridge.js";
export { publicToolName, toolHash } from "./names.js";
export { renderContent } from "./content.js";
export { createTransport, serverEnv, spawnOnHost, PASSED_ENV, type HttpOptions, type Spawn, type SpawnedTransport } from "./transport.js";
export { checkHttpServer, guardedFetch, httpGuard, type HttpGuard } from "./http-guard.js";
export { sandboxSpawn, sandboxStdioSubjects, SandboxStdioTransport, type SandboxTarget } from "./sandbox-stdio.js";
export { ConfigSources, MAX_CONFIG_BYTES, SOURCE_OPERATOR, SOURCE_USER, SOURCE_WORKSPACE, type ConfiguredServer, type MergedConfig } from "./sources.js";
export { McpSessions, SESSION_IDLE_MS } from "./sessions.js";
