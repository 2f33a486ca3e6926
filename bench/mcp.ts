// MCP bridge latency: `mcp_call_ms`, a call of server-everything's `echo` (stdio) through the
// bus service as the loop will make it (mcp.call request → bridge → MCP server → reply).
// Run alone: `npx tsx bench/mcp.ts` (NATS_URL, default 127.0.0.1:4222).
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { Bus } from "@tack/bus";
import { CallMcpToolRequest, CallMcpToolResponse } from "@tack/proto";
import { startMcpService } from "../services/mcp/src/index.js";
import { percentile, say } from "./lib.js";

const CALLS = Number(process.env.TACK_BENCH_MCP_CALLS ?? 300);
const WARMUP = 20;

export async function benchMcp(options: { natsUrl?: string } = {}): Promise<Record<string, unknown>> {
  const natsUrl = options.natsUrl ?? process.env.NATS_URL ?? "nats://127.0.0.1:4222";
  const namespace = `benchmcp${randomBytes(4).toString("hex")}`;
  const command = join(import.meta.dirname, "../node_modules/.bin/mcp-server-everything");
  const service = await startMcpService({ natsUrl, namespace, servers: { everything: { command, args: ["stdio"], env: {} } } });
  const bus = await Bus.connect({ url: natsUrl, namespace, name: "bench-mcp" });
  try {
    const call = async (i: number) => {
      const started = performance.now();
      const reply = await bus.request(bus.names.mcpCall, CallMcpToolRequest, { publicName: "mcp__everything__echo", argumentsJson: JSON.stringify({ message: `m${i}` }), callId: `b${i}` }, CallMcpToolResponse);
      if (reply.isError || reply.content !== `Echo: m${i}`) throw new Error(`echo ${i} answered ${JSON.stringify(reply.content)}`);
      return { total: performance.now() - started, server: reply.durationMs };
    };
    for (let i = 0; i < WARMUP; i++) await call(i);
    const totals: number[] = [];
    const inside: number[] = [];
    for (let i = 0; i < CALLS; i++) {
      const { total, server } = await call(i);
      totals.push(total);
      inside.push(server);
    }
    say(`mcp: ${CALLS} echo calls, p50 ${percentile(totals, 50)} ms`);
    return {
      mcp_call_ms_p50: percentile(totals, 50),
      mcp_call_ms_p95: percentile(totals, 95),
      mcp_bridge_call_ms_p50: percentile(inside, 50),
      mcp_call_definition: `${CALLS} sequential mcp.call requests of server-everything's echo (stdio) over NATS after ${WARMUP} warm-up calls; mcp_bridge_call_ms is the bridge's own duration_ms (MCP round trip only)`,
    };
  } finally {
    await bus.close();
    await service.stop();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  process.stdout.write(`${JSON.stringify(await benchMcp(), null, 2)}\n`);
}
