// The real loop service for the gateway's tests: `startLoopService` and the real llm service with
// `scripted:` scripts on real NATS, so every code the gateway sees is one the loop really sends.
// Only the tools, skills and sandbox services are answered on the bus by this helper: running commands
// is not the gateway's concern.
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Bus, LoopRpc, SandboxRpc, SkillsRpc, ToolsRpc, type RequestContext, type Rpc, type ServeOptions } from "@tack/bus";
import { compileOperatorConfig } from "@tack/config";
import { startGateway, type Gateway } from "@tack/gateway-service";
import { ensureLogStream, readAll } from "@tack/log";
import { removeNamespace } from "@tack/testkit";
import { CallToolResponse, ListProcessesResponse } from "@tack/proto";
import { startLlmService, type LlmService } from "@tack/llm-service";
import { startLoopService, type LoopService } from "@tack/loop-service";
import { listTools } from "@tack/tools-service";
import { waitFor } from "@tack/testkit";

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";

/** The recorder of the running RealLoop per namespace: which loop subject served each request. */
const recorders = new Map<string, string[]>();
let patched = false;

/**
 * Records the subject of each request a loop handler serves, by wrapping `Bus.serve` (a plain
 * subscription would count as a responder and hide `bus.no_responders` from the gateway).
 */
function recordLoopSubjects(): void {
  if (patched) return;
  patched = true;
  const serve = Bus.prototype.serve as (this: Bus, rpc: Rpc, handler: (request: unknown, context: RequestContext) => Promise<unknown>, options?: ServeOptions) => ReturnType<Bus["track"]>;
  Bus.prototype.serve = function (this: Bus, rpc: Rpc, handler: (request: unknown, context: RequestContext) => Promise<unknown>, options?: ServeOptions) {
    // The loop's rpcs are all unary; the other services' are not recorded.
    if (rpc.streaming || !rpc.subject.startsWith("loop.")) return serve.call(this, rpc, handler, options);
    const namespace = this.names.namespace;
    return serve.call(this, rpc, async (request, context) => {
      recorders.get(namespace)?.push(context.subject);
      return handler(request, context);
    }, options);
  } as typeof Bus.prototype.serve;
}

const DONE = Array.from({ length: 60 }, (_, i) => ({ content: `done ${i + 1}` }));

/** A running loop replica with its llm service and tools/sandbox responders. */
export class RealLoop {
  /** Which loop subject served each request since start (tests clear it with `length = 0`). */
  readonly subjects: string[] = [];
  /** A `scripted:` model whose every reply is a short text (60 replies). */
  readonly model: string;
  /**
   * A `scripted:` model whose first reply is a bash call asking to widen a `read-only` session to
   * `workspace-write` (call id `call_0_0`); every later reply is a short text.
   */
  readonly askModel: string;
  /** Like `askModel` for a `workspace-write` session: the bash call asks for `danger-full-access`. */
  readonly askWideModel: string;
  /** Processes the sandbox lists for wider modes: any makes the loop refuse a narrower mode (`loop.mode_change_refused`). */
  processes: { pid: number; command: string }[] = [];
  readonly #bus: Bus;
  readonly #loop: LoopService;
  readonly #llm: LlmService;
  readonly #dir: string;
  #llmStopped = false;

  private constructor(bus: Bus, loop: LoopService, llm: LlmService, dir: string) {
    this.#bus = bus;
    this.#loop = loop;
    this.#llm = llm;
    this.#dir = dir;
    this.model = `scripted:${join(dir, "hello.json")}`;
    this.askModel = `scripted:${join(dir, "ask.json")}`;
    this.askWideModel = `scripted:${join(dir, "ask-wide.json")}`;
  }

  /** Starts the loop, the llm service (scripts in a temp folder) and the tools and sandbox responders. */
  static async start(url: string, namespace: string): Promise<RealLoop> {
    recordLoopSubjects();
    const dir = mkdtempSync(join(tmpdir(), "tack-gw-scripts-"));
    writeFileSync(join(dir, "hello.json"), JSON.stringify({ replies: DONE }));
    writeFileSync(join(dir, "ask.json"), JSON.stringify({ replies: [
      { content: "I need to write.", tool_calls: [{ name: "bash", arguments: { command: "touch x", sandbox_permissions: "workspace-write", justification: "test" } }] },
      ...DONE,
    ] }));
    writeFileSync(join(dir, "ask-wide.json"), JSON.stringify({ replies: [
      { content: "I need the network.", tool_calls: [{ name: "bash", arguments: { command: "curl x", sandbox_permissions: "danger-full-access", justification: "test" } }] },
      ...DONE,
    ] }));
    const bus = await Bus.connect({ url, namespace, name: "real-loop-responders" });
    const llm = await startLlmService({ url, namespace, env: {}, home: dir, scripts: { scriptDirs: [dir] } });
    const loop = await startLoopService({ natsUrl: url, namespace, leaseTtlMs: 1_000, prewarmSandbox: false, approvalTimeoutMs: 60_000 });
    const real = new RealLoop(bus, loop, llm, dir);
    recorders.set(namespace, real.subjects);
    bus.serve(ToolsRpc.ListTools, async (req) => ({ tools: listTools(req.mode, req.defined) }));
    bus.serve(ToolsRpc.CallTool, async (req) => CallToolResponse.fromPartial({ content: `ran ${req.name}`, durationMs: 1 }));
    bus.serve(ToolsRpc.ReadRules, async () => ({ files: [] }));
    bus.serve(ToolsRpc.ReadHooksConfig, async () => ({ files: [] }));
    bus.serve(SkillsRpc.Catalog, async () => ({ entries: [], digest: "", warnings: [] }));
    bus.serve(SandboxRpc.ListProcesses, async () => ListProcessesResponse.fromPartial({ processes: real.processes }));
    await bus.nc.flush();
    return real;
  }

  /** Writes a `scripted:` model (its replies, in order) beside the stack's others and returns its name. */
  script(name: string, replies: readonly unknown[]): string {
    writeFileSync(join(this.#dir, `${name}.json`), JSON.stringify({ replies }));
    return `scripted:${join(this.#dir, `${name}.json`)}`;
  }

  /** Waits until every turn of a session has ended (a post starts a turn that runs after the reply). */
  async idle(tenant: string, sessionId: string): Promise<void> {
    await waitFor(`the turns of ${sessionId} to end`, async () => {
      const events = await readAll(this.#bus.nc, this.#bus.names, { tenant, sessionId });
      // A summary is logged as a user/message too (origin compaction:summary); it starts no turn.
      const posted = events.filter((e) => e.type === "user/message" && e.surface?.origin !== "compaction:summary").length;
      return events.filter((e) => e.type === "turn/end").length >= posted;
    }, { timeoutMs: 15_000, intervalMs: 25 });
  }

  /**
   * Makes a session created with `askModel` in `read-only` (or `askWideModel` in `workspace-write`)
   * park a call for approval: posts a message on the bus and waits for `approval/asked`; returns
   * the call id (`call_0_0`).
   */
  async ask(tenant: string, sessionId: string): Promise<string> {
    await this.#bus.request(LoopRpc.SubmitMessage, { tenant, sessionId, text: "please write" });
    await this.asked(tenant, sessionId);
    return "call_0_0";
  }

  /** Waits for the session's `approval/asked` and returns its seq. */
  async asked(tenant: string, sessionId: string): Promise<number> {
    return waitFor(`approval/asked in ${sessionId}`, async () => {
      const events = await readAll(this.#bus.nc, this.#bus.names, { tenant, sessionId });
      return events.find((e) => e.type === "approval/asked")?.seq;
    }, { timeoutMs: 15_000, intervalMs: 25 });
  }

  /** Stops only the llm service: the loop then cannot check a model at create (`loop.llm_unavailable`). */
  async stopLlm(): Promise<void> {
    this.#llmStopped = true;
    await this.#llm.stop();
  }

  /** Stops the loop (its sessions have no owner afterwards), the llm service and the responders. */
  async stop(): Promise<void> {
    if (recorders.get(this.#bus.names.namespace) === this.subjects) recorders.delete(this.#bus.names.namespace);
    await this.#loop.stop();
    if (!this.#llmStopped) await this.#llm.stop();
    await this.#bus.close();
    rmSync(this.#dir, { recursive: true, force: true });
  }
}

/** What a gateway test stack is started with. */
export interface GatewayStackOptions {
  /** Names the temporary folder and the bus connection (`tack-<name>-`, `<name>-test`). */
  readonly name: string;
  /** API keys of tenant acme (admin) and globex (`globexRole`, default admin). */
  readonly keys: { readonly acme: string; readonly globex: string };
  readonly globexRole?: "admin" | "member";
  /** Each tenant's policy beside `workspace_roots` (the stack's folder). */
  readonly policy?: Readonly<Record<string, unknown>>;
  /** Serve gRPC too (on a free port). */
  readonly grpc?: boolean;
  readonly keepaliveMs?: number;
}

/**
 * The stack most gateway tests run on: a namespace's log stream, the real loop (RealLoop) and a
 * gateway with tenants acme and globex whose workspaces are under a temporary folder.
 */
export class GatewayStack {
  private constructor(
    readonly bus: Bus, readonly loop: RealLoop, readonly gateway: Gateway, readonly namespace: string,
    /** The temporary folder (the tenants' workspace root) and a workspace in it. */
    readonly dir: string, readonly workspace: string,
  ) {}

  static async start(options: GatewayStackOptions): Promise<GatewayStack> {
    const namespace = `t${randomBytes(5).toString("hex")}`;
    const dir = mkdtempSync(join(tmpdir(), `tack-${options.name}-`));
    const workspace = join(dir, "project");
    mkdirSync(workspace);
    const bus = await Bus.connect({ url: NATS_URL, namespace, name: `${options.name}-test` });
    await ensureLogStream(bus.nc, bus.names);
    const loop = await RealLoop.start(NATS_URL, namespace);
    const gateway = await startGateway({
      natsUrl: NATS_URL, namespace, port: 0, sqlitePath: join(dir, "index.db"),
      ...(options.grpc ? { grpcPort: 0 } : {}), ...(options.keepaliveMs !== undefined ? { keepaliveMs: options.keepaliveMs } : {}),
      apiKeys: [{ key: options.keys.acme, tenant: "acme" }, { key: options.keys.globex, tenant: "globex", role: options.globexRole ?? "admin" }],
      operator: compileOperatorConfig(
        { tenants: Object.fromEntries(["acme", "globex"].map((t) => [t, { workspace_roots: [dir], ...options.policy }])) },
        { stateDir: join(dir, "state"), baseDir: dir, source: undefined },
      ),
    });
    return new GatewayStack(bus, loop, gateway, namespace, dir, workspace);
  }

  /** Stops the gateway and the loop, deletes the namespace's streams and buckets and the folder. */
  async stop(): Promise<void> {
    await this.gateway.stop();
    await this.loop.stop();
    // Every stream and bucket of the namespace: the log, and the loop's leases, spending and spill buckets.
    await removeNamespace(this.bus.nc, this.namespace).catch(() => undefined);
    await this.bus.close();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
