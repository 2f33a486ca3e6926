import { Delta_Kind, type CompleteRequest, type Delta, type ToolCall, type Usage } from "@tack/proto";
import type { PrefixCache } from "./prefix-cache.js";
import { countTokens, requestTokenSegments } from "./tokens.js";

/** A whole reply that a scripted or replayed model plays back. */
export interface PlayedReply {
  readonly content: string;
  readonly reasoningContent: string;
  readonly toolCalls: readonly ToolCall[];
}

/** Emits `reply` as a few deltas per part, in the order a streaming model sends them: reasoning, text, each tool call. */
export function playReply(reply: PlayedReply, onDelta: (delta: Delta) => void): void {
  const delta = (kind: Delta_Kind, text: string, tool: { index?: number; id?: string; name?: string } = {}): Delta =>
    ({ kind, text, toolIndex: tool.index ?? 0, toolCallId: tool.id ?? "", toolName: tool.name ?? "" });
  for (const piece of pieces(reply.reasoningContent)) onDelta(delta(Delta_Kind.KIND_REASONING, piece));
  for (const piece of pieces(reply.content)) onDelta(delta(Delta_Kind.KIND_TEXT, piece));
  reply.toolCalls.forEach((call, index) => {
    const [first = "", ...rest] = pieces(call.arguments);
    onDelta(delta(Delta_Kind.KIND_TOOL_CALL, first, { index, id: call.id, name: call.name }));
    for (const piece of rest) onDelta(delta(Delta_Kind.KIND_TOOL_CALL, piece, { index }));
  });
}

/**
 * Usage of a played-back reply counted with the DeepSeek tokenizer: the input is the body
 * the DeepSeek provider would send, split into cache hit and miss by `cache` when given
 * (all miss otherwise); the output is the reasoning, the text and each call's name and arguments.
 */
export function playedUsage(request: CompleteRequest, reply: PlayedReply, cache?: PrefixCache): Usage {
  const segments = requestTokenSegments(request);
  const input = segments.reduce((sum, segment) => sum + segment.length, 0);
  const hit = cache?.lookup(segments) ?? 0;
  const reasoning = countTokens(reply.reasoningContent);
  const output = reasoning + countTokens(reply.content) + reply.toolCalls.reduce((sum, call) => sum + countTokens(call.name) + countTokens(call.arguments), 0);
  return { inputMissTokens: input - hit, inputHitTokens: hit, outputTokens: output, reasoningTokens: reasoning };
}

/** Splits text into at most three pieces on code-point boundaries (no piece for empty text). */
function pieces(text: string): string[] {
  const points = Array.from(text);
  const size = Math.max(1, Math.ceil(points.length / 3));
  const out: string[] = [];
  for (let i = 0; i < points.length; i += size) out.push(points.slice(i, i + size).join(""));
  return out;
}
