import type { CompleteRequest } from "@tack/proto";
import { chatCompletionsBody, chatCompletionsProvider, type ChatCompletionsOptions, type ChatDialect } from "./chat-completions.js";
import type { ProviderEntry } from "./provider.js";

/** Where DeepSeek is reached when neither the options nor DEEPSEEK_BASE_URL say otherwise. */
export const DEEPSEEK_BASE_URL = "https://api.deepseek.com";

// DeepSeek is OpenAI-compatible plus `reasoning_content` and its cache fields, which the
// shared stream reader understands. Model ids are lowercase names such as
// `deepseek-v4-flash`, `deepseek-v4-pro` and the older aliases `deepseek-chat` and
// `deepseek-reasoner`; whether one exists is the API's call.
const DEEPSEEK: ChatDialect = {
  name: "DeepSeek",
  form: "deepseek:MODEL",
  keyed: "deepseek",
  baseUrlVariable: "DEEPSEEK_BASE_URL",
  exampleModel: "deepseek-v4-flash",
  modelName: /^[a-z0-9][a-z0-9._-]*$/,
  echoReasoning: true,
  maxTokensField: "max_tokens",
};

/** The `deepseek:MODEL` provider: DeepSeek's streaming chat completions with reasoning and cache usage. */
export function deepseekProvider(options: ChatCompletionsOptions): ProviderEntry {
  return chatCompletionsProvider(DEEPSEEK, options);
}

/** The exact JSON body the DeepSeek provider sends for `request` (the scripted cache emulation counts its tokens). */
export function deepseekRequestBody(model: string, request: CompleteRequest): Record<string, unknown> {
  return chatCompletionsBody(DEEPSEEK, model, request);
}
