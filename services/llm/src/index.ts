// The llm service: model providers behind one interface, served as reply streams on `<ns>.llm.complete`.
export { startLlmService, type LlmService, type LlmServiceOptions } from "./service.js";
export { ProviderRegistry, type Completion, type Provider, type ProviderEntry, type ResolvedModel } from "./provider.js";
export { scriptedProvider } from "./scripted.js";
export { replayProvider } from "./replay.js";
export { DEFAULT_MAX_SCRIPT_BYTES, type ScriptFileOptions } from "./script-file.js";
export { DEEPSEEK_BASE_URL, deepseekProvider, deepseekRequestBody } from "./deepseek.js";
export { OPENAI_BASE_URL, openaiProvider } from "./openai.js";
export { ANTHROPIC_BASE_URL, anthropicProvider, type AnthropicOptions } from "./anthropic.js";
export type { ChatCompletionsOptions } from "./chat-completions.js";
export type { RetryOptions } from "./retry.js";
export { DEFAULT_PRICE_TABLE, loadPriceTable, parsePriceTable, priceFor, type Price, type PriceConfig, type PriceTable } from "./prices.js";
export { countRequestTokens, countTokens } from "./tokens.js";
