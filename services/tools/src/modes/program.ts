import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { StringDecoder } from "node:string_decoder";
import type { SandboxOutput, SandboxProcess, SandboxProcessExit } from "@tack/bus";
import { ToolError } from "../tool.js";

/** What one run_code program may use. */
export interface CodeLimits {
  /** Wall-clock time from start to the program's end; its process is killed past it. */
  readonly wallMs: number;
  /** The program's V8 old-generation heap (`--max-old-space-size`); the container's memory limit applies too. */
  readonly heapMb: number;
  /** console output kept; the rest is counted and left out. */
  readonly outputChars: number;
  /** Tool calls one program may make; later ones fail in the program. */
  readonly calls: number;
}

export const DEFAULT_CODE_LIMITS: CodeLimits = { wallMs: 120_000, heapMb: 128, outputChars: 100_000, calls: 200 };

/** The limits from TACK_RUN_CODE_WALL_MS, _HEAP_MB, _OUTPUT_CHARS and _CALLS (positive integers), defaults for the rest. */
export function codeLimitsFromEnv(env: NodeJS.ProcessEnv = process.env): CodeLimits {
  const read = (name: string, fallback: number) => {
    const raw = env[name];
    if (raw === undefined || raw === "") return fallback;
    const value = Number(raw);
    if (!Number.isSafeInteger(value) || value < 1) throw new Error(`${name}=${JSON.stringify(raw)} is not a positive integer; unset it for the default ${fallback}`);
    return value;
  };
  return {
    wallMs: read("TACK_RUN_CODE_WALL_MS", DEFAULT_CODE_LIMITS.wallMs),
    heapMb: read("TACK_RUN_CODE_HEAP_MB", DEFAULT_CODE_LIMITS.heapMb),
    outputChars: read("TACK_RUN_CODE_OUTPUT_CHARS", DEFAULT_CODE_LIMITS.outputChars),
    calls: read("TACK_RUN_CODE_CALLS", DEFAULT_CODE_LIMITS.calls),
  };
}

/** How a program ended. */
export type ProgramEnd =
  | { readonly kind: "returned"; readonly value: string }
  | { readonly kind: "threw"; readonly error: string }
  | { readonly kind: "wall" | "heap" | "cancelled" | "crashed"; readonly error: string };

export interface ProgramOutcome {
  readonly end: ProgramEnd;
  /** console output, at most `limits.outputChars`. */
  readonly output: string;
  /** Characters of output left out past the cap. */
  readonly dropped: number;
  /** Tool calls the program made (refused ones included). */
  readonly calls: number;
}

/** How a program's tool calls are run: the text result, and whether it is an error (thrown in the program). */
export type CallInner = (name: string, args: string) => Promise<{ content: string; isError: boolean }>;

/** Starts argv in the session's sandbox (in production `SandboxClient.spawn` for the call's mode). */
export type SpawnProgram = (argv: readonly string[], onOutput: SandboxOutput) => Promise<SandboxProcess>;

/** The runner the container's node executes (`node -e`); shipped with the service, never taken from a workspace. */
const RUNNER = readFileSync(new URL("./code-runner.cjs", import.meta.url), "utf8");
/** A protocol line longer than this (an inner call's arguments, say) ends the program. */
export const MAX_PROTOCOL_LINE = 8 * 1024 * 1024;
/** What is kept of the runner's own stderr (node's fatal errors), for the message of a crash. */
const STDERR_KEPT = 16 * 1024;

type Esbuild = { transform(code: string, options: Record<string, unknown>): Promise<{ code: string }> };
let esbuild: Esbuild | undefined;

/**
 * TypeScript to the JavaScript the runner evaluates: the body becomes an async arrow function, so
 * `await` and `return` work at the top. Types are stripped, not checked (a transform: nothing of
 * the program runs here). A syntax error is a ToolError naming the line of the program.
 */
export async function compileProgram(code: string): Promise<string> {
  // Loaded at run time (it starts a helper process), and esbuild is a development dependency of the checkout.
  esbuild ??= createRequire(import.meta.url)("esbuild") as Esbuild;
  try {
    // The sandbox image's Node is the pinned one of .node-version (decision 0023); node18 syntax runs on it and on any later.
    const { code: js } = await esbuild.transform(`(async () => {\n${code}\n})`, { loader: "ts", target: "node18", sourcefile: "program.ts" });
    return js;
  } catch (error) {
    const problems = (error as { errors?: Array<{ text: string; location?: { line: number; column: number } | null }> }).errors;
    if (!problems) throw error;
    // Line 1 is the wrapper's; the program's line n is line n + 1.
    const lines = problems.map((p) => (p.location ? `line ${p.location.line - 1}:${p.location.column + 1}: ${p.text}` : p.text));
    throw new ToolError(`The program does not compile:\n${lines.join("\n")}\nWrite a plain TypeScript script body (no import or export; top-level await and return work).`);
  }
}

type ProtocolMessage =
  | { type: "print"; text: string; dropped: number }
  | { type: "done"; ok: boolean; text: string }
  | { type: "call"; id: number; name: string; args: string };

/**
 * Runs compiled program `js` in a node process started by `spawn` (the session's container) with
 * `tools.<name>` for each of `tools`, each call going to `callInner`; killed at the wall limit or
 * when `signal` aborts. Everything the process says is untrusted: a call of a name not in `tools`,
 * past the call limit, or a malformed line is refused, never run. Waits for the calls still
 * running at the end, so that every call made is answered (and logged) before the outcome is.
 */
export async function runProgram(
  js: string, options: { tools: readonly string[]; limits: CodeLimits; callInner: CallInner; spawn: SpawnProgram; signal?: AbortSignal },
): Promise<ProgramOutcome> {
  const { limits, callInner, signal } = options;
  const allowed = new Set(options.tools);
  const tag = `${randomBytes(12).toString("hex")}:`;
  const output: string[] = [];
  let kept = 0;
  let dropped = 0;
  let calls = 0;
  let stderr = "";
  const inFlight = new Set<Promise<void>>();
  let end: ProgramEnd | undefined;
  let child: SandboxProcess | undefined;
  let resolveEnd!: (ending: ProgramEnd) => void;
  const ended = new Promise<ProgramEnd>((resolve) => (resolveEnd = resolve));
  const finish = (ending: ProgramEnd) => {
    if (end) return;
    end = ending;
    child?.kill("the program ended");
    resolveEnd(ending);
  };
  const keep = (text: string, more: number) => {
    const room = limits.outputChars - kept;
    const taken = text.length > room ? text.slice(0, Math.max(0, room)) : text;
    if (taken) output.push(taken);
    kept += taken.length;
    dropped += more + text.length - taken.length;
  };
  const reply = (id: number, content: string, isError: boolean) => {
    if (!end) child?.write(Buffer.from(`${JSON.stringify({ id, content, isError })}\n`));
  };
  const onMessage = (message: ProtocolMessage) => {
    if (message.type === "print") return keep(message.text, message.dropped);
    if (message.type === "done") return finish(message.ok ? { kind: "returned", value: message.text } : { kind: "threw", error: message.text });
    calls += 1;
    if (!allowed.has(message.name)) return reply(message.id, `tools.${message.name}: no such tool in run_code; the tools are ${options.tools.join(", ")}`, true);
    if (calls > limits.calls) return reply(message.id, `tools.${message.name}: not run, the program already made its limit of ${limits.calls} tool calls`, true);
    const running = callInner(message.name, message.args).then(
      ({ content, isError }) => reply(message.id, content, isError),
      (error: unknown) => reply(message.id, `tools.${message.name} could not run: ${(error as Error).message}`, true),
    ).finally(() => inFlight.delete(running));
    inFlight.add(running);
  };
  const decoder = new StringDecoder("utf8");
  let partial = "";
  const onStdout = (data: Uint8Array) => {
    partial += decoder.write(Buffer.from(data));
    for (let at = partial.indexOf("\n"); at >= 0 && !end; at = partial.indexOf("\n")) {
      const line = partial.slice(0, at);
      partial = partial.slice(at + 1);
      if (!line.startsWith(tag)) {
        keep(`${line}\n`, 0);
        continue;
      }
      const message = parseMessage(line.slice(tag.length));
      if (!message) return finish({ kind: "crashed", error: "the program's runner sent a malformed message to the tools service (did the program write to the runner's channel?)" });
      onMessage(message);
    }
    if (partial.length > MAX_PROTOCOL_LINE) finish({ kind: "crashed", error: `the program wrote a line of more than ${MAX_PROTOCOL_LINE} bytes to its output; print less at once` });
  };
  const timer = setTimeout(() => finish({ kind: "wall", error: `the program ran past its wall-clock limit of ${limits.wallMs} ms and was stopped` }), limits.wallMs);
  const onAbort = () => finish({ kind: "cancelled", error: "the tools service is stopping" });
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    if (signal?.aborted) onAbort();
    else {
      child = await options.spawn(
        ["node", `--max-old-space-size=${limits.heapMb}`, "-e", RUNNER],
        (fd, data) => {
          if (fd === 1) onStdout(data);
          else if (stderr.length < STDERR_KEPT) stderr += Buffer.from(data).toString("utf8");
        },
      );
      if (end) child.kill("the program ended");
      child.write(Buffer.from(`${JSON.stringify({ tag, program: js, tools: options.tools, outputChars: limits.outputChars })}\n`));
      void child.exit.then((exit) => finish(endOfExit(exit, stderr, limits)));
    }
    const ending = await ended;
    await Promise.allSettled(inFlight);
    return { end: ending, output: output.join(""), dropped, calls };
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener("abort", onAbort);
  }
}

/** A protocol message, or undefined when the line is not one. */
function parseMessage(text: string): ProtocolMessage | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof value !== "object" || value === null) return undefined;
  const m = value as Record<string, unknown>;
  if (m.type === "print" && typeof m.text === "string" && Number.isSafeInteger(m.dropped) && (m.dropped as number) >= 0) return m as ProtocolMessage;
  if (m.type === "done" && typeof m.ok === "boolean" && typeof m.text === "string") return m as ProtocolMessage;
  if (m.type === "call" && Number.isSafeInteger(m.id) && typeof m.name === "string" && typeof m.args === "string") return m as ProtocolMessage;
  return undefined;
}

/** Why a program's process ended before it said it was done. */
function endOfExit(exit: SandboxProcessExit, stderr: string, limits: CodeLimits): ProgramEnd {
  if (/JavaScript heap out of memory|Reached heap limit/.test(stderr)) {
    return { kind: "heap", error: `the program ran out of its ${limits.heapMb} MB heap and was stopped` };
  }
  if (exit.code === 137) {
    return { kind: "crashed", error: `the program was killed (SIGKILL)${exit.reason ? `: ${exit.reason}` : "; it may have run out of the sandbox's memory"}` };
  }
  const last = stderr.trim().split("\n").slice(-5).join("\n");
  return {
    kind: "crashed",
    error: `the program's process ended (exit code ${exit.code}${exit.reason ? `, ${exit.reason}` : ""}) before the program did${last ? `:\n${last}` : ""}`,
  };
}
