// Code mode numbers (issues 9 and 18): the size of code mode's first request next to the standard
// mode's, and what a tool call made from a run_code program costs. The program runs where it runs in
// production: node in the session's sandbox container (decision 0020), its calls coming back over
// the sandbox stream to the tools service, each `read` an exec in the same container.
// Alone: `npx tsx bench/run-code.ts` prints the JSON; bench/run.ts can call `benchRunCode()`.
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { CompleteRequest, Role, type CallToolResponse } from "@tack/proto";
import { listTools } from "@tack/tools-service";
import { countRequestTokens } from "../services/llm/src/tokens.js";
import { ToolsOverBus } from "../services/tools/test/support/over-bus.js";
import { percentile, round } from "./lib.js";

const BATCHES = 20;
const CALLS_PER_BATCH = 50;
const TASK = "slugify breaks on repeated spaces; fix it and run the tests";

/** Tokens of a first request (system prompt, the mode's tools, the task) as the DeepSeek request body counts them. */
export function firstRequestTokens(mode: string): number {
  const prompts = join(import.meta.dirname, "../services/loop/src/prompts");
  // A mode without its own prompt (yet) is counted with the standard one.
  const file = existsSync(join(prompts, `${mode}.md`)) ? join(prompts, `${mode}.md`) : join(prompts, "standard.md");
  return countRequestTokens(CompleteRequest.fromPartial({
    model: "deepseek:deepseek-chat", systemPrompt: readFileSync(file, "utf8").trim(), tools: listTools(mode),
    messages: [{ role: Role.ROLE_USER, content: TASK }],
  }));
}

/**
 * Per batch, in one session's warm runc container over the bus: the wall time of a program making
 * CALLS_PER_BATCH sequential `read` calls, less that of an empty program (compile, node's start in
 * the container, the stream), per call; and the same number of direct `read` calls, per call. The
 * overhead of a batch is the difference; p50 over BATCHES batches.
 */
export async function benchRunCode(): Promise<Record<string, unknown>> {
  const program = `for (let i = 0; i < ${CALLS_PER_BATCH}; i++) await tools.read({ path: "a.txt" });`;
  const stack = await ToolsOverBus.start({ mode: "code", sessionId: "bench-code", tenant: "bench" });
  try {
    writeFileSync(join(stack.workspace, "a.txt"), "hello\n");
    const timed = async (fn: () => Promise<CallToolResponse>) => {
      const started = performance.now();
      const response = await fn();
      if (response.isError) throw new Error(`bench call failed: ${response.content}`);
      return performance.now() - started;
    };
    const direct = () => stack.call("read", { path: "a.txt" }, { sessionMode: "standard" });
    // Warm up: the container, esbuild's helper process, node's code cache in the container.
    for (let i = 0; i < 3; i++) {
      await timed(() => stack.call("run_code", { code: program }));
      await timed(direct);
    }
    const inner: number[] = [];
    const directs: number[] = [];
    const overhead: number[] = [];
    const empty: number[] = [];
    for (let b = 0; b < BATCHES; b++) {
      const base = await timed(() => stack.call("run_code", { code: "return 1" }));
      const full = await timed(() => stack.call("run_code", { code: program }));
      let directTotal = 0;
      for (let i = 0; i < CALLS_PER_BATCH; i++) directTotal += await timed(direct);
      const perInner = (full - base) / CALLS_PER_BATCH;
      const perDirect = directTotal / CALLS_PER_BATCH;
      empty.push(base);
      inner.push(perInner);
      directs.push(perDirect);
      overhead.push(perInner - perDirect);
    }
    return {
      run_code_inner_call_overhead_ms_p50: percentile(overhead, 50),
      run_code_inner_call_ms_p50: percentile(inner, 50),
      run_code_direct_call_ms_p50: percentile(directs, 50),
      run_code_empty_program_ms_p50: percentile(empty, 50),
      run_code_overhead_definition: `the program in the session's sandbox container (runc) over the bus, as in production; per batch of ${CALLS_PER_BATCH} sequential read calls (each an exec in that container): inner = (program wall time - empty program's) / calls; direct = a tools.call of read over the bus; overhead = inner - direct; p50 over ${BATCHES} batches; empty = tools.call of run_code "return 1"`,
      ...firstRequestTokenKeys(),
    };
  } finally {
    await stack.stop();
  }
}

function firstRequestTokenKeys(): Record<string, unknown> {
  const standardTokens = firstRequestTokens("standard");
  const codeTokens = firstRequestTokens("code");
  return {
    first_request_tokens_standard: standardTokens,
    first_request_tokens_code: codeTokens,
    first_request_tokens_code_over_standard: round(codeTokens / standardTokens, 3),
    first_request_tokens_definition: "system prompt (the mode's, else standard.md) + the mode's tools + a one-line task, DeepSeek V3 tokenizer on the DeepSeek request body",
  };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const result = await benchRunCode();
  process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
  // esbuild's helper process keeps the event loop alive.
  process.exit(0);
}
