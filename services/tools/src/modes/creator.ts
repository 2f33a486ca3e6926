import { readFileSync } from "node:fs";
import { discoverMicro, type Bus } from "@tack/bus";
import type { DefinedTool, DefinedTools, ToolSpec } from "@tack/proto";
import { z } from "zod";
import { PatternError, zodOfJsonSchema } from "@tack/linear-regex";
import { defineTool, ToolError, type Tool } from "../tool.js";
import { commandResult } from "../tools/bash.js";
import { exec } from "../tools/exec.js";

/** A defined tool's name: what providers accept as a function name, and short. */
const NAME = /^[a-z][a-z0-9_]{0,47}$/;
const MAX_DESCRIPTION_CHARS = 1000;
const RUN_TIMEOUT_MS = 60_000;
const INTERPRETERS = { bash: "bash", python3: "python3" } as const;

/**
 * composition (creator mode): what runs, as seen from the tools service: the services that answer
 * NATS micro discovery on its bus with their instance counts, and the tools of every mode. No host
 * names, versions, replica ids or runtimes: they tell the model (and whatever steers it) where to
 * aim, not how to work. The model provider is the llm service's business; it is not shown.
 */
export function compositionTool(modes: () => Readonly<Record<string, readonly Tool[]>>) {
  return defineTool({
    name: "composition",
    description: readFileSync(new URL("./composition.txt", import.meta.url), "utf8").trim(),
    parameters: z.strictObject({}),
    async execute(_args, ctx) {
      const lines = ["services (NATS micro discovery, this namespace):"];
      lines.push(...(ctx.bus ? await services(ctx.bus) : ["  (not known: this tools service runs without a bus)"]));
      lines.push("tools by session mode:");
      for (const [mode, tools] of Object.entries(modes())) lines.push(`  ${mode}: ${tools.map((t) => t.name).join(", ")}`);
      const defined = ctx.defined ?? [];
      lines.push(`defined in this session: ${defined.length ? defined.map((d) => `${d.name} (${d.language})`).join(", ") : "none"}`);
      return lines.join("\n");
    },
  });
}

/** One line per service that answered discovery: its name and how many instances; nothing of the hosts. */
async function services(bus: Bus): Promise<string[]> {
  const counts = new Map<string, number>();
  for (const { instance } of await discoverMicro(bus)) counts.set(instance.service, (counts.get(instance.service) ?? 0) + 1);
  if (counts.size === 0) return ["  (none answered)"];
  return [...counts.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([service, count]) => `  ${service}: ${count} instance${count === 1 ? "" : "s"}`);
}

/**
 * define_tool (creator mode): checks a definition and answers with it; `callTool` returns it as
 * `CallToolResponse.defined`, and the loop logs it and sends it back with every later list and
 * call (that is what makes it last: this service keeps nothing). `builtin` names the tools no
 * definition may shadow.
 */
export function defineToolTool(builtin: () => Iterable<string>) {
  return defineTool({
    name: "define_tool",
    description: readFileSync(new URL("./define_tool.txt", import.meta.url), "utf8").trim(),
    parameters: z.strictObject({
      name: z.string().regex(NAME, "must be lowercase letters, digits and _, starting with a letter, at most 48 characters").describe("Tool name, e.g. count_lines"),
      description: z.string().min(1).max(MAX_DESCRIPTION_CHARS).describe("What it does and returns, as the model will read it"),
      parameters: z.record(z.string(), z.unknown()).describe('JSON Schema of the arguments, an object schema, e.g. {"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}'),
      language: z.enum(["bash", "python3"]).describe("Interpreter of code"),
      code: z.string().min(1).describe("The script; reads the arguments as JSON from stdin"),
    }),
    async execute(args) {
      if ([...builtin()].includes(args.name)) throw new ToolError(`${args.name} is a built-in tool; choose another name`);
      schemaOf(args.name, JSON.stringify(args.parameters));
      return `Defined tool ${args.name} (${args.language}); call it from your next step.`;
    },
  });
}

/** The definition a successful define_tool call made, from its arguments. */
export function definitionOf(argumentsJson: string): DefinedTool {
  const args = JSON.parse(argumentsJson) as { name: string; description: string; parameters: unknown; language: string; code: string };
  return { name: args.name, description: args.description, parametersJson: JSON.stringify(args.parameters), language: args.language, code: args.code };
}

/** The wire form of the session's defined tools, listed after the mode's own. */
export function definedSpecs(defined: DefinedTools | undefined): ToolSpec[] {
  return latest(defined).map((d) => ({
    name: d.name, description: d.description, parametersJson: d.parametersJson, deniable: ["writes", "network"], operationArgument: "", handler: "", approval: "",
    hookAliases: [], pathIsFile: false, writesPath: false, sessionOperation: "",
  }));
}

/** The session's definitions, the last one of each name winning, in the order first defined. */
export function latest(defined: DefinedTools | undefined): DefinedTool[] {
  const byName = new Map<string, DefinedTool>();
  for (const d of defined?.tools ?? []) byName.set(d.name, d);
  return [...byName.values()];
}

/** Definition `name` of the session as a tool: its JSON Schema as zod (so callTool validates as for any tool), its script run by exec. */
export function definedTool(definition: DefinedTool): Tool {
  const interpreter = INTERPRETERS[definition.language as keyof typeof INTERPRETERS];
  if (!interpreter) throw new ToolError(`defined tool ${definition.name} has language ${JSON.stringify(definition.language)}; only bash and python3 run`);
  return defineTool({
    name: definition.name,
    description: definition.description,
    parameters: schemaOf(definition.name, definition.parametersJson),
    deniable: ["writes", "network"],
    async execute(args, ctx) {
      const result = await exec(ctx, [interpreter, "-c", definition.code], { stdin: JSON.stringify(args), timeoutMs: RUN_TIMEOUT_MS });
      return commandResult(result, ctx.mode, RUN_TIMEOUT_MS);
    },
  });
}

function schemaOf(name: string, json: string): z.ZodType {
  let schema: unknown;
  try {
    schema = JSON.parse(json);
  } catch (error) {
    throw new ToolError(`parameters of ${name} are not JSON: ${(error as Error).message}`);
  }
  if ((schema as { type?: unknown })?.type !== "object") throw new ToolError(`parameters of ${name} must be an object schema ({"type": "object", "properties": {...}})`);
  try {
    return zodOfJsonSchema(schema);
  } catch (error) {
    if (error instanceof PatternError) throw new ToolError(`parameters of ${name}: pattern ${JSON.stringify(error.pattern)} ${error.message}`);
    throw new ToolError(`parameters of ${name} are not a JSON Schema this service can check: ${(error as Error).message}`);
  }
}
