// Long-lived processes in a session's container whose stdio travels over NATS (decision 0016):
// the MCP service runs stdio MCP servers this way. The process is started through the
// container's exec agent (`spawn`, protocol 3); its input comes as StdioFrames on
// `<ns>.sandbox.stdio.in.<stream>`, its output goes out as StdioFrames on
// `<ns>.sandbox.stdio.out.<stream>`. Frames are numbered; a gap ends the stream, never a resend.
import type { Msg, Subscription } from "@nats-io/nats-core";
import { names, TackError, type Bus } from "@tack/bus";
import { WORKSPACE } from "@tack/config";
import { StdioFrame, type OpenStdioRequest, type OpenStdioResponse } from "@tack/proto";
import type { AgentChannel, SpawnedProcess } from "./agent.js";

/** A stream's process is killed when its caller sent neither input nor a ping for this long. */
export const STDIO_LEASE_MS = 60_000;
/** Most streams one replica holds at once. */
export const MAX_STDIO_STREAMS = 1_000;
const STREAM_ID = /^[0-9a-f]{32}$/;
// Output is cut into frames of at most this many bytes (the agent sends 64 KiB chunks).
const MAX_FRAME_DATA = 256 * 1024;

/** The subjects of one stdio stream: the service reads `input` and publishes on `output`. */
export function stdioSubjects(namespace: string, streamId: string): { input: string; output: string } {
  const n = names(namespace);
  return { input: n.stdioInput(streamId), output: n.stdioOutput(streamId) };
}

/** Checks an open request, failing with `sandbox.bad_request` naming what is wrong. */
export function checkOpenStdioRequest(request: OpenStdioRequest): void {
  if (!STREAM_ID.test(request.streamId)) {
    throw new TackError("sandbox.bad_request", `stream_id ${JSON.stringify(request.streamId)} is not 32 lowercase hex digits; choose a random one per stream`);
  }
  if (request.argv.length === 0 || !request.argv[0]) throw new TackError("sandbox.bad_request", "stdio.open needs a command: argv is empty");
  if (request.cwd && !request.cwd.startsWith("/")) {
    throw new TackError("sandbox.bad_request", `cwd ${JSON.stringify(request.cwd)} is not an absolute path inside the sandbox; use e.g. ${WORKSPACE}`);
  }
  for (const name of Object.keys(request.env)) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) throw new TackError("sandbox.bad_request", `env name ${JSON.stringify(name)} is not a valid variable name`);
  }
}

interface Stream {
  readonly process: SpawnedProcess;
  readonly subscription: Subscription;
  readonly output: string;
  /** Next output frame's number. */
  outSeq: number;
  /** Number the next input frame must carry. */
  inSeq: number;
  lastHeardAt: number;
  /** Set once the stream is being ended: why, for the last frame. */
  ending?: string;
}

/**
 * The stdio streams of this replica's containers. Each stream is one spawned process; it ends
 * when the process exits, the caller closes or kills it, the caller falls silent for the lease,
 * an input frame is missing, or the container's agent goes away; its last output frame says which.
 */
export class StdioStreams {
  readonly #bus: Bus;
  readonly #replicaId: string;
  readonly #streams = new Map<string, Stream>();
  readonly #leaseMs: number;
  readonly #sweeper: NodeJS.Timeout;

  constructor(bus: Bus, replicaId: string, leaseMs = STDIO_LEASE_MS) {
    this.#bus = bus;
    this.#replicaId = replicaId;
    this.#leaseMs = leaseMs;
    this.#sweeper = setInterval(() => this.#sweep(), Math.min(leaseMs / 4, 5_000));
    this.#sweeper.unref();
  }

  /** How many streams are open. */
  get size(): number {
    return this.#streams.size;
  }

  /**
   * Starts `request`'s process through `channel` and serves its stream; `used` is called for
   * every input frame with data (the container is in use). The subscription to the input
   * subject exists before the process starts, so no early input is lost.
   */
  async open(channel: AgentChannel, request: OpenStdioRequest, used: () => void): Promise<OpenStdioResponse> {
    checkOpenStdioRequest(request);
    if (this.#streams.has(request.streamId)) throw new TackError("sandbox.bad_request", `stream ${request.streamId} is already open; choose a new random stream_id`);
    if (this.#streams.size >= MAX_STDIO_STREAMS) throw new TackError("sandbox.too_many_streams", `this sandbox replica holds ${MAX_STDIO_STREAMS} stdio streams already; close some`, { retryable: true });
    const subjects = stdioSubjects(this.#bus.names.namespace, request.streamId);
    // Filled in once the process runs: input and output that come earlier wait in `early` and `pending`.
    const state: { stream?: Stream; publish?: (fd: 1 | 2, chunk: Buffer) => void } = {};
    const early: Msg[] = [];
    const subscription = this.#bus.nc.subscribe(subjects.input, {
      callback: (error, message) => {
        if (error) return;
        if (state.stream) this.#onInput(request.streamId, state.stream, message, used);
        else early.push(message);
      },
    });
    const pending: Array<[1 | 2, Buffer]> = [];
    let spawned: SpawnedProcess;
    try {
      spawned = await channel.spawn(
        { argv: request.argv, cwd: request.cwd || WORKSPACE, env: request.env },
        (fd, chunk) => (state.publish ? state.publish(fd, chunk) : pending.push([fd, chunk])),
      );
    } catch (error) {
      subscription.unsubscribe();
      throw error;
    }
    const live: Stream = { process: spawned, subscription, output: subjects.output, outSeq: 1, inSeq: 1, lastHeardAt: Date.now() };
    this.#streams.set(request.streamId, live);
    const publish = (fd: 1 | 2, chunk: Buffer) => {
      for (let at = 0; at < chunk.length; at += MAX_FRAME_DATA) {
        this.#publish(live, { fd, data: chunk.subarray(at, at + MAX_FRAME_DATA) });
      }
    };
    for (const [fd, chunk] of pending.splice(0)) publish(fd, chunk);
    state.publish = publish;
    state.stream = live;
    for (const message of early.splice(0)) this.#onInput(request.streamId, live, message, used);
    void spawned.exit.then((exit) => {
      this.#streams.delete(request.streamId);
      subscription.unsubscribe();
      this.#publish(live, { exited: true, exitCode: exit.code, reason: live.ending ?? exit.reason });
    });
    used();
    return { pid: spawned.pid, replica: this.#replicaId };
  }

  /** Kills every stream's process (their last frames say the sandbox service stopped). */
  closeAll(reason: string): void {
    clearInterval(this.#sweeper);
    for (const stream of this.#streams.values()) this.#end(stream, reason);
  }

  #onInput(streamId: string, stream: Stream, message: Msg, used: () => void): void {
    let frame: StdioFrame;
    try {
      frame = StdioFrame.decode(message.data);
    } catch {
      return this.#end(stream, "an input frame was not a StdioFrame");
    }
    stream.lastHeardAt = Date.now();
    if (frame.seq === 0) {
      // A ping: answered while the stream lives.
      if (message.reply) message.respond(StdioFrame.encode(StdioFrame.fromPartial({})).finish());
      return;
    }
    if (frame.seq !== stream.inSeq) return this.#end(stream, `input frame ${stream.inSeq} of stream ${streamId} was lost (got ${frame.seq})`);
    stream.inSeq += 1;
    if (frame.data.length > 0) {
      used();
      stream.process.write(frame.data);
    }
    if (frame.eof) stream.process.endInput();
    if (frame.kill) this.#end(stream, "closed by its caller");
  }

  #end(stream: Stream, reason: string): void {
    stream.ending ??= reason;
    stream.process.kill();
  }

  #publish(stream: Stream, frame: Partial<StdioFrame>): void {
    const data = StdioFrame.encode(StdioFrame.fromPartial({ ...frame, seq: stream.outSeq++ })).finish();
    try {
      this.#bus.nc.publish(stream.output, data);
    } catch {
      // The connection is closing (the service stops): the caller learns from its failing pings.
    }
  }

  #sweep(): void {
    const now = Date.now();
    for (const stream of this.#streams.values()) {
      if (now - stream.lastHeardAt >= this.#leaseMs) this.#end(stream, `its caller sent nothing for ${Math.round(this.#leaseMs / 1000)} s`);
    }
  }
}
