import { chownSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { Bus, ToolsRpc } from "@tack/bus";
import { draft, ensureLogStream, FORMAT_VERSION, SessionLogWriter } from "@tack/log";
import { CallToolRequest, CallToolResponse, ListToolsRequest, ListToolsResponse, SessionCreated } from "@tack/proto";
import { startSandboxService, type SandboxService } from "@tack/sandbox-service";
import { removeNamespace } from "@tack/testkit";
import { startToolsService, type ToolsService } from "../../src/index.js";

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";

/**
 * A tools service and a sandbox service (real NATS, real Docker) in a namespace of their own,
 * with one session of mode `mode` in the log (the sandbox makes containers only for sessions
 * it finds there), for tests that call tools over the bus the way the loop does.
 */
export class ToolsOverBus {
  readonly bus: Bus;
  /** The session's workspace on the host (owned by the sandbox user when the test runs as root). */
  readonly workspace: string;
  readonly #session: { sessionId: string; tenant: string; mode: string };
  readonly #sandbox: SandboxService;
  readonly #tools: ToolsService;
  #calls = 0;

  private constructor(bus: Bus, workspace: string, session: { sessionId: string; tenant: string; mode: string }, sandbox: SandboxService, tools: ToolsService) {
    this.bus = bus;
    this.workspace = workspace;
    this.#session = session;
    this.#sandbox = sandbox;
    this.#tools = tools;
  }

  /** `runtime` is the containers' Docker runtime (default runc). */
  static async start(options: { mode: string; sessionId: string; tenant?: string; runtime?: string }): Promise<ToolsOverBus> {
    const session = { sessionId: options.sessionId, tenant: options.tenant ?? "t1", mode: options.mode };
    const workspace = mkdtempSync(join(tmpdir(), `tack-${options.mode}-mode-`));
    if (process.getuid?.() === 0) chownSync(workspace, 1000, 1000);
    const bus = await Bus.connect({ url: NATS_URL, namespace: `${options.mode.slice(0, 4)}${randomBytes(4).toString("hex")}`, name: `${options.mode}-mode-test` });
    await ensureLogStream(bus.nc, bus.names);
    const writer = await SessionLogWriter.open(bus.nc, bus.names, session);
    await writer.append(draft("sessionCreated", SessionCreated.fromPartial({ ...session, workspace, formatVersion: FORMAT_VERSION }), "test"));
    const sandbox = await startSandboxService({ natsUrl: NATS_URL, namespace: bus.names.namespace, poolSize: 0, ...(options.runtime && { runtime: options.runtime }) });
    const tools = await startToolsService({ natsUrl: NATS_URL, namespace: bus.names.namespace });
    return new ToolsOverBus(bus, workspace, session, sandbox, tools);
  }

  /** tools.list of `mode` (default: the session's). */
  list(request: Partial<ListToolsRequest> = {}): Promise<ListToolsResponse> {
    return this.bus.request(ToolsRpc.ListTools, ListToolsRequest.fromPartial({ mode: this.#session.mode, ...request }));
  }

  /** tools.call of `name` in the session, under workspace-write, as a first attempt with a fresh call id. */
  call(name: string, args: unknown, fields: Partial<CallToolRequest> = {}): Promise<CallToolResponse> {
    return this.bus.request(ToolsRpc.CallTool, CallToolRequest.fromPartial({
      sessionId: this.#session.sessionId, tenant: this.#session.tenant, callId: `call_${this.#calls++}`, name, arguments: JSON.stringify(args),
      workspace: this.workspace, sandboxMode: "workspace-write", attempt: 1, firstAttemptAtMs: Date.now(), sessionMode: this.#session.mode, ...fields,
    }), { timeoutMs: 60_000 });
  }

  async stop(): Promise<void> {
    await this.#tools.stop();
    await this.#sandbox.stop({ removeContainers: true });
    await removeNamespace(this.bus.nc, this.bus.names.namespace);
    await this.bus.close();
    rmSync(this.workspace, { recursive: true, force: true });
  }
}
