import { resolve } from "node:path";
import { TackError } from "@tack/bus";
import { Role, type ToolCall } from "@tack/proto";
import { z } from "zod";
import { fileLoader, playedUsage, playReply } from "./playback.js";
import { PrefixCache } from "./prefix-cache.js";
import { cancelled, type Provider, type ProviderEntry } from "./provider.js";

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
 * counter) keeps it deterministic across restarts and replicas. Relative paths resolve
 * against `cwd`. Usage is counted with the DeepSeek tokenizer; a script with `cache` also
 * splits the input into cache hit and miss like a provider prefix cache, remembering what
 * this provider instance has seen per script path.
 */
export function scriptedProvider(options: { cwd: string }): ProviderEntry {
  const load = fileLoader(parseScript, unreadable);
  const caches = new Map<string, PrefixCache>();
  const cacheOf = (file: string, script: Script): PrefixCache | undefined => {
    if (!script.cache) return undefined;
    let cache = caches.get(file);
    if (cache?.blockTokens !== script.cache.block_tokens) caches.set(file, (cache = new PrefixCache(script.cache.block_tokens)));
    return cache;
  };
  return {
    form: "scripted:FILE",
    create: (model) => {
      const file = resolve(options.cwd, model);
      return { complete: async (request, onDelta, signal) => {
        if (signal.aborted) throw cancelled();
        const script = await load(file);
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
      }, check: async () => { await load(file); } } satisfies Provider;
    },
  };
}

function parseScript(file: string, text: string): Script {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw badScript(file, `it is not valid JSON (${(error as Error).message})`, error);
  }
  const parsed = ScriptSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const field = issue.path.map((key) => (typeof key === "number" ? `[${key}]` : `.${String(key)}`)).join("").replace(/^\./, "");
    throw badScript(file, `${field || "the top level"}: ${issue.message}`);
  }
  return parsed.data;
}

function unreadable(file: string, error: unknown): TackError {
  const reason = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
  return new TackError("llm.bad_script", `cannot read script ${file} (${reason}); check the path after \`scripted:\``, { details: { file }, cause: error });
}

function badScript(file: string, problem: string, cause?: unknown): TackError {
  return new TackError(
    "llm.bad_script",
    `script ${file} is unusable: ${problem}; expected {"cache"?: {"block_tokens"}, "replies": [{"content"?, "reasoning"?, "tool_calls"?: [{"name", "arguments": {}}], "finish_reason"?}]}`,
    { details: { file }, cause },
  );
}
