// The llm service: model providers behind one interface, served as reply streams on `<ns>.llm.complete`.
export { startLlmService, type LlmService, type LlmServiceOptions } from "./service.js";
export { ProviderRegistry, type Completion, type Provider, type ProviderEntry, type ResolvedModel } from "./provider.js";
export { scriptedProvider } from "./scripted.js";
export { DEEPSEEK_BASE_URL, deepseekProvider, type DeepSeekOptions } from "./deepseek.js";
export { credentialsPath, loadCredentials, type CredentialOptions, type Credentials } from "./credentials.js";
