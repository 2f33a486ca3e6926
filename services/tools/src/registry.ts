import { trace } from "@opentelemetry/api";
import { inSpan, TackError, type Bus, type RetryPolicy } from "@tack/bus";
import type { CallToolRequest, CallToolResponse, DefinedTools, InnerCall, ToolImage, ToolSpec } from "@tack/proto";
import { z } from "zod";
import { parseSandboxMode } from "./permissions.js";
import { runCodeTool } from "./modes/code.js";
import { compositionTool, definedSpecs, definedTool, defineToolTool, definitionOf, latest } from "./modes/creator.js";
import { editor } from "./modes/editor.js";
import { shell } from "./modes/shell.js";
import { CallSandbox, sandboxRetryPolicy, type SandboxClient } from "./sandbox.js";
import { ToolError, type SpillReader, type Tool, type ToolContext } from "./tool.js";
import { bash } from "./tools/bash.js";
import { edit } from "./tools/edit.js";
import { glob } from "./tools/glob.js";
import { grep } from "./tools/grep.js";
import { job_kill, job_list, job_output } from "./tools/jobs.js";
import { read } from "./tools/read.js";
import { write } from "./tools/write.js";
import { ask_user_question } from "./tools/ask_user_question.js";
import { exit_plan_mode } from "./tools/exit_plan_mode.js";
import { session_search } from "./tools/session_search.js";
import { todo_write } from "./tools/todo_write.js";
import { lsp } from "./lsp/lsp.js";
import { webFetch } from "./web/fetch.js";
import { webSearch } from "./web/search.js";

/**
 * Results longer than this many UTF-8 bytes are cut to their head and tail. It is set by what
 * one bus message carries, not by what the model should see: the loop spills anything over its
 * own, much lower threshold to the object store whole, so it must receive the whole result first.
 */
export const MAX_RESULT_BYTES = 800_000;

/**
 * The tools of each mode, in the order the model sees them. The order is part of the
 * prompt prefix the provider caches, so append rather than reorder.
 */
const MODES: Readonly<Record<string, readonly Tool[]>> = {
  standard: [read, write, edit, glob, grep, bash, job_list, job_output, job_kill, todo_write, ask_user_question, exit_plan_mode, session_search, webFetch, webSearch, lsp],
  // One tool: a program that calls the standard tools (the whole list, appended ones included).
  code: [runCodeTool(() => MODES.standard!)],
  minimal: [shell, editor],
  // Every standard tool (appended ones included), then the ones that inspect and extend the composition.
  get creator() {
    return [...this.standard!, ...CREATOR];
  },
};

const CREATOR: readonly Tool[] = [compositionTool(() => MODES), defineToolTool(() => TOOLS.keys())];

const TOOLS = new Map<string, Tool>(Object.values(MODES).flat().map((tool) => [tool.name, tool]));

/**
 * The tools of `mode` as the model sees them, in creator mode followed by the tools the session
 * defined; throws TackError `tools.unknown_mode` for a mode that does not exist.
 */
export function listTools(mode: string, defined?: DefinedTools): ToolSpec[] {
  const specs = modeTools(mode).map(toolSpec);
  return mode === "creator" ? [...specs, ...definedSpecs(defined)] : specs;
}

function modeTools(mode: string): readonly Tool[] {
  const tools = MODES[mode];
  if (!tools) {
    throw new TackError("tools.unknown_mode", `unknown tools mode ${JSON.stringify(mode)}; known modes: ${Object.keys(MODES).join(", ")}`, {
      details: { mode },
    });
  }
  return tools;
}

/** What `callTool` needs besides the request. */
export interface CallToolContext {
  readonly sandbox: SandboxClient;
  /** Where `read` finds spilled results; each call can only ask for its own session's. */
  readonly spills: SpillReader;
  /** Aborts in-flight sandbox calls (the service is stopping). */
  readonly signal: AbortSignal;
  /** How sandbox requests are retried when no replica answers or one stops answering (default: 60 s window). */
  readonly retry?: RetryPolicy;
  /** The service's bus, for tools that describe the deployment (composition). */
  readonly bus?: Bus;
}

/**
 * Runs one tool call: finds the tool, validates the arguments, makes sure the session's
 * sandbox of the call's mode exists, executes inside span `tool.<name>` and caps the result.
 * Invalid arguments, tool failures, calls asking for a mode they were not given and calls of a
 * tool of another session mode (`session_mode`, empty for standard) are results with `isError`;
 * an unknown tool (`tools.unknown_tool`), an unknown mode (`tools.bad_sandbox_mode`,
 * `tools.unknown_mode`) or a sandbox that cannot be reached is thrown, since the model cannot
 * fix any of them. The tool calls a run_code program makes run through here too, as calls of
 * the standard mode with ids `<call id>.<n>`, and come back in `innerCalls`. In creator mode a
 * call may name a tool the session defined (`request.defined`); a successful define_tool call
 * comes back with its definition in `defined`.
 */
export async function callTool(request: CallToolRequest, context: CallToolContext): Promise<CallToolResponse> {
  const started = performance.now();
  const sessionMode = request.sessionMode || "standard";
  let tool = modeTools(sessionMode).find((t) => t.name === request.name);
  const definition = sessionMode === "creator" && !tool ? latest(request.defined).find((d) => d.name === request.name) : undefined;
  if (definition) {
    try {
      tool = definedTool(definition);
    } catch (error) {
      if (!(error instanceof ToolError)) throw error;
      return { content: error.message, isError: true, durationMs: performance.now() - started, retries: [], replayed: false, innerCalls: [], defined: undefined, images: [] };
    }
  }
  if (!tool && TOOLS.has(request.name)) {
    const content = sessionMode === "code"
      ? `Not run: in code mode ${request.name} is called from a run_code program, e.g. run_code with code: console.log(await tools.${request.name}(${request.arguments || "{}"}))`
      : `Not run: ${request.name} is not a tool of mode ${sessionMode}; its tools are ${modeTools(sessionMode).map((t) => t.name).join(", ")}`;
    return { content, isError: true, durationMs: performance.now() - started, retries: [], replayed: false, innerCalls: [], defined: undefined, images: [] };
  }
  if (!tool) {
    const available = modeTools(sessionMode).map((t) => t.name).join(", ");
    throw new TackError("tools.unknown_tool", `unknown tool ${JSON.stringify(request.name)}; available tools: ${available}`, {
      details: { tool: request.name, available },
    });
  }
  const outer = context;
  const sandbox = new CallSandbox(context.sandbox, {
    callId: request.callId, attempt: request.attempt || 1, firstAttemptAtMs: Number(request.firstAttemptAtMs) || Date.now(),
  }, context.retry ?? sandboxRetryPolicy(), context.signal);
  context = { ...context, sandbox };
  const innerCalls: InnerCall[] = [];
  let innerReplayed = false;
  const callInner = async (name: string, args: string) => {
    // The slot is taken when the call is made, so the calls are listed in the order the program made them.
    const n = innerCalls.push({ name, arguments: args, content: "", isError: true, durationMs: 0 });
    const innerStarted = performance.now();
    let content: string;
    let isError: boolean;
    try {
      // Its own id, so that its execs are keyed apart from every other call's (a retried program replays them).
      const inner = await callTool({ ...request, callId: `${request.callId}.${n}`, name, arguments: args, sessionMode: "standard", defined: undefined }, outer);
      sandbox.retries.push(...inner.retries);
      innerReplayed ||= inner.replayed;
      ({ content, isError } = inner);
    } catch (error) {
      content = `${name} could not run: ${(error as Error).message}`;
      isError = true;
    }
    innerCalls[n - 1] = { name, arguments: args, content, isError, durationMs: performance.now() - innerStarted };
    return { content, isError };
  };
  const attributes = { "tool.name": tool.name, "tool.call_id": request.callId, "session.id": request.sessionId };
  const images: ToolImage[] = [];
  const { content, isError } = await inSpan(`tool.${tool.name}`, attributes, async () => {
    const outcome = await runTool(tool, request, context, callInner, (image) => images.push(image));
    trace.getActiveSpan()?.setAttribute("tool.is_error", outcome.isError);
    return outcome;
  });
  return {
    content: capResult(content), isError, durationMs: performance.now() - started, retries: sandbox.retries,
    replayed: sandbox.replayed || innerReplayed, innerCalls,
    defined: tool.name === "define_tool" && !isError ? definitionOf(request.arguments) : undefined,
    images: isError ? [] : images,
  };
}

async function runTool(
  tool: Tool, request: CallToolRequest, context: CallToolContext, callInner: ToolContext["callInner"], attach: ToolContext["attach"],
): Promise<{ content: string; isError: boolean }> {
  const mode = parseSandboxMode(request.sandboxMode);
  let json: unknown;
  try {
    json = JSON.parse(request.arguments || "{}");
  } catch (error) {
    return { content: `Invalid arguments for ${tool.name}: not valid JSON (${(error as Error).message})`, isError: true };
  }
  const parsed = tool.parameters.safeParse(json);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((issue) => `${issue.path.join(".") || "arguments"}: ${issue.message}`);
    return { content: `Invalid arguments for ${tool.name}: ${problems.join("; ")}`, isError: true };
  }
  // Only the loop grants a wider mode (after approval), by sending it as the call's mode; a call
  // that asks for a mode it was not given never runs, whatever else it is given.
  const requested = (parsed.data as { sandbox_permissions?: string }).sandbox_permissions;
  if (requested !== undefined && requested !== mode) {
    return { content: `Not run: this call asks for sandbox_permissions ${requested} but was given sandbox mode ${mode}; only an approved escalation runs under a wider mode.`, isError: true };
  }
  await context.sandbox.ensure({ sessionId: request.sessionId, tenant: request.tenant, workspace: request.workspace, mode });
  try {
    const address = { tenant: request.tenant, sessionId: request.sessionId };
    const content = await tool.execute(parsed.data, {
      sessionId: request.sessionId, callId: request.callId, signal: context.signal, sandbox: context.sandbox, mode,
      spilled: (callId) => context.spills.get(address, callId), callInner, bus: context.bus, defined: latest(request.defined), attach,
    });
    return { content, isError: false };
  } catch (error) {
    if (error instanceof ToolError) return { content: error.message, isError: true };
    throw error;
  }
}

/** Cuts `text` over MAX_RESULT_BYTES (UTF-8) to its head and tail around a note of how many bytes were left out. */
export function capResult(text: string): string {
  const bytes = Buffer.from(text, "utf8");
  if (bytes.length <= MAX_RESULT_BYTES) return text;
  // The note's length depends on the count it states; a 12-digit bound on the number keeps the total under the cap.
  const budget = MAX_RESULT_BYTES - Buffer.byteLength(noteFor(10 ** 12));
  let headEnd = Math.floor(budget * 0.8);
  let tailStart = bytes.length - (budget - headEnd);
  // Cut on character boundaries: never inside a multi-byte sequence (continuation bytes are 10xxxxxx).
  while (headEnd > 0 && (bytes[headEnd]! & 0xc0) === 0x80) headEnd--;
  while (tailStart < bytes.length && (bytes[tailStart]! & 0xc0) === 0x80) tailStart++;
  return bytes.toString("utf8", 0, headEnd) + noteFor(tailStart - headEnd) + bytes.toString("utf8", tailStart);
}

function noteFor(omitted: number): string {
  return `\n\n... [${omitted} bytes left out] ...\n\n`;
}

/** A tool's wire form: JSON Schema of the arguments the model writes, in a stable serialization. */
function toolSpec(tool: Tool): ToolSpec {
  const schema = z.toJSONSchema(tool.parameters, { io: "input" }) as Record<string, unknown>;
  // `$schema` and zod's safe-integer bounds say nothing to the model and cost tokens on every request.
  delete schema.$schema;
  return {
    name: tool.name, description: tool.description, parametersJson: JSON.stringify(stable(schema)),
    deniable: [...(tool.deniable ?? [])], operationArgument: tool.operation ?? "", handler: tool.handler ?? "", approval: "",
    hookAliases: [...(tool.hookAliases ?? [])], pathIsFile: tool.pathIsFile ?? false, writesPath: tool.writesPath ?? false, sessionOperation: tool.sessionOperation ?? "",
  };
}

/**
 * Sorts object keys so the serialization does not depend on how zod builds the schema, except
 * the keys of `properties`: their order is the order the model tends to write arguments in.
 */
function stable(value: unknown, keepOrder = false): unknown {
  if (Array.isArray(value)) return value.map((item) => stable(item));
  if (value === null || typeof value !== "object") return value;
  const entries = Object.entries(value).filter(([key, item]) => !isSafeIntegerBound(key, item));
  if (!keepOrder) entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return Object.fromEntries(entries.map(([key, item]) => [key, stable(item, key === "properties" && !keepOrder)]));
}

function isSafeIntegerBound(key: string, value: unknown): boolean {
  return (key === "maximum" && value === Number.MAX_SAFE_INTEGER) || (key === "minimum" && value === Number.MIN_SAFE_INTEGER);
}
