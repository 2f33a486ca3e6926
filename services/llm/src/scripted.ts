import { readFile, stat } from "node:fs/promises";
import { resolve } from "node:path";
import { TackError } from "@tack/bus";
import { CompleteRequest, Delta_Kind, Role, type Delta, type ToolCall } from "@tack/proto";
import { z } from "zod";
import { cancelled, type Completion, type Provider, type ProviderEntry } from "./provider.js";

const ReplySchema = z.strictObject({
  content: z.string().optional(),
  reasoning: z.string().optional(),
  tool_calls: z.array(z.strictObject({ name: z.string().min(1), arguments: z.record(z.string(), z.unknown(), { error: "expected a JSON object" }) })).optional(),
  finish_reason: z.string().optional(),
});
const ScriptSchema = z.strictObject({ replies: z.array(ReplySchema) });

/** A parsed script file: the replies of a scripted model, in order. */
type Script = z.infer<typeof ScriptSchema>;
type Reply = z.infer<typeof ReplySchema>;

/**
 * The `scripted:FILE` provider: replies come from a JSON script, `replies[n]` answering a
 * request that already holds n assistant messages. Choosing by the request alone (not by a
 * counter) keeps it deterministic across restarts and replicas. Relative paths resolve
 * against `cwd`.
 */
export function scriptedProvider(options: { cwd: string }): ProviderEntry {
  // Keyed by path; an entry is reused while the file's mtime is unchanged.
  const cache = new Map<string, { mtimeMs: number; script: Script }>();
  const load = async (file: string): Promise<Script> => {
    let mtimeMs: number;
    try {
      mtimeMs = (await stat(file)).mtimeMs;
    } catch (error) {
      throw unreadable(file, error);
    }
    const cached = cache.get(file);
    if (cached?.mtimeMs === mtimeMs) return cached.script;
    const script = parseScript(file, await readFile(file, "utf8").catch((error: unknown) => {
      throw unreadable(file, error);
    }));
    cache.set(file, { mtimeMs, script });
    return script;
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
        return play(reply, n, request, `scripted:${model}`, onDelta);
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
    `script ${file} is unusable: ${problem}; expected {"replies": [{"content"?, "reasoning"?, "tool_calls"?: [{"name", "arguments": {}}], "finish_reason"?}]}`,
    { details: { file }, cause },
  );
}

/** Emits one scripted reply as a few deltas, the way a streaming model would, then returns it. */
function play(reply: Reply, n: number, request: CompleteRequest, model: string, onDelta: (delta: Delta) => void): Completion {
  const delta = (kind: Delta_Kind, text: string, tool: { index?: number; id?: string; name?: string } = {}): Delta =>
    ({ kind, text, toolIndex: tool.index ?? 0, toolCallId: tool.id ?? "", toolName: tool.name ?? "" });
  const reasoning = reply.reasoning ?? "";
  const content = reply.content ?? "";
  for (const piece of pieces(reasoning)) onDelta(delta(Delta_Kind.KIND_REASONING, piece));
  for (const piece of pieces(content)) onDelta(delta(Delta_Kind.KIND_TEXT, piece));
  const toolCalls: ToolCall[] = (reply.tool_calls ?? []).map((call, index) => {
    const id = `call_${n}_${index}`;
    const args = JSON.stringify(call.arguments);
    const [first = "", ...rest] = pieces(args);
    onDelta(delta(Delta_Kind.KIND_TOOL_CALL, first, { index, id, name: call.name }));
    for (const piece of rest) onDelta(delta(Delta_Kind.KIND_TOOL_CALL, piece, { index }));
    return { id, name: call.name, arguments: args };
  });
  const output = reasoning.length + content.length + toolCalls.reduce((sum, call) => sum + call.name.length + call.arguments.length, 0);
  return {
    content,
    reasoningContent: reasoning,
    toolCalls,
    finishReason: reply.finish_reason ?? (toolCalls.length > 0 ? "tool_calls" : "stop"),
    usage: {
      inputMissTokens: roughTokens(JSON.stringify(CompleteRequest.toJSON(request)).length),
      inputHitTokens: 0,
      outputTokens: roughTokens(output),
      reasoningTokens: roughTokens(reasoning.length),
    },
    model,
  };
}

/** Splits text into at most three pieces on code-point boundaries (no piece for empty text). */
function pieces(text: string): string[] {
  const points = Array.from(text);
  const size = Math.max(1, Math.ceil(points.length / 3));
  const out: string[] = [];
  for (let i = 0; i < points.length; i += size) out.push(points.slice(i, i + size).join(""));
  return out;
}

/** A rough token count (4 characters per token): scripted runs have no tokenizer to ask. */
function roughTokens(chars: number): number {
  return Math.ceil(chars / 4);
}
