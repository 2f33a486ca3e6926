// Stdio MCP servers inside the session's sandbox container (decision 0016): an MCP Transport over
// the sandbox service's stdio streams. The process is started by the container's exec agent
// (`<ns>.sandbox.stdio.open`); JSON-RPC lines go to it as StdioFrames on
// `<ns>.sandbox.stdio.in.<stream>` and come back on `<ns>.sandbox.stdio.out.<stream>`.
import { PassThrough } from "node:stream";
import { ReadBuffer, serializeMessage } from "@modelcontextprotocol/sdk/shared/stdio.js";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import type { JSONRPCMessage } from "@modelcontextprotocol/sdk/types.js";
import { openSandboxProcess, TackError, type Bus, type SandboxProcess } from "@tack/bus";
import type { Spawn, SpawnedTransport } from "./transport.js";

export { sandboxStdioSubjects } from "@tack/bus";

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

/** An MCP Transport whose other end is a process in a sandbox container (a stream of @tack/bus's `openSandboxProcess`). */
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
  readonly #buffer = new ReadBuffer();
  #process: SandboxProcess | undefined;
  #closed = false;

  constructor(bus: Bus, target: SandboxTarget, argv: string[], env: Record<string, string>, cwd: string | undefined) {
    this.#bus = bus;
    this.#target = target;
    this.#argv = argv;
    this.#env = env;
    // A relative cwd is taken inside the workspace, where the server's files are.
    this.#cwd = cwd === undefined ? undefined : cwd.startsWith("/") ? cwd : `/workspace/${cwd}`;
    this.spawned = { transport: this, pid: () => this.#process?.pid, stderr: this.stderr };
  }

  async start(): Promise<void> {
    try {
      this.#process = await openSandboxProcess(this.#bus, {
        sessionId: this.#target.sessionId, mode: this.#target.mode, argv: this.#argv, env: this.#env, cwd: this.#cwd,
      }, (fd, data) => this.#onOutput(fd, data));
    } catch (error) {
      this.#closed = true;
      if (error instanceof TackError && error.code === "sandbox.not_found") this.#target.onGone?.(error);
      throw error;
    }
    void this.#process.exit.then((exit) => {
      if (this.#closed) return;
      // A broken stream (a lost frame, unanswered pings) is an error of the transport; an exit is the server's end.
      if (exit.code === -1 && exit.reason) this.onerror?.(new Error(exit.reason));
      else this.stderr.write(exit.reason ? `[the server's process ended: ${exit.reason}]\n` : "");
      this.#finish();
    });
  }

  async send(message: JSONRPCMessage): Promise<void> {
    if (this.#closed || !this.#process) throw new TackError("mcp.unavailable", "the MCP server's sandbox stream is closed", { retryable: true });
    this.#process.write(Buffer.from(serializeMessage(message)));
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    // The process is killed; its exit frame would come after we stopped listening.
    this.#process?.kill("closed by its caller");
    this.#finish();
  }

  #onOutput(fd: 1 | 2, data: Uint8Array): void {
    if (this.#closed) return;
    if (fd === 2) {
      this.stderr.write(Buffer.from(data));
      return;
    }
    this.#buffer.append(Buffer.from(data));
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

  #finish(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#buffer.clear();
    this.stderr.end();
    this.onclose?.();
  }
}
