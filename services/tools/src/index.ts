// The tools service: the model's tools, run in the session's sandbox over the bus.
export { startToolsService, type ToolsService, type ToolsServiceOptions } from "./service.js";
export { callTool, listTools, type CallToolContext } from "./registry.js";
export { BusSandboxClient, type SandboxClient } from "./sandbox.js";
export type { SpillReader } from "./tool.js";
