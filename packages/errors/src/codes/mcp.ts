import { spec } from "../spec.js";

/** Refusals and failures of the MCP bridge (`services/mcp`). */
export const MCP_CODES = {
  "mcp.bad_request": spec(502, "INTERNAL", false, "A request to the MCP service misses a field it needs (such as the session id); this is a bug in the sender."),
  "mcp.invalid_config": spec(500, "FAILED_PRECONDITION", false, "The MCP server configuration is invalid (the message names the server and field); fix it and start the MCP service again."),
  "mcp.invalid_options": spec(500, "FAILED_PRECONDITION", false, "The MCP service's start-up options are invalid (NATS URL, namespace); fix the environment and start it again."),
  "mcp.http_refused": spec(403, "PERMISSION_DENIED", false, "An MCP server's URL (or a redirect) points at an address that is not public, or at another origin; use a public URL, or an operator allows the internal address with TACK_MCP_HTTP_ALLOW."),
  "mcp.start_failed": spec(502, "UNAVAILABLE", false, "An MCP server did not start or failed its handshake (the message quotes its stderr); fix the server's configuration."),
  "mcp.unavailable": spec(503, "UNAVAILABLE", true, "The MCP server is not ready (starting, reconnecting or failed); try again once it is ready."),
  "mcp.unknown_server": spec(404, "NOT_FOUND", false, "No MCP server of that name is configured; use one the message lists."),
  "mcp.unknown_tool": spec(404, "NOT_FOUND", false, "No MCP tool of that name is known now (its server dropped it or failed); list the current tools on mcp.list."),
} as const;
