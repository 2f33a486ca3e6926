// Code mode numbers (issue 9): the size of code mode's first request next to the standard mode's,
// and the overhead of a tool call made from a run_code program over the same call made directly.
// Alone: `npx tsx bench/run-code.ts` prints the JSON; bench/run.ts can call `benchRunCode()`.
// The overhead runs against a sandbox that answers every exec at once, so that what is measured
// is the harness (worker, message port, a second callTool), not the command.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { CallToolRequest, CompleteRequest, ExecResponse, Role, type CallToolResponse } from "@tack/proto";
import { callTool, listTools, type SandboxClient } from "@tack/tools-service";
import { countRequestTokens } from "../services/llm/src/tokens.js";
import { percentile, round } from "./lib.js";

const BATCHES = 30;
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

/** A sandbox that answers every exec at once with a file of one line (what `read` prints for it). */
const instantSandbox: SandboxClient = {
  ensure: async () => undefined,
  exec: async () => ExecResponse.fromPartial({ exitCode: 0, stdout: Buffer.from("     1\thello\n1\n") }),
};

function call(name: string, args: unknown, sessionMode: string, callId: string): Promise<CallToolResponse> {
  return callTool(CallToolRequest.fromPartial({
    sessionId: "bench", tenant: "bench", callId, name, arguments: JSON.stringify(args), workspace: "/tmp",
    sandboxMode: "workspace-write", attempt: 1, firstAttemptAtMs: Date.now(), sessionMode,
  }), { sandbox: instantSandbox, spills: { get: async () => undefined }, signal: new AbortController().signal });
}

/**
 * Per batch: the wall time of a program making CALLS_PER_BATCH sequential `read` calls, less that
 * of an empty program (worker start, compile), per call; and the same number of direct `read`
 * calls, per call. The overhead of a batch is the difference; p50 over BATCHES batches.
 */
export async function benchRunCode(): Promise<Record<string, unknown>> {
  const program = `for (let i = 0; i < ${CALLS_PER_BATCH}; i++) await tools.read({ path: "a.txt" });`;
  const timed = async (fn: () => Promise<CallToolResponse>) => {
    const started = performance.now();
    const response = await fn();
    if (response.isError) throw new Error(`bench call failed: ${response.content}`);
    return performance.now() - started;
  };
  // Warm up: esbuild's helper process, the worker code, the tools' modules.
  for (let i = 0; i < 3; i++) {
    await timed(() => call("run_code", { code: program }, "code", `w${i}`));
    await timed(() => call("read", { path: "a.txt" }, "standard", `w${i}`));
  }
  const inner: number[] = [];
  const direct: number[] = [];
  const overhead: number[] = [];
  const empty: number[] = [];
  for (let b = 0; b < BATCHES; b++) {
    const base = await timed(() => call("run_code", { code: "return 1" }, "code", `e${b}`));
    const full = await timed(() => call("run_code", { code: program }, "code", `p${b}`));
    let directTotal = 0;
    for (let i = 0; i < CALLS_PER_BATCH; i++) directTotal += await timed(() => call("read", { path: "a.txt" }, "standard", `d${b}.${i}`));
    const perInner = (full - base) / CALLS_PER_BATCH;
    const perDirect = directTotal / CALLS_PER_BATCH;
    empty.push(base);
    inner.push(perInner);
    direct.push(perDirect);
    overhead.push(perInner - perDirect);
  }
  const standardTokens = firstRequestTokens("standard");
  const codeTokens = firstRequestTokens("code");
  return {
    run_code_inner_call_overhead_ms_p50: percentile(overhead, 50),
    run_code_inner_call_ms_p50: percentile(inner, 50),
    run_code_direct_call_ms_p50: percentile(direct, 50),
    run_code_empty_program_ms_p50: percentile(empty, 50),
    run_code_overhead_definition: `per batch of ${CALLS_PER_BATCH} sequential read calls against an instant sandbox: (program wall time - empty program's) / calls - direct callTool time / calls; p50 over ${BATCHES} batches`,
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
