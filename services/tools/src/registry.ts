import { trace } from "@opentelemetry/api";
import { inSpan, TackError } from "@tack/bus";
import type { CallToolRequest, CallToolResponse, ToolSpec } from "@tack/proto";
import { z } from "zod";
import type { SandboxClient } from "./sandbox.js";
import { ToolError, type Tool } from "./tool.js";
import { bash } from "./tools/bash.js";
import { edit } from "./tools/edit.js";
import { glob } from "./tools/glob.js";
import { grep } from "./tools/grep.js";
import { read } from "./tools/read.js";
import { write } from "./tools/write.js";

/** Results longer than this many characters are cut to their head and tail. */
export const MAX_RESULT_CHARS = 50_000;

/**
 * The tools of each mode, in the order the model sees them. The order is part of the
 * prompt prefix the provider caches, so append rather than reorder.
 */
const MODES: Readonly<Record<string, readonly Tool[]>> = {
  standard: [read, write, edit, glob, grep, bash],
};

const TOOLS = new Map<string, Tool>(Object.values(MODES).flat().map((tool) => [tool.name, tool]));

/** The tools of `mode` as the model sees them; throws TackError `tools.unknown_mode` for a mode that does not exist. */
export function listTools(mode: string): ToolSpec[] {
  const tools = MODES[mode];
  if (!tools) {
    throw new TackError("tools.unknown_mode", `unknown tools mode ${JSON.stringify(mode)}; known modes: ${Object.keys(MODES).join(", ")}`, {
      details: { mode },
    });
  }
  return tools.map(toolSpec);
}

/** What `callTool` needs besides the request. */
export interface CallToolContext {
  readonly sandbox: SandboxClient;
  /** Aborts in-flight sandbox calls (the service is stopping). */
  readonly signal: AbortSignal;
}

/**
 * Runs one tool call: finds the tool, validates the arguments, makes sure the session's
 * sandbox exists, executes inside span `tool.<name>` and caps the result. Invalid arguments
 * and tool failures are results with `isError`; an unknown tool (`tools.unknown_tool`) or a
 * sandbox that cannot be reached is thrown, since the model cannot fix either.
 */
export async function callTool(request: CallToolRequest, context: CallToolContext): Promise<CallToolResponse> {
  const started = performance.now();
  const tool = TOOLS.get(request.name);
  if (!tool) {
    const available = [...TOOLS.keys()].join(", ");
    throw new TackError("tools.unknown_tool", `unknown tool ${JSON.stringify(request.name)}; available tools: ${available}`, {
      details: { tool: request.name, available },
    });
  }
  const attributes = { "tool.name": tool.name, "tool.call_id": request.callId, "session.id": request.sessionId };
  const { content, isError } = await inSpan(`tool.${tool.name}`, attributes, async () => {
    const outcome = await runTool(tool, request, context);
    trace.getActiveSpan()?.setAttribute("tool.is_error", outcome.isError);
    return outcome;
  });
  return { content: capResult(content), isError, durationMs: performance.now() - started };
}

async function runTool(tool: Tool, request: CallToolRequest, context: CallToolContext): Promise<{ content: string; isError: boolean }> {
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
  await context.sandbox.ensure({
    sessionId: request.sessionId,
    tenant: request.tenant,
    workspace: request.workspace,
    mode: request.sandboxMode,
  });
  try {
    const content = await tool.execute(parsed.data, { sessionId: request.sessionId, callId: request.callId, signal: context.signal, sandbox: context.sandbox });
    return { content, isError: false };
  } catch (error) {
    if (error instanceof ToolError) return { content: error.message, isError: true };
    throw error;
  }
}

/** Cuts `text` over MAX_RESULT_CHARS to its head and tail around a note of how much was left out. */
export function capResult(text: string): string {
  if (text.length <= MAX_RESULT_CHARS) return text;
  // The note's length depends on the count it states; a 12-character bound on the number keeps the total under the cap.
  const budget = MAX_RESULT_CHARS - noteFor(10 ** 12).length;
  const head = Math.floor(budget * 0.8);
  const tail = budget - head;
  return text.slice(0, head) + noteFor(text.length - head - tail) + text.slice(text.length - tail);
}

function noteFor(omitted: number): string {
  return `\n\n... [${omitted} characters left out] ...\n\n`;
}

/** A tool's wire form: JSON Schema of the arguments the model writes, in a stable serialization. */
function toolSpec(tool: Tool): ToolSpec {
  const schema = z.toJSONSchema(tool.parameters, { io: "input" }) as Record<string, unknown>;
  // `$schema` and zod's safe-integer bounds say nothing to the model and cost tokens on every request.
  delete schema.$schema;
  return { name: tool.name, description: tool.description, parametersJson: JSON.stringify(stable(schema)) };
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
