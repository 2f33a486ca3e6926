import { chatCompletionsProvider, type ChatCompletionsOptions } from "./chat-completions.js";
import type { ProviderEntry } from "./provider.js";

/** Where the `openai:` provider goes when neither the options nor OPENAI_BASE_URL say otherwise. */
export const OPENAI_BASE_URL = "https://api.openai.com/v1";

/**
 * The `openai:MODEL` provider: any OpenAI-compatible streaming chat-completions endpoint
 * (OpenAI, vLLM, llama.cpp, Ollama, LiteLLM…). Model names are whatever the endpoint
 * serves, so any name without whitespace is bound. Which of them view images is
 * `options.imageModels` (TACK_IMAGE_MODELS).
 */
export function openaiProvider(options: ChatCompletionsOptions): ProviderEntry {
  return chatCompletionsProvider({
    name: "OpenAI",
    form: "openai:MODEL",
    keyed: "openai",
    baseUrlVariable: "OPENAI_BASE_URL",
    exampleModel: "gpt-4.1-mini",
    modelName: /^\S+$/,
    echoReasoning: false,
    maxTokensField: "max_completion_tokens",
  }, options);
}
