import { randomBytes } from "node:crypto";
import type { Socket } from "node:net";
import type Docker from "dockerode";
import { TackError } from "@tack/bus";
import { dockerFailure } from "./docker.js";

/** Protocol version spoken by `agent/agent.py`; an agent that answers another one is not used. 2: the agent is PID 1 and answers `ps`. */
export const AGENT_PROTOCOL = 2;
// Largest frame either side sends: stdin is bounded by the bus, output chunks are 64 KiB.
const MAX_FRAME = 4 * 1024 * 1024;
// Docker's multiplexed attach stream: 8-byte header (stream type, 3 zero bytes, u32 length).
const DOCKER_HEADER = 8;
const AGENT_PREFIX = 8;
// How much of the agent's own stderr is kept to explain why it stopped.
const STDERR_TAIL = 2048;
// The agent enforces every timeout itself; the service gives up on a silent agent this long after it.
const SILENT_AGENT_GRACE_MS = 10_000;
// How long a dead channel waits for the engine to say why the container stopped.
const EXPLAIN_WITHIN_MS = 2000;
// A process listing is a read of /proc in the agent; a healthy one answers in milliseconds.
const LIST_TIMEOUT_MS = 10_000;
/** Most processes one listing carries, and most characters of each command line (the agent cuts at the same sizes). */
export const LISTING_LIMITS = { processes: 512, command: 1024 } as const;

/** One command for the agent. */
export interface AgentCommand {
  readonly argv: readonly string[];
  readonly cwd: string;
  readonly timeoutMs: number;
  /** Per-stream output cap in bytes. */
  readonly cap: number;
  readonly stdin: Uint8Array;
}

/** What the agent reported for one command. */
export interface AgentResult {
  readonly exitCode: number;
  readonly stdout: Buffer;
  readonly stderr: Buffer;
  readonly timedOut: boolean;
  readonly truncated: boolean;
}

/** One live process of the container as the agent read it from /proc. */
export interface AgentProcess {
  readonly pid: number;
  readonly ppid: number;
  /** The command line, arguments joined by spaces; a process without one shows its name in brackets. */
  readonly command: string;
  /** The one-letter state of /proc/<pid>/stat (R, S, D, T, ...); zombies are never listed. */
  readonly state: string;
}

/** The container's processes but the agent itself, by pid; `truncated` when there were more than the listing carries. */
export interface AgentListing {
  readonly processes: AgentProcess[];
  readonly truncated: boolean;
}

interface PendingListing {
  readonly resolve: (listing: AgentListing) => void;
  readonly reject: (error: TackError) => void;
  readonly timer: NodeJS.Timeout;
}

interface Pending {
  readonly cap: number;
  readonly stdout: Buffer[];
  readonly stderr: Buffer[];
  kept: [number, number];
  truncated: boolean;
  readonly resolve: (result: AgentResult) => void;
  readonly reject: (error: TackError) => void;
  readonly timer: NodeJS.Timeout;
}

interface Header {
  op?: unknown;
  id?: unknown;
  fd?: unknown;
  code?: unknown;
  timed_out?: unknown;
  truncated?: unknown;
  protocol?: unknown;
  processes?: unknown;
}

/**
 * The service's end of one container's exec agent: a hijacked `docker attach` to the agent's
 * stdin/stdout carrying length-prefixed frames, several commands at once. When the stream ends
 * (the agent or its container stopped) every command in flight fails with `sandbox.agent_lost`
 * and the channel stays dead; there is no other way to run a command.
 */
export class AgentChannel {
  readonly #socket: Socket;
  readonly #container: Docker.Container;
  readonly #label: string;
  readonly #pending = new Map<string, Pending>();
  readonly #listings = new Map<string, PendingListing>();
  readonly #nonce = randomBytes(4).toString("hex");
  #next = 0;
  #docker: Buffer = Buffer.alloc(0);
  #frames: Buffer = Buffer.alloc(0);
  #stderrTail = "";
  #hello: ((error?: TackError) => void) | undefined;
  #deadReason: string | undefined;
  readonly #onDead: Array<(reason: string) => void> = [];

  private constructor(socket: Socket, container: Docker.Container, label: string) {
    this.#socket = socket;
    this.#container = container;
    this.#label = label;
    socket.on("data", (chunk: Buffer) => this.#onData(chunk));
    socket.on("end", () => this.#die("its output ended (the agent or its container stopped)"));
    socket.on("close", () => this.#die("the attach connection closed"));
    socket.on("error", (error) => this.#die(`the attach connection failed: ${error.message}`));
  }

  /** Attaches to `container` (created, started or not); `handshake` must follow once it runs. */
  static async attach(container: Docker.Container, label: string): Promise<AgentChannel> {
    let socket: Socket;
    try {
      socket = (await container.attach({ stream: true, stdin: true, stdout: true, stderr: true, hijack: true })) as unknown as Socket;
    } catch (error) {
      throw dockerFailure(error, `attach to the exec agent of ${label}`);
    }
    socket.setNoDelay?.(true);
    return new AgentChannel(socket, container, label);
  }

  /** True until the stream ended or broke. */
  get alive(): boolean {
    return this.#deadReason === undefined;
  }

  /** Why the channel is dead, if it is. */
  get deadReason(): string | undefined {
    return this.#deadReason;
  }

  /** Calls `listener` once when the channel dies. */
  onDead(listener: (reason: string) => void): void {
    if (this.#deadReason !== undefined) listener(this.#deadReason);
    else this.#onDead.push(listener);
  }

  /**
   * Greets the agent and waits for its answer. The agent kills whatever an earlier connection
   * left running (no one is left to report it to). Fails with `sandbox.agent_failed` when the
   * agent does not answer in time or speaks another protocol.
   */
  async handshake(timeoutMs: number): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#hello = undefined;
        reject(this.#failure(`no answer within ${timeoutMs} ms`));
      }, timeoutMs);
      this.#hello = (error) => {
        clearTimeout(timer);
        this.#hello = undefined;
        if (error) reject(error);
        else resolve();
      };
      if (!this.alive) this.#hello(this.#failure(this.#deadReason ?? "stopped"));
      else this.#send({ op: "hello" });
    });
  }

  /** Runs one command; fails with `sandbox.agent_lost` when the agent goes away meanwhile. */
  run(command: AgentCommand): Promise<AgentResult> {
    if (!this.alive) return Promise.reject(this.#lost());
    const id = `${this.#nonce}-${this.#next++}`;
    return new Promise<AgentResult>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(id);
        reject(new TackError(
          "sandbox.agent_unresponsive",
          `the exec agent of ${this.#label} gave no result ${SILENT_AGENT_GRACE_MS} ms past the command's ${command.timeoutMs} ms timeout; release the sandbox and ensure it again`,
          { retryable: true },
        ));
      }, command.timeoutMs + SILENT_AGENT_GRACE_MS);
      this.#pending.set(id, { cap: command.cap, stdout: [], stderr: [], kept: [0, 0], truncated: false, resolve, reject, timer });
      this.#send(
        { op: "run", id, argv: command.argv, cwd: command.cwd, timeout_ms: command.timeoutMs, cap: command.cap },
        command.stdin,
      );
    });
  }

  /**
   * Lists the container's live processes but the agent's own, zombies left out. The agent tells
   * itself apart by pid, never by command line. Fails with `sandbox.agent_lost` when the agent
   * goes away meanwhile, `sandbox.agent_unresponsive` when it does not answer.
   */
  processes(): Promise<AgentListing> {
    if (!this.alive) return Promise.reject(this.#lost());
    const id = `${this.#nonce}-${this.#next++}`;
    return new Promise<AgentListing>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#listings.delete(id);
        reject(new TackError(
          "sandbox.agent_unresponsive",
          `the exec agent of ${this.#label} did not list its processes within ${LIST_TIMEOUT_MS} ms; release the sandbox and ensure it again`,
          { retryable: true },
        ));
      }, LIST_TIMEOUT_MS);
      this.#listings.set(id, { resolve, reject, timer });
      this.#send({ op: "ps", id });
    });
  }

  /** Closes the connection; the agent keeps running and a later attach can take it over. */
  close(): void {
    this.#die("the service closed the channel", false);
    this.#socket.destroy();
  }

  #send(header: Record<string, unknown>, body: Uint8Array = new Uint8Array()): void {
    const json = Buffer.from(JSON.stringify(header));
    const prefix = Buffer.alloc(AGENT_PREFIX);
    prefix.writeUInt32BE(json.length, 0);
    prefix.writeUInt32BE(body.length, 4);
    this.#socket.write(Buffer.concat([prefix, json, body]));
  }

  #onData(chunk: Buffer): void {
    this.#docker = this.#docker.length ? Buffer.concat([this.#docker, chunk]) : chunk;
    while (this.#docker.length >= DOCKER_HEADER) {
      const length = this.#docker.readUInt32BE(4);
      if (this.#docker.length < DOCKER_HEADER + length) break;
      const stream = this.#docker[0];
      const payload = this.#docker.subarray(DOCKER_HEADER, DOCKER_HEADER + length);
      this.#docker = this.#docker.subarray(DOCKER_HEADER + length);
      if (stream === 2) this.#stderrTail = (this.#stderrTail + payload.toString()).slice(-STDERR_TAIL);
      else this.#onFrames(payload);
      if (!this.alive) return;
    }
  }

  #onFrames(bytes: Buffer): void {
    this.#frames = this.#frames.length ? Buffer.concat([this.#frames, bytes]) : bytes;
    while (this.#frames.length >= AGENT_PREFIX) {
      const headerLength = this.#frames.readUInt32BE(0);
      const bodyLength = this.#frames.readUInt32BE(4);
      if (headerLength + bodyLength > MAX_FRAME) return this.#violation(`announced a ${headerLength + bodyLength}-byte frame`);
      if (this.#frames.length < AGENT_PREFIX + headerLength + bodyLength) return;
      const header = this.#frames.subarray(AGENT_PREFIX, AGENT_PREFIX + headerLength);
      // Copied: the buffer it is cut from is reused for the next frames.
      const body = Buffer.from(this.#frames.subarray(AGENT_PREFIX + headerLength, AGENT_PREFIX + headerLength + bodyLength));
      this.#frames = this.#frames.subarray(AGENT_PREFIX + headerLength + bodyLength);
      let parsed: Header;
      try {
        parsed = JSON.parse(header.toString()) as Header;
      } catch {
        return this.#violation("sent a frame whose header is not JSON");
      }
      this.#onFrame(parsed, body);
      if (!this.alive) return;
    }
  }

  #onFrame(header: Header, body: Buffer): void {
    if (header.op === "hello") {
      if (header.protocol !== AGENT_PROTOCOL) {
        this.#hello?.(this.#failure(`it speaks protocol ${String(header.protocol)}, not ${AGENT_PROTOCOL}; release the sandbox so that it is created again`));
      } else {
        this.#hello?.();
      }
      return;
    }
    if (header.op === "ps") {
      const listing = typeof header.id === "string" ? this.#listings.get(header.id) : undefined;
      if (!listing) return;
      clearTimeout(listing.timer);
      this.#listings.delete(header.id as string);
      listing.resolve(parseListing(header));
      return;
    }
    // Results of commands from an earlier connection (or another attach) carry ids this one never issued.
    const pending = typeof header.id === "string" ? this.#pending.get(header.id) : undefined;
    if (!pending) return;
    if (header.op === "out") {
      const index = header.fd === 2 ? 1 : 0;
      const room = pending.cap - pending.kept[index];
      if (body.length > room) pending.truncated = true;
      if (room > 0) {
        const kept = body.length > room ? body.subarray(0, room) : body;
        (index === 0 ? pending.stdout : pending.stderr).push(kept);
        pending.kept[index] += kept.length;
      }
    } else if (header.op === "exit") {
      clearTimeout(pending.timer);
      this.#pending.delete(header.id as string);
      pending.resolve({
        exitCode: typeof header.code === "number" ? header.code : -1,
        stdout: Buffer.concat(pending.stdout),
        stderr: Buffer.concat(pending.stderr),
        timedOut: header.timed_out === true,
        truncated: pending.truncated || header.truncated === true,
      });
    }
  }

  // The agent's output is the only trusted thing in the container's stdout; anything malformed ends the channel.
  #violation(what: string): void {
    this.#die(`the agent ${what}`);
    this.#socket.destroy();
  }

  // Marks the channel dead at once; what waits on it fails once the engine said why (when `explain`).
  #die(reason: string, explain = true): void {
    if (this.#deadReason !== undefined) return;
    const tail = this.#stderrTail.trim().split("\n").at(-1);
    const withTail = (what: string) => (tail ? `${what}; its last words: ${tail}` : what);
    this.#deadReason = withTail(reason);
    void (explain ? this.#stopCause() : Promise.resolve(undefined)).then((cause) => {
      if (cause) this.#deadReason = withTail(cause);
      this.#hello?.(this.#failure(this.#deadReason ?? reason));
      for (const waiting of [this.#pending, this.#listings]) {
        for (const [id, pending] of waiting) {
          clearTimeout(pending.timer);
          waiting.delete(id);
          pending.reject(this.#lost());
        }
      }
      for (const listener of this.#onDead.splice(0)) listener(this.#deadReason ?? reason);
    });
  }

  // Why the container stopped, once the engine knows it stopped: the memory limit, or the agent's exit.
  async #stopCause(): Promise<string | undefined> {
    const deadline = Date.now() + EXPLAIN_WITHIN_MS;
    while (Date.now() < deadline) {
      const state = await this.#container.inspect().then((info) => info.State, () => undefined);
      if (!state) return undefined;
      if (state.OOMKilled) return "the container was killed for going over its memory limit";
      if (!state.Running) return `the container stopped: its exec agent exited with code ${state.ExitCode}`;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    return undefined;
  }

  #lost(): TackError {
    return new TackError(
      "sandbox.agent_lost",
      `the exec agent of ${this.#label} stopped while the command ran (${this.#deadReason}); the command's result is lost, and the next sandbox.ensure restarts the sandbox`,
      { retryable: true },
    );
  }

  #failure(what: string): TackError {
    return new TackError("sandbox.agent_failed", `the exec agent of ${this.#label} did not come up: ${what}`, { retryable: true });
  }
}

// The agent's listing, kept to what a well-formed one holds: the channel is not trusted to be well-formed.
function parseListing(header: Header): AgentListing {
  const raw = Array.isArray(header.processes) ? (header.processes as unknown[]) : [];
  const processes: AgentProcess[] = [];
  for (const entry of raw.slice(0, LISTING_LIMITS.processes)) {
    const { pid, ppid, command, state } = (entry ?? {}) as Record<string, unknown>;
    if (!Number.isSafeInteger(pid) || (pid as number) <= 0 || !Number.isSafeInteger(ppid) || (ppid as number) < 0) continue;
    processes.push({
      pid: pid as number,
      ppid: ppid as number,
      command: typeof command === "string" ? command.slice(0, LISTING_LIMITS.command) : "",
      state: typeof state === "string" ? state.slice(0, 1) : "",
    });
  }
  return { processes, truncated: header.truncated === true || raw.length > LISTING_LIMITS.processes };
}
