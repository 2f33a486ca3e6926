// Model providers' API keys: `<PROVIDER>_API_KEY`, else `~/.tack/credentials.yaml` (read by the llm service and web_search).
export { credentialsPath, KEYED_PROVIDERS, keyVariable, loadCredentials, type ApiKey, type CredentialOptions, type Credentials, type KeyedProvider } from "./credentials.js";
