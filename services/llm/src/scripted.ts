import { TackError } from "@tack/bus";
import { Role, type ToolCall } from "@tack/proto";
import { z } from "zod";
import { describeJsonError } from "./json-syntax.js";
import { playedUsage, playReply } from "./playback.js";
import { PrefixCache } from "./prefix-cache.js";
import { cancelled, type Provider, type ProviderEntry } from "./provider.js";
import { scriptLoader, type ScriptFileOptions } from "./script-file.js";

const ReplySchema = z.strictObject({
  content: z.string().optional(),
  reasoning: z.string().optional(),
  tool_calls: z.array(z.strictObject({ name: z.string().min(1), arguments: z.record(z.string(), z.unknown(), { error: "expected a JSON object" }) })).optional(),
  finish_reason: z.string().optional(),
});
const ScriptSchema = z.strictObject({
  // Emulate a provider prefix cache storing prefixes in blocks of this many tokens.
  cache: z.strictObject({ block_tokens: z.number().int().positive() }).optional(),
  replies: z.array(ReplySchema),
});

/** A parsed script file: the replies of a scripted model, in order. */
type Script = z.infer<typeof ScriptSchema>;

/**
 * The `scripted:FILE` provider: replies come from a JSON script, `replies[n]` answering a
 * request that already holds n assistant messages. Choosing by the request alone (not by a
 * counter) keeps it deterministic across restarts and replicas. FILE must be inside one of
 * `scriptDirs` (a relative FILE is looked up in each); see `scriptLoader`. Usage is counted
 * with the DeepSeek tokenizer; a script with `cache` also splits the input into cache hit
 * and miss like a provider prefix cache, remembering what this provider instance has seen
 * per script file.
 */
export function scriptedProvider(options: ScriptFileOptions): ProviderEntry {
  const load = scriptLoader(options, { noun: "script", prefix: "scripted:" }, parseScript);
  const caches = new Map<string, PrefixCache>();
  const cacheOf = (file: string, script: Script): PrefixCache | undefined => {
    if (!script.cache) return undefined;
    let cache = caches.get(file);
    if (cache?.blockTokens !== script.cache.block_tokens) caches.set(file, (cache = new PrefixCache(script.cache.block_tokens)));
    return cache;
  };
  return {
    form: "scripted:FILE",
    create: (model) => ({
      complete: async (request, onDelta, signal) => {
        if (signal.aborted) throw cancelled();
        const { file, value: script } = await load(model);
        const n = request.messages.filter((message) => message.role === Role.ROLE_ASSISTANT).length;
        const reply = script.replies[n];
        if (!reply) {
          throw new TackError(
            "llm.script_exhausted",
            `script ${file} has ${script.replies.length} replies but the request already holds ${n} assistant messages; add replies to the script`,
            { details: { file, replies: String(script.replies.length), assistant_messages: String(n) } },
          );
        }
        const toolCalls: ToolCall[] = (reply.tool_calls ?? []).map((call, index) => ({ id: `call_${n}_${index}`, name: call.name, arguments: JSON.stringify(call.arguments) }));
        const played = { content: reply.content ?? "", reasoningContent: reply.reasoning ?? "", toolCalls };
        playReply(played, onDelta);
        return {
          ...played,
          finishReason: reply.finish_reason ?? (toolCalls.length > 0 ? "tool_calls" : "stop"),
          usage: playedUsage(request, played, cacheOf(file, script)),
          model: `scripted:${model}`,
        };
      },
      check: async () => { await load(model); },
    } satisfies Provider),
  };
}

function parseScript(file: string, text: string): Script {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    // Not the SyntaxError: its message (and so its use as a cause) quotes the file's text.
    throw badScript(file, `it is not valid JSON (${describeJsonError(text)})`);
  }
  const parsed = ScriptSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const field = issue.path.map((key) => (typeof key === "number" ? `[${key}]` : `.${String(key)}`)).join("").replace(/^\./, "");
    throw badScript(file, `${field || "the top level"}: ${describeIssue(issue)}`);
  }
  return parsed.data;
}

const EXPECTED: Record<string, string> = {
  object: "a JSON object", record: "a JSON object", array: "an array", string: "a string",
  number: "a number", int: "a whole number", boolean: "true or false",
};

/**
 * What is wrong at a field, from the issue's code and expectation only: zod's own messages
 * can carry input (an unknown key's name), and nothing of the file may be echoed.
 */
function describeIssue(issue: z.core.$ZodIssue): string {
  switch (issue.code) {
    case "invalid_type":
      return `expected ${EXPECTED[issue.expected] ?? issue.expected}`;
    case "unrecognized_keys": {
      const allowed = allowedKeys(ScriptSchema, issue.path);
      return `has ${issue.keys.length === 1 ? "a field" : `${issue.keys.length} fields`} that ${issue.keys.length === 1 ? "is" : "are"} not allowed${allowed ? ` (allowed: ${allowed.join(", ")})` : ""}`;
    }
    case "too_small":
      return issue.origin === "string" ? `must have at least ${String(issue.minimum)} character(s)`
        : `must be ${issue.inclusive ? "at least" : "greater than"} ${String(issue.minimum)}`;
    case "too_big":
      return `must be ${issue.inclusive ? "at most" : "less than"} ${String(issue.maximum)}`;
    default:
      return "has a value of the wrong kind";
  }
}

/** The field names an object schema at `path` accepts (array indices and optionals are stepped through). */
function allowedKeys(schema: z.ZodType, path: readonly PropertyKey[]): string[] | undefined {
  let current: z.ZodType | undefined = schema;
  const step = (s: z.ZodType): z.ZodType => (s instanceof z.ZodOptional ? step(s.unwrap() as z.ZodType) : s);
  for (const key of path) {
    current = current && step(current);
    if (current instanceof z.ZodArray && typeof key === "number") current = current.element as z.ZodType;
    else if (current instanceof z.ZodObject && typeof key === "string") current = current.shape[key] as z.ZodType | undefined;
    else return undefined;
  }
  current = current && step(current);
  return current instanceof z.ZodObject ? Object.keys(current.shape) : undefined;
}

function badScript(file: string, problem: string): TackError {
  return new TackError(
    "llm.bad_script",
    `script ${file} is unusable: ${problem}; expected {"cache"?: {"block_tokens"}, "replies": [{"content"?, "reasoning"?, "tool_calls"?: [{"name", "arguments": {}}], "finish_reason"?}]}`,
    { details: { file, reason: "invalid_script" } },
  );
}
