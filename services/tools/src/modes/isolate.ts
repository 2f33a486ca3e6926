import { createRequire } from "node:module";
import { Worker } from "node:worker_threads";
import { ToolError } from "../tool.js";

/** What one run_code program may use. */
export interface CodeLimits {
  /** Wall-clock time from start to the program's end; the worker is terminated past it. */
  readonly wallMs: number;
  /** The worker's old-generation heap (V8 `maxOldGenerationSizeMb`). */
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

type Esbuild = { transform(code: string, options: Record<string, unknown>): Promise<{ code: string }> };
let esbuild: Esbuild | undefined;

/**
 * TypeScript to the JavaScript the worker runs: the body becomes an async arrow function, so
 * `await` and `return` work at the top. Types are stripped, not checked. A syntax error is a
 * ToolError naming the line of the program.
 */
export async function compileProgram(code: string): Promise<string> {
  // Loaded at run time (it starts a helper process), and esbuild is a development dependency of the checkout.
  esbuild ??= createRequire(import.meta.url)("esbuild") as Esbuild;
  try {
    const { code: js } = await esbuild.transform(`(async () => {\n${code}\n})`, {
      loader: "ts", target: "node20", sourcefile: "program.ts",
      // import() becomes require() (which the worker's context refuses): no import() may reach Node's loader, see code-worker.mjs.
      supported: { "dynamic-import": false },
    });
    return js;
  } catch (error) {
    const problems = (error as { errors?: Array<{ text: string; location?: { line: number; column: number } | null }> }).errors;
    if (!problems) throw error;
    // Line 1 is the wrapper's; the program's line n is line n + 1.
    const lines = problems.map((p) => (p.location ? `line ${p.location.line - 1}:${p.location.column + 1}: ${p.text}` : p.text));
    throw new ToolError(`The program does not compile:\n${lines.join("\n")}\nWrite a plain TypeScript script body (no import or export; top-level await and return work).`);
  }
}

/**
 * Runs compiled program `js` in a fresh worker (heap capped) with `tools.<name>` for each of
 * `tools`, each call going to `callInner`; terminated at the wall limit or when `signal`
 * aborts. Waits for the calls still running at the end, so that every call made is answered
 * (and logged) before the outcome is.
 */
export function runProgram(
  js: string, options: { tools: readonly string[]; limits: CodeLimits; callInner: CallInner; signal?: AbortSignal },
): Promise<ProgramOutcome> {
  const { limits, callInner, signal } = options;
  const worker = new Worker(new URL("./code-worker.mjs", import.meta.url), {
    workerData: { program: js, tools: options.tools, outputChars: limits.outputChars },
    // An empty environment: the service's variables (credentials among them) never reach the thread;
    // no flags either: the worker is plain JavaScript, and loader hooks (tsx) would run in it too.
    env: {}, execArgv: [],
    resourceLimits: { maxOldGenerationSizeMb: limits.heapMb, maxYoungGenerationSizeMb: Math.min(32, Math.max(4, limits.heapMb >> 2)), stackSizeMb: 4 },
    stdout: true, stderr: true,
  });
  const output: string[] = [];
  let dropped = 0;
  let calls = 0;
  const inFlight = new Set<Promise<void>>();
  let end: ProgramEnd | undefined;
  return new Promise<ProgramOutcome>((resolve) => {
    const finish = (ending: ProgramEnd) => {
      if (end) return;
      end = ending;
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      void worker.terminate();
      void Promise.allSettled(inFlight).then(() => resolve({ end: ending, output: output.join(""), dropped, calls }));
    };
    const timer = setTimeout(() => finish({ kind: "wall", error: `the program ran past its wall-clock limit of ${limits.wallMs} ms and was stopped` }), limits.wallMs);
    const onAbort = () => finish({ kind: "cancelled", error: "the tools service is stopping" });
    if (signal?.aborted) onAbort();
    signal?.addEventListener("abort", onAbort, { once: true });
    worker.on("message", (message: WorkerMessage) => {
      if (end) return;
      if (message.type === "print") {
        if (message.text) output.push(message.text);
        dropped += message.dropped;
      } else if (message.type === "done") {
        finish(message.ok ? { kind: "returned", value: message.text } : { kind: "threw", error: message.text });
      } else if (message.type === "call") {
        calls += 1;
        const reply = (content: string, isError: boolean) => {
          if (!end) worker.postMessage({ id: message.id, content, isError });
        };
        if (calls > limits.calls) {
          reply(`tools.${message.name}: not run, the program already made its limit of ${limits.calls} tool calls`, true);
          return;
        }
        const running = callInner(message.name, message.args).then(
          ({ content, isError }) => reply(content, isError),
          (error: unknown) => reply(`tools.${message.name} could not run: ${(error as Error).message}`, true),
        ).finally(() => inFlight.delete(running));
        inFlight.add(running);
      }
    });
    worker.on("error", (error: Error & { code?: string }) => {
      finish(error.code === "ERR_WORKER_OUT_OF_MEMORY"
        ? { kind: "heap", error: `the program ran out of its ${limits.heapMb} MB heap and was stopped` }
        : { kind: "crashed", error: `the program's worker failed: ${error.message}` });
    });
    worker.on("exit", (code) => finish({ kind: "crashed", error: `the program's worker exited (code ${code}) before the program ended` }));
  });
}

type WorkerMessage =
  | { type: "print"; text: string; dropped: number }
  | { type: "done"; ok: boolean; text: string }
  | { type: "call"; id: number; name: string; args: string };
