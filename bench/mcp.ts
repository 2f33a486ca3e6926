// MCP bridge latency: `mcp_call_ms`, a call of server-everything's `echo` through the bus service
// as the loop makes it (mcp.call request → the session's client → the server → reply), with the
// server in the session's sandbox container (the default: its stdio over the sandbox service's
// stdio stream, decision 0016); `mcp_call_host_ms` is the same call to an operator's `run: host`
// server (a host child process), for comparison.
// Run alone: `npx tsx bench/mcp.ts` (NATS_URL, default 127.0.0.1:4222; Docker and the sandbox image).
import { randomBytes } from "node:crypto";
import { chown, mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { build } from "esbuild";
import { Bus, McpRpc } from "@tack/bus";
import { loadOperatorConfig } from "@tack/config";
import { draft, ensureLogStream, FORMAT_VERSION, SessionLogWriter } from "@tack/log";
import { SessionCreated } from "@tack/proto";
import { removeNamespace } from "@tack/testkit";
import { startMcpService } from "../services/mcp/src/index.js";
import { startSandboxService } from "../services/sandbox/src/index.js";
import { percentile, say } from "./lib.js";
import { OPERATOR_CONFIG } from "./stack.js";

const CALLS = Number(process.env.TACK_BENCH_MCP_CALLS ?? 300);
const WARMUP = 20;
const TENANT = "bench";
const MODE = "workspace-write";

export async function benchMcp(options: { natsUrl?: string } = {}): Promise<Record<string, unknown>> {
  const natsUrl = options.natsUrl ?? process.env.NATS_URL ?? "nats://127.0.0.1:4222";
  const namespace = `benchmcp${randomBytes(4).toString("hex")}`;
  const root = join(import.meta.dirname, "..");
  // The container has node but no network: the server goes into the workspace as one bundle.
  const workspace = await mkdtemp(join(tmpdir(), "tack-bench-mcp-"));
  await mkdir(join(workspace, ".mcp"));
  await build({
    entryPoints: [join(root, "node_modules/@modelcontextprotocol/server-everything/dist/index.js")], bundle: true, platform: "node", format: "esm", target: "node18",
    outfile: join(workspace, ".mcp/everything.mjs"), logLevel: "error",
    banner: { js: "import { createRequire } from 'module'; const require = createRequire(import.meta.url);" },
  });
  for (const path of [workspace, join(workspace, ".mcp"), join(workspace, ".mcp/everything.mjs")]) await chown(path, 1000, 1000);
  // Tenant bench may use workspaces under /tmp (bench/operator.yaml).
  const sandbox = await startSandboxService({ natsUrl, namespace, poolSize: 0, operator: loadOperatorConfig({ TACK_CONFIG: OPERATOR_CONFIG }) });
  const service = await startMcpService({
    natsUrl, namespace, home: null,
    servers: {
      everything: { command: "node", args: ["/workspace/.mcp/everything.mjs", "stdio"], env: {} },
      host: { command: join(root, "node_modules/.bin/mcp-server-everything"), args: ["stdio"], env: {}, run: "host" },
    },
  });
  const bus = await Bus.connect({ url: natsUrl, namespace, name: "bench-mcp" });
  try {
    await ensureLogStream(bus.nc, bus.names);
    const writer = await SessionLogWriter.open(bus.nc, bus.names, { tenant: TENANT, sessionId: "b1" });
    await writer.append(draft("sessionCreated", SessionCreated.fromPartial({ sessionId: "b1", tenant: TENANT, workspace, formatVersion: FORMAT_VERSION, mode: "standard" }), "bench"));
    const session = { tenant: TENANT, sessionId: "b1", workspace, sandboxMode: MODE };
    const started = performance.now();
    const listed = await bus.request(McpRpc.ListTools, session, { timeoutMs: 120_000 });
    const firstList = performance.now() - started;
    const failed = listed.servers.filter((s) => s.state !== "ready");
    if (failed.length > 0) throw new Error(`MCP servers not ready: ${failed.map((s) => `${s.name}: ${s.error}`).join("; ")}`);
    const lists: number[] = [];
    for (let i = 0; i < 50; i++) {
      const at = performance.now();
      await bus.request(McpRpc.ListTools, session);
      lists.push(performance.now() - at);
    }
    const call = async (server: string, i: number) => {
      const at = performance.now();
      const reply = await bus.request(McpRpc.CallTool, { publicName: `mcp__${server}__echo`, argumentsJson: JSON.stringify({ message: `m${i}` }), callId: `b${i}`, ...session });
      if (reply.isError || reply.content !== `Echo: m${i}`) throw new Error(`echo ${i} answered ${JSON.stringify(reply.content)}`);
      return { total: performance.now() - at, inside: reply.durationMs };
    };
    const measure = async (server: string) => {
      for (let i = 0; i < WARMUP; i++) await call(server, i);
      const totals: number[] = [];
      const inside: number[] = [];
      for (let i = 0; i < CALLS; i++) {
        const { total, inside: bridge } = await call(server, i);
        totals.push(total);
        inside.push(bridge);
      }
      return { totals, inside };
    };
    const sandboxed = await measure("everything");
    const host = await measure("host");
    say(`mcp: ${CALLS} echo calls, sandboxed p50 ${percentile(sandboxed.totals, 50)} ms, host p50 ${percentile(host.totals, 50)} ms`);
    return {
      mcp_call_ms_p50: percentile(sandboxed.totals, 50),
      mcp_call_ms_p95: percentile(sandboxed.totals, 95),
      mcp_bridge_call_ms_p50: percentile(sandboxed.inside, 50),
      mcp_call_host_ms_p50: percentile(host.totals, 50),
      mcp_list_first_ms: Math.round(firstList),
      mcp_list_cached_ms_p50: percentile(lists, 50),
      mcp_call_definition: `${CALLS} sequential mcp.call requests of server-everything's echo over NATS after ${WARMUP} warm-up calls, the server in the session's sandbox container (stdio stream through the sandbox service); mcp_bridge_call_ms is the bridge's own duration_ms (MCP round trip only); mcp_call_host_ms is the same call to an operator's run: host server; mcp_list_first_ms starts the session's servers, mcp_list_cached_ms is a later mcp.list`,
    };
  } finally {
    await service.stop();
    await sandbox.stop({ removeContainers: true });
    await removeNamespace(bus.nc, namespace).catch(() => undefined);
    await bus.close();
    await rm(workspace, { recursive: true, force: true });
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  process.stdout.write(`${JSON.stringify(await benchMcp(), null, 2)}\n`);
}
