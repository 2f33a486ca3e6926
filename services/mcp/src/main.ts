// Executable entry of the MCP bridge: `tsx services/mcp/src/main.ts` (env NATS_URL, TACK_NAMESPACE,
// TACK_MCP_CONFIG = the operator's .mcp.json, claude_desktop_config.json or Codex config.toml; none:
// no operator servers; TACK_MCP_HTTP_ALLOW = CIDRs HTTP servers may have beyond the public internet).
import { commonConfig, runMain } from "@tack/config";
import { initTelemetry } from "@tack/telemetry";
import { TackError } from "@tack/bus";
import { loadMcpConfigFile } from "@tack/mcp-config";
import { startMcpService } from "./service.js";

const telemetry = initTelemetry({ serviceName: "tack-mcp" });
await runMain("mcp", async () => {
  const path = process.env.TACK_MCP_CONFIG;
  const servers = path ? await loadMcpConfigFile(path) : {};
  const timeout = process.env.TACK_MCP_CALL_TIMEOUT_MS;
  if (timeout !== undefined && !(Number(timeout) > 0)) throw new TackError("mcp.invalid_options", `TACK_MCP_CALL_TIMEOUT_MS is ${JSON.stringify(timeout)}; give a positive number of milliseconds`);
  const service = await startMcpService({
    natsUrl: process.env.NATS_URL ?? "nats://127.0.0.1:4222",
    natsAuth: commonConfig().natsAuth,
    namespace: process.env.TACK_NAMESPACE || undefined,
    servers,
    httpAllow: process.env.TACK_MCP_HTTP_ALLOW ?? "",
    callTimeoutMs: timeout === undefined ? undefined : Number(timeout),
  });
  return { stop: async () => { await service.stop(); await telemetry.shutdown(); } };
});
