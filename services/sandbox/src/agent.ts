import { randomBytes } from "node:crypto";
import { TackError } from "@tack/bus";
import type { AgentStreams, SandboxBackend } from "./backend.js";

/**
 * Protocol version spoken by `agent/agent.py`. 2: the agent is PID 1 and answers `ps`; 3: it also
 * runs long-lived processes with streamed stdin (`spawn`, decision 0016). Agents of 2 (containers
 * created before) are still used for everything else; older or newer ones are not used.
 */
export const AGENT_PROTOCOL = 3;
const OLDEST_PROTOCOL = 2;
// Largest frame either side sends: stdin is bounded by the bus, output chunks are 64 KiB.
const MAX_FRAME = 4 * 1024 * 1024;
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
/**
 * What a command's stderr ends with when the kernel's OOM killer ended it: the agent's own line
 * under runc, where the kernel kills the command; the same line, and what else went, when the
 * whole sandbox was killed (gVisor's memory cgroup holds its kernel, so the host kills all of it).
 */
export const OOM_LINE = "tack-agent: killed by the kernel's out-of-memory killer: the sandbox reached its memory limit\n";
const SANDBOX_OOM_LINES = `${OOM_LINE}tack-agent: the whole sandbox went with it; the next command runs in a fresh one (the workspace is kept; /tmp, HOME and background processes are not)\n`;

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

/** A long-lived process for `spawn`: no timeout, no output cap, stdin written as it comes. */
export interface SpawnCommand {
  readonly argv: readonly string[];
  readonly cwd: string;
  /** Added to the container's PATH, HOME and LANG; nothing else reaches the process. */
  readonly env: Readonly<Record<string, string>>;
}

/** How a spawned process ended. */
export interface SpawnExit {
  /** Exit code, 128+N for signal N; -1 when the channel died before the agent said. */
  readonly code: number;
  /** Empty when the process exited by itself or was killed on request; else why it is gone (the channel died). */
  readonly reason: string;
}

/** The service's handle of one spawned process. */
export interface SpawnedProcess {
  readonly pid: number;
  /** Bytes for its stdin (dropped once it exited). */
  write(data: Uint8Array): void;
  /** Closes its stdin. */
  endInput(): void;
  /** SIGKILLs its process group; `exit` follows. */
  kill(): void;
  /** Resolves once it exited, was killed or the channel died. */
  readonly exit: Promise<SpawnExit>;
}

interface PendingSpawn {
  readonly onOutput: (fd: 1 | 2, chunk: Buffer) => void;
  readonly started: (pid: number) => void;
  readonly failedToStart: (error: TackError) => void;
  readonly exited: (exit: SpawnExit) => void;
  stderr: Buffer[];
  pid?: number;
}

interface Header {
  op?: unknown;
  pid?: unknown;
  id?: unknown;
  fd?: unknown;
  code?: unknown;
  timed_out?: unknown;
  truncated?: unknown;
  protocol?: unknown;
  processes?: unknown;
}

/**
 * The service's end of one container's exec agent: the backend's attach to the agent's
 * stdin/stdout carrying length-prefixed frames, several commands at once. When the stream ends
 * (the agent or its container stopped) every command in flight fails with `sandbox.agent_lost`
 * and the channel stays dead; there is no other way to run a command.
 */
export class AgentChannel {
  readonly #streams: AgentStreams;
  readonly #stopped: () => Promise<StopCause | undefined>;
  readonly #label: string;
  readonly #pending = new Map<string, Pending>();
  readonly #listings = new Map<string, PendingListing>();
  readonly #spawns = new Map<string, PendingSpawn>();
  #protocol = 0;
  readonly #nonce = randomBytes(4).toString("hex");
  #next = 0;
  #frames: Buffer = Buffer.alloc(0);
  #stderrTail = "";
  #hello: ((error?: TackError) => void) | undefined;
  #deadReason: string | undefined;
  #oomKilled = false;
  readonly #onDead: Array<(reason: string) => void> = [];

  private constructor(streams: AgentStreams, stopped: () => Promise<StopCause | undefined>, label: string) {
    this.#streams = streams;
    this.#stopped = stopped;
    this.#label = label;
    streams.listen({
      stdout: (chunk) => this.#onFrames(chunk),
      stderr: (chunk) => (this.#stderrTail = (this.#stderrTail + chunk.toString()).slice(-STDERR_TAIL)),
      ended: (reason) => this.#die(reason),
    });
  }

  /** Attaches to the sandbox `id` of `backend` (created, started or not); `handshake` must follow once it runs. */
  static async attach(backend: SandboxBackend, id: string, label: string): Promise<AgentChannel> {
    const streams = await backend.attach(id, label);
    const since = Date.now();
    return new AgentChannel(streams, () => stopCause(backend, id, label, since), label);
  }

  /** True until the stream ended or broke. */
  get alive(): boolean {
    return this.#deadReason === undefined;
  }

  /** Why the channel is dead, if it is. */
  get deadReason(): string | undefined {
    return this.#deadReason;
  }

  /** True once the channel died because the container went over its memory limit (its next use may restart it). */
  get oomKilled(): boolean {
    return this.#oomKilled;
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

  /**
   * Starts a long-lived process (protocol 3): its output goes to `onOutput` as it comes, its
   * stdin is written with `write`. Resolves once it runs; fails with `sandbox.spawn_failed` (its
   * stderr quoted) when it cannot start, `sandbox.agent_outdated` when the container's agent
   * predates spawning, `sandbox.agent_lost` when the channel is dead.
   */
  spawn(command: SpawnCommand, onOutput: (fd: 1 | 2, chunk: Buffer) => void): Promise<SpawnedProcess> {
    if (!this.alive) return Promise.reject(this.#lost());
    if (this.#protocol < 3) {
      return Promise.reject(new TackError("sandbox.agent_outdated", `the exec agent of ${this.#label} speaks protocol ${this.#protocol}, which cannot run long-lived processes; release the sandbox so that it is created with the current agent`));
    }
    const id = `${this.#nonce}-${this.#next++}`;
    let exited!: (exit: SpawnExit) => void;
    const exit = new Promise<SpawnExit>((resolve) => (exited = resolve));
    return new Promise<SpawnedProcess>((resolve, reject) => {
      const pending: PendingSpawn = {
        onOutput,
        stderr: [],
        exited,
        failedToStart: reject,
        started: (pid) => resolve({
          pid,
          exit,
          write: (data) => {
            if (this.alive && this.#spawns.has(id) && data.length > 0) this.#send({ op: "in", id }, data);
          },
          endInput: () => {
            if (this.alive && this.#spawns.has(id)) this.#send({ op: "in", id, eof: true });
          },
          kill: () => {
            if (this.alive && this.#spawns.has(id)) this.#send({ op: "kill", id });
          },
        }),
      };
      this.#spawns.set(id, pending);
      this.#send({ op: "spawn", id, argv: command.argv, cwd: command.cwd, env: command.env });
    });
  }

  #onSpawnFrame(id: string, spawn: PendingSpawn, header: Header, body: Buffer): void {
    if (header.op === "spawned") {
      spawn.pid = Number.isSafeInteger(header.pid) ? (header.pid as number) : 0;
      spawn.started(spawn.pid);
    } else if (header.op === "out") {
      const fd = header.fd === 2 ? 2 : 1;
      // Before it runs, stderr is the agent's reason it could not start.
      if (spawn.pid === undefined) spawn.stderr.push(body);
      else spawn.onOutput(fd, body);
    } else if (header.op === "exit") {
      this.#spawns.delete(id);
      const code = typeof header.code === "number" ? header.code : -1;
      if (spawn.pid === undefined) {
        spawn.failedToStart(new TackError("sandbox.spawn_failed", `the process did not start in ${this.#label} (exit code ${code}): ${Buffer.concat(spawn.stderr).toString().trim()}`));
      }
      spawn.exited({ code, reason: "" });
    }
  }

  /** Closes the connection; the agent keeps running and a later attach can take it over. */
  close(): void {
    this.#die("the service closed the channel", false);
    this.#streams.destroy();
  }

  #send(header: Record<string, unknown>, body: Uint8Array = new Uint8Array()): void {
    const json = Buffer.from(JSON.stringify(header));
    const prefix = Buffer.alloc(AGENT_PREFIX);
    prefix.writeUInt32BE(json.length, 0);
    prefix.writeUInt32BE(body.length, 4);
    this.#streams.write(Buffer.concat([prefix, json, body]));
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
      const protocol = typeof header.protocol === "number" ? header.protocol : 0;
      if (protocol < OLDEST_PROTOCOL || protocol > AGENT_PROTOCOL) {
        this.#hello?.(this.#failure(`it speaks protocol ${String(header.protocol)}, not ${OLDEST_PROTOCOL}-${AGENT_PROTOCOL}; release the sandbox so that it is created again`));
      } else {
        this.#protocol = protocol;
        this.#hello?.();
      }
      return;
    }
    const spawn = typeof header.id === "string" ? this.#spawns.get(header.id) : undefined;
    if (spawn) return this.#onSpawnFrame(header.id as string, spawn, header, body);
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
    this.#streams.destroy();
  }

  // Marks the channel dead at once; what waits on it fails once the engine said why (when `explain`).
  #die(reason: string, explain = true): void {
    if (this.#deadReason !== undefined) return;
    const tail = this.#stderrTail.trim().split("\n").at(-1);
    const withTail = (what: string) => (tail ? `${what}; its last words: ${tail}` : what);
    this.#deadReason = withTail(reason);
    void (explain ? this.#stopped() : Promise.resolve(undefined)).then((cause) => {
      if (cause) this.#deadReason = withTail(cause.text);
      this.#oomKilled = cause?.oomKilled === true;
      this.#hello?.(this.#failure(this.#deadReason ?? reason));
      // Out of memory is the command's own doing: it gets the result runc's agent would give (137 and the OOM line), not a lost channel.
      if (this.#oomKilled) {
        for (const [id, pending] of this.#pending) {
          clearTimeout(pending.timer);
          this.#pending.delete(id);
          pending.resolve({
            exitCode: 137,
            stdout: Buffer.concat(pending.stdout),
            stderr: Buffer.concat([...pending.stderr, Buffer.from(SANDBOX_OOM_LINES)]),
            timedOut: false,
            truncated: pending.truncated,
          });
        }
      }
      for (const waiting of [this.#pending, this.#listings]) {
        for (const [id, pending] of waiting) {
          clearTimeout(pending.timer);
          waiting.delete(id);
          pending.reject(this.#lost());
        }
      }
      for (const [id, spawn] of this.#spawns) {
        this.#spawns.delete(id);
        if (spawn.pid === undefined) spawn.failedToStart(this.#lost());
        spawn.exited({ code: -1, reason: `the sandbox's exec agent stopped (${this.#deadReason ?? reason})` });
      }
      for (const listener of this.#onDead.splice(0)) listener(this.#deadReason ?? reason);
    });
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

const OOM_TEXT = "the container was killed for going over its memory limit";

/** Why a sandbox stopped, as the backend tells it; `oomKilled` when its memory limit killed the whole sandbox. */
interface StopCause {
  readonly text: string;
  readonly oomKilled: boolean;
}

// Why the sandbox stopped, once the backend knows it stopped: the memory limit, or the agent's exit.
async function stopCause(backend: SandboxBackend, id: string, label: string, since: number): Promise<StopCause | undefined> {
  // Under runc the kernel kills commands, which the agent reports itself, and Docker's OOM flag stays set while
  // the container lives on: it cannot say what stopped it later. Under gVisor it means the sandbox's kernel went.
  const wholeSandbox = (await backend.runtime().catch(() => undefined))?.userspaceKernel === true;
  const deadline = Date.now() + EXPLAIN_WITHIN_MS;
  while (Date.now() < deadline) {
    const state = await backend.state(id, label).catch(() => undefined);
    if (!state) return undefined;
    if (state.oomKilled) return { text: OOM_TEXT, oomKilled: wholeSandbox };
    if (!state.running) {
      // A SIGKILLed gVisor sandbox that nobody asked the engine to kill: its OOM killer, which the engine does not always report.
      if (wholeSandbox && state.exitCode === 137 && (await backend.killRequested?.(id, since)) === false) return { text: OOM_TEXT, oomKilled: true };
      return { text: `the container stopped: its exec agent exited with code ${state.exitCode}`, oomKilled: false };
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return undefined;
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
