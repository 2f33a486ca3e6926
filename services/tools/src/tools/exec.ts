import { WORKSPACE } from "@tack/config";
import { ExecRequest } from "@tack/proto";
import type { ToolContext } from "../tool.js";

/** Each of stdout and stderr is cut here so that an exec reply stays under the bus payload limit. */
export const MAX_STREAM_BYTES = 400_000;
/** File operations that take longer than this are reported as failed. */
const FILE_TIMEOUT_MS = 30_000;

/** An exec response with its output decoded as UTF-8. */
export interface ExecResult {
  readonly exitCode: number;
  readonly stdout: string;
  readonly stderr: string;
  /** False when stdout held bytes that are not UTF-8 (they were decoded as U+FFFD). */
  readonly stdoutIsUtf8: boolean;
  readonly timedOut: boolean;
  readonly truncated: boolean;
}

/** Runs `argv` in the session's sandbox container of the call's mode, in /workspace, with `stdin` written and closed. */
export async function exec(
  ctx: ToolContext,
  argv: string[],
  options: { stdin?: string; timeoutMs?: number } = {},
): Promise<ExecResult> {
  const response = await ctx.sandbox.exec(
    ExecRequest.fromPartial({
      sessionId: ctx.sessionId,
      argv,
      stdin: Buffer.from(options.stdin ?? "", "utf8"),
      cwd: WORKSPACE,
      timeoutMs: options.timeoutMs ?? FILE_TIMEOUT_MS,
      maxOutputBytes: MAX_STREAM_BYTES,
      mode: ctx.mode,
    }),
    ctx.signal,
  );
  let stdoutIsUtf8 = true;
  try {
    strictUtf8.decode(response.stdout);
  } catch {
    stdoutIsUtf8 = false;
  }
  return {
    exitCode: response.exitCode,
    stdout: Buffer.from(response.stdout).toString("utf8"),
    stderr: Buffer.from(response.stderr).toString("utf8"),
    stdoutIsUtf8,
    timedOut: response.timedOut,
    truncated: response.truncated,
  };
}

const strictUtf8 = new TextDecoder("utf-8", { fatal: true });
