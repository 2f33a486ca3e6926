// A process in a session's sandbox container whose stdio travels over the bus: the client side of
// the sandbox service's stdio streams (decision 0016). The process is started by the container's
// exec agent (`<ns>.sandbox.stdio.open`); its input goes as StdioFrames on
// `<ns>.sandbox.stdio.in.<stream>`, its output comes back on `<ns>.sandbox.stdio.out.<stream>`.
// MCP stdio servers and run_code programs (decision 0020) both run this way.
import { randomBytes } from "node:crypto";
import type { Subscription } from "@nats-io/nats-core";
import { OpenStdioRequest, StdioFrame, type OpenStdioResponse } from "@tack/proto";
import type { Bus } from "./bus.js";
import { rpcSubject } from "./descriptor.js";
import { SandboxRpc } from "./gen/descriptors.js";
import { names } from "./subjects.js";

/** The subjects of one stdio stream: the rpc that opens it, then its input and output (`Names`, which the sandbox service uses too). */
export function sandboxStdioSubjects(namespace: string, streamId: string): { open: string; input: string; output: string } {
  const n = names(namespace);
  return { open: rpcSubject(namespace, SandboxRpc.OpenStdio), input: n.stdioInput(streamId), output: n.stdioOutput(streamId) };
}

/** A stream is pinged this often; the sandbox kills a process whose caller is silent for 60 s. */
export const STDIO_PING_EVERY_MS = 15_000;
const PING_TIMEOUT_MS = 5_000;
const OPEN_TIMEOUT_MS = 30_000;
/** Input is sent in frames of at most this many bytes, well under the bus's payload limit. */
const MAX_INPUT_FRAME = 256 * 1024;

/** What to start and where. */
export interface SandboxProcessRequest {
  readonly sessionId: string;
  /** Mode of the container (the call's sandbox mode). */
  readonly mode: string;
  readonly argv: readonly string[];
  /** Variables on top of the container's PATH, HOME and LANG. */
  readonly env?: Readonly<Record<string, string>>;
  /** Absolute path in the container; default /workspace. */
  readonly cwd?: string;
}

/** How a sandbox process ended: its exit code (128+N for signal N, -1 unknown) and, when it did not simply exit, why. */
export interface SandboxProcessExit {
  readonly code: number;
  readonly reason: string;
}

/** A running process in a sandbox container. */
export interface SandboxProcess {
  /** Its pid inside the container. */
  readonly pid: number;
  /** Resolves once, when the process ended or its stream broke (never rejects). */
  readonly exit: Promise<SandboxProcessExit>;
  /** Bytes for its stdin (dropped once the stream ended). */
  write(data: Uint8Array): void;
  /** Closes its stdin. */
  endInput(): void;
  /** Kills it (SIGKILL to its process group) and stops listening; `exit` resolves with `reason`. */
  kill(reason?: string): void;
}

/** Receives the process's output, in order, as it comes. */
export type SandboxOutput = (fd: 1 | 2, data: Uint8Array) => void;

/**
 * Starts `request` in its session's container and returns it once it runs. Output written before
 * the open is answered is not lost (the output subject is subscribed first). A lost frame, a
 * stream that stops answering pings, or the container going away ends it: `exit` says which.
 * Rejects with the open's TackError (`sandbox.not_found` when the session has no container).
 */
export async function openSandboxProcess(bus: Bus, request: SandboxProcessRequest, onOutput: SandboxOutput): Promise<SandboxProcess> {
  const streamId = randomBytes(16).toString("hex");
  const subjects = sandboxStdioSubjects(bus.names.namespace, streamId);
  let settle!: (exit: SandboxProcessExit) => void;
  const exit = new Promise<SandboxProcessExit>((resolve) => (settle = resolve));
  let inSeq = 1;
  let outSeq = 1;
  let closed = false;
  // Set once the stream is open; `finish` may run before that.
  const timers: { pinger?: NodeJS.Timeout } = {};
  const publish = (frame: Partial<StdioFrame>) => {
    if (closed) return;
    try {
      bus.nc.publish(subjects.input, StdioFrame.encode(StdioFrame.fromPartial({ ...frame, seq: inSeq++ })).finish());
    } catch {
      // The connection is closing: the stream ends with it (the sandbox kills the process after 60 s of silence).
    }
  };
  const finish = (ending: SandboxProcessExit) => {
    if (closed) return;
    closed = true;
    clearInterval(timers.pinger);
    subscription.unsubscribe();
    settle(ending);
  };
  const fail = (reason: string) => {
    publish({ kill: true });
    finish({ code: -1, reason });
  };
  const subscription: Subscription = bus.nc.subscribe(subjects.output, {
    callback: (error, message) => {
      if (error || closed) return;
      let frame: StdioFrame;
      try {
        frame = StdioFrame.decode(message.data);
      } catch {
        return fail("an output frame of the sandbox stream is not a StdioFrame");
      }
      if (Number(frame.seq) !== outSeq) return fail(`output frame ${outSeq} of the sandbox stream was lost (got ${frame.seq})`);
      outSeq += 1;
      if (frame.exited) return finish({ code: frame.exitCode, reason: frame.reason });
      if (frame.data.length > 0) onOutput(frame.fd === 2 ? 2 : 1, frame.data);
    },
  });
  let opened: OpenStdioResponse;
  try {
    opened = await bus.request(SandboxRpc.OpenStdio, OpenStdioRequest.fromPartial({
      sessionId: request.sessionId, mode: request.mode, argv: [...request.argv], env: { ...request.env }, cwd: request.cwd ?? "", streamId,
    }), { timeoutMs: OPEN_TIMEOUT_MS });
  } catch (error) {
    closed = true;
    subscription.unsubscribe();
    throw error;
  }
  const ping = async () => {
    if (closed) return;
    try {
      await bus.nc.request(subjects.input, StdioFrame.encode(StdioFrame.fromPartial({})).finish(), { timeout: PING_TIMEOUT_MS });
    } catch (error) {
      if (!closed) finish({ code: -1, reason: `the sandbox stream stopped answering pings (${(error as Error).message})` });
    }
  };
  timers.pinger = setInterval(() => void ping(), STDIO_PING_EVERY_MS);
  timers.pinger.unref();
  return {
    pid: opened.pid,
    exit,
    write: (data) => {
      const bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
      for (let at = 0; at < bytes.length; at += MAX_INPUT_FRAME) publish({ data: bytes.subarray(at, at + MAX_INPUT_FRAME) });
    },
    endInput: () => publish({ eof: true }),
    kill: (reason = "killed by its caller") => fail(reason),
  };
}
