// Stdio MCP servers inside the session's sandbox container (decision 0016): an MCP Transport over
// the sandbox service's stdio streams. The process is started by the container's exec agent
// (`<ns>.sandbox.stdio.open`); JSON-RPC lines go to it as StdioFrames on
// `<ns>.sandbox.stdio.in.<stream>` and come back on `<ns>.sandbox.stdio.out.<stream>`.
import { randomBytes } from "node:crypto";
import { PassThrough } from "node:stream";
import type { Subscription } from "@nats-io/nats-core";
import { ReadBuffer, serializeMessage } from "@modelcontextprotocol/sdk/shared/stdio.js";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import type { JSONRPCMessage } from "@modelcontextprotocol/sdk/types.js";
import { TackError, type Bus } from "@tack/bus";
import { OpenStdioRequest, OpenStdioResponse, StdioFrame } from "@tack/proto";
import type { Spawn, SpawnedTransport } from "./transport.js";

/** The stream subjects, spelled as the sandbox service spells them (services/sandbox/src/stdio.ts; a test checks they agree). */
export function sandboxStdioSubjects(namespace: string, streamId: string): { open: string; input: string; output: string } {
  return { open: `${namespace}.sandbox.stdio.open`, input: `${namespace}.sandbox.stdio.in.${streamId}`, output: `${namespace}.sandbox.stdio.out.${streamId}` };
}

/** A stream is pinged this often; the sandbox kills a process whose caller is silent for 60 s. */
export const PING_EVERY_MS = 15_000;
const PING_TIMEOUT_MS = 5_000;
const OPEN_TIMEOUT_MS = 30_000;

/** Where a session's stdio servers run. */
export interface SandboxTarget {
  readonly sessionId: string;
  readonly mode: string;
  /** Called when the session's container is gone (`sandbox.not_found` at open): its clients should stop. */
  readonly onGone?: (error: TackError) => void;
}

/** The Spawn of a session's stdio servers: each runs in its sandbox container, cwd /workspace unless configured. */
export function sandboxSpawn(bus: Bus, target: SandboxTarget): Spawn {
  return (_server, params) => {
    const transport = new SandboxStdioTransport(bus, target, [params.command, ...(params.args ?? [])], (params.env ?? {}) as Record<string, string>, params.cwd);
    return transport.spawned;
  };
}

/** An MCP Transport whose other end is a process in a sandbox container. */
export class SandboxStdioTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage) => void;
  readonly stderr = new PassThrough();
  readonly spawned: SpawnedTransport;
  readonly #bus: Bus;
  readonly #target: SandboxTarget;
  readonly #argv: string[];
  readonly #env: Record<string, string>;
  readonly #cwd: string | undefined;
  readonly #streamId = randomBytes(16).toString("hex");
  readonly #subjects: ReturnType<typeof sandboxStdioSubjects>;
  readonly #buffer = new ReadBuffer();
  #subscription?: Subscription;
  #pinger?: NodeJS.Timeout;
  #pid: number | undefined;
  #inSeq = 1;
  #outSeq = 1;
  #closed = false;

  constructor(bus: Bus, target: SandboxTarget, argv: string[], env: Record<string, string>, cwd: string | undefined) {
    this.#bus = bus;
    this.#target = target;
    this.#argv = argv;
    this.#env = env;
    // A relative cwd is taken inside the workspace, where the server's files are.
    this.#cwd = cwd === undefined ? undefined : cwd.startsWith("/") ? cwd : `/workspace/${cwd}`;
    this.#subjects = sandboxStdioSubjects(bus.names.namespace, this.#streamId);
    this.spawned = { transport: this, pid: () => this.#pid, stderr: this.stderr };
  }

  async start(): Promise<void> {
    // Subscribed before the open: the server may write before the open is answered.
    this.#subscription = this.#bus.nc.subscribe(this.#subjects.output, { callback: (error, message) => {
      if (!error) this.#onFrame(message.data);
    } });
    try {
      const opened = await this.#bus.request(this.#subjects.open, OpenStdioRequest, OpenStdioRequest.fromPartial({
        sessionId: this.#target.sessionId, mode: this.#target.mode, argv: this.#argv, env: this.#env, cwd: this.#cwd ?? "", streamId: this.#streamId,
      }), OpenStdioResponse, { timeoutMs: OPEN_TIMEOUT_MS });
      this.#pid = opened.pid;
    } catch (error) {
      this.#subscription.unsubscribe();
      this.#closed = true;
      if (error instanceof TackError && error.code === "sandbox.not_found") this.#target.onGone?.(error);
      throw error;
    }
    this.#pinger = setInterval(() => void this.#ping(), PING_EVERY_MS);
    this.#pinger.unref();
  }

  async send(message: JSONRPCMessage): Promise<void> {
    if (this.#closed) throw new TackError("mcp.unavailable", "the MCP server's sandbox stream is closed", { retryable: true });
    this.#publish({ data: Buffer.from(serializeMessage(message)) });
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    // The process is killed; its exit frame would come after we stopped listening.
    this.#publish({ kill: true });
    this.#finish();
  }

  #publish(frame: Partial<StdioFrame>): void {
    this.#bus.nc.publish(this.#subjects.input, StdioFrame.encode(StdioFrame.fromPartial({ ...frame, seq: this.#inSeq++ })).finish());
  }

  async #ping(): Promise<void> {
    if (this.#closed) return;
    try {
      await this.#bus.nc.request(this.#subjects.input, StdioFrame.encode(StdioFrame.fromPartial({})).finish(), { timeout: PING_TIMEOUT_MS });
    } catch (error) {
      if (this.#closed) return;
      this.onerror?.(new Error(`the MCP server's sandbox stream stopped answering pings (${(error as Error).message})`));
      this.#finish();
    }
  }

  #onFrame(data: Uint8Array): void {
    if (this.#closed) return;
    let frame: StdioFrame;
    try {
      frame = StdioFrame.decode(data);
    } catch {
      return this.#fail("an output frame of the sandbox stream is not a StdioFrame");
    }
    if (Number(frame.seq) !== this.#outSeq) return this.#fail(`output frame ${this.#outSeq} of the sandbox stream was lost (got ${frame.seq})`);
    this.#outSeq += 1;
    if (frame.exited) {
      this.stderr.write(frame.reason ? `[the server's process ended: ${frame.reason}]\n` : "");
      return this.#finish();
    }
    if (frame.fd === 2) {
      this.stderr.write(Buffer.from(frame.data));
      return;
    }
    this.#buffer.append(Buffer.from(frame.data));
    for (;;) {
      let message: JSONRPCMessage | null;
      try {
        message = this.#buffer.readMessage();
      } catch (error) {
        this.onerror?.(error as Error);
        continue;
      }
      if (!message) break;
      this.onmessage?.(message);
    }
  }

  #fail(what: string): void {
    this.onerror?.(new Error(what));
    this.#publish({ kill: true });
    this.#finish();
  }

  #finish(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#pinger);
    this.#subscription?.unsubscribe();
    this.#buffer.clear();
    this.stderr.end();
    this.onclose?.();
  }
}
