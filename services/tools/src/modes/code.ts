import { readFileSync } from "node:fs";
import { WORKSPACE } from "@tack/config";
import { z } from "zod";
import { escalationParameters } from "../permissions.js";
import { defineTool, ToolError, type Tool } from "../tool.js";
import { codeLimitsFromEnv, compileProgram, runProgram, type CodeLimits } from "./program.js";

const TEMPLATE = readFileSync(new URL("./code.txt", import.meta.url), "utf8").trim();

/** Arguments of the callable tools that only the loop acts on (approvals); a program never needs them. */
const HIDDEN = new Set(Object.keys(escalationParameters));

/**
 * run_code, code mode's only tool: a TypeScript program, run by node in the session's sandbox
 * container under the call's mode (decision 0020), that calls the tools of `standard()` as
 * `tools.<name>(args)`; each call comes back over the sandbox stream and is made through
 * `ctx.callInner`, i.e. the normal `callTool` path (validation, sandbox, span). Tools the loop carries out (`handler: "session"`) are left out: a
 * call from a program never reaches the loop. Its description ends with TypeScript declarations
 * of the callable tools, generated from their schemas when first listed.
 */
export function runCodeTool(standard: () => readonly Tool[], limits: CodeLimits = codeLimitsFromEnv()) {
  const callable = () => standard().filter((t) => t.handler !== "session");
  let description: string | undefined;
  const tool = defineTool({
    name: "run_code",
    // What its calls can be denied; an approved wider mode is what every call of the program runs under.
    deniable: ["writes", "network"],
    operation: "code",
    get description() {
      description ??= `${TEMPLATE.replace("{limits}", describeLimits(limits))}\n\n${declarations(callable())}`;
      return description;
    },
    parameters: z.strictObject({
      code: z.string().min(1).describe("TypeScript script body"),
      timeout_ms: z.number().int().min(1).max(limits.wallMs).default(limits.wallMs).describe("Stop the program after this many milliseconds"),
      ...escalationParameters,
    }),
    async execute({ code, timeout_ms }, ctx) {
      if (!ctx.callInner) throw new Error("run_code needs ctx.callInner; it runs only through callTool");
      const js = await compileProgram(code);
      const outcome = await runProgram(js, {
        tools: callable().map((t) => t.name), limits: { ...limits, wallMs: timeout_ms }, callInner: ctx.callInner, signal: ctx.signal,
        spawn: (argv, onOutput) => ctx.sandbox.spawn({ sessionId: ctx.sessionId, mode: ctx.mode, argv, cwd: WORKSPACE }, onOutput),
      });
      const parts: string[] = [];
      if (outcome.output) parts.push(outcome.output.replace(/\n$/, ""));
      if (outcome.dropped > 0) parts.push(`(${outcome.dropped} more characters of output left out: the limit is ${limits.outputChars}; print less)`);
      const end = outcome.end;
      if (end.kind === "returned") {
        if (end.value) parts.push(`returned: ${end.value}`);
        return parts.join("\n") || "(no output)";
      }
      if (end.kind === "cancelled") throw new Error(`run_code cancelled: ${end.error}`);
      parts.push(end.kind === "threw" ? `uncaught ${end.error}` : `stopped: ${end.error}`);
      throw new ToolError(parts.join("\n"));
    },
  });
  return tool;
}

function describeLimits(limits: CodeLimits): string {
  return `${limits.wallMs / 1000} s, ${limits.heapMb} MB heap, ${limits.outputChars} characters of output, ${limits.calls} tool calls`;
}

/**
 * `declare const tools: {...}` for `tools`: each tool's description as a comment, then its
 * signature, each argument with its description (and default) as a trailing comment. Generated
 * from the JSON Schema the model would see, so it cannot drift from what calls are checked against.
 */
export function declarations(tools: readonly Tool[]): string {
  const lines = ["declare const tools: {"];
  for (const tool of tools) {
    const schema = z.toJSONSchema(tool.parameters, { io: "input" }) as JsonSchema;
    const required = new Set(schema.required ?? []);
    lines.push(`  // ${tool.description.replace(/\s*\n\s*/g, " ")}`);
    const fields = Object.entries(schema.properties ?? {}).filter(([name]) => !HIDDEN.has(name));
    if (fields.length === 0) {
      lines.push(`  ${tool.name}(args?: {}): Promise<string>;`);
      continue;
    }
    lines.push(`  ${tool.name}(args: {`);
    for (const [name, field] of fields) {
      const optional = !required.has(name) || field.default !== undefined;
      const notes = [field.description, field.default !== undefined ? `default ${JSON.stringify(field.default)}` : undefined].filter(Boolean);
      lines.push(`    ${name}${optional ? "?" : ""}: ${tsType(field)};${notes.length ? ` // ${notes.join("; ")}` : ""}`);
    }
    lines.push("  }): Promise<string>;");
  }
  lines.push("};");
  return lines.join("\n");
}

interface JsonSchema {
  type?: string | string[];
  enum?: unknown[];
  const?: unknown;
  items?: JsonSchema;
  anyOf?: JsonSchema[];
  properties?: Record<string, JsonSchema>;
  required?: string[];
  description?: string;
  default?: unknown;
}

function tsType(schema: JsonSchema): string {
  if (schema.enum) return schema.enum.map((v) => JSON.stringify(v)).join(" | ");
  if (schema.const !== undefined) return JSON.stringify(schema.const);
  if (schema.anyOf) return schema.anyOf.map(tsType).join(" | ");
  const types = Array.isArray(schema.type) ? schema.type : [schema.type];
  return types.map((type) => {
    switch (type) {
      case "string": return "string";
      case "integer": case "number": return "number";
      case "boolean": return "boolean";
      case "null": return "null";
      case "array": return `${schema.items ? wrap(tsType(schema.items)) : "unknown"}[]`;
      case "object": {
        const required = new Set(schema.required ?? []);
        const fields = Object.entries(schema.properties ?? {}).map(([k, v]) => `${k}${required.has(k) ? "" : "?"}: ${tsType(v)}`);
        return fields.length ? `{ ${fields.join("; ")} }` : "Record<string, unknown>";
      }
      default: return "unknown";
    }
  }).join(" | ");
}

function wrap(type: string): string {
  return type.includes(" ") ? `(${type})` : type;
}
