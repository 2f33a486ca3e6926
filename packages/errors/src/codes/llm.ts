import { spec } from "../spec.js";

/** Refusals and failures of the llm service (`services/llm`): model references, providers, credentials, prices. */
export const LLM_CODES = {
  "llm.auth": spec(502, "INTERNAL", false, "The model provider rejected the operator's API key; fix the provider's key variable (e.g. DEEPSEEK_API_KEY) or ~/.tack/credentials.yaml and restart the llm service."),
  "llm.bad_credentials": spec(502, "FAILED_PRECONDITION", false, "The credentials file cannot be read or parsed (the message names the line); fix ~/.tack/credentials.yaml, mode 600."),
  "llm.bad_options": spec(500, "FAILED_PRECONDITION", false, "The llm service's options are invalid (retry settings, script directories); fix the setting the message names and restart it."),
  "llm.bad_prices": spec(500, "FAILED_PRECONDITION", false, "The price table (TACK_PRICES) cannot be read or has the wrong shape; fix it, or unset TACK_PRICES to use the built-in table."),
  "llm.bad_request": spec(502, "INTERNAL", false, "The model provider refused the request (or has no endpoint at the base URL); the message quotes the provider, fix what it names (often the base URL setting)."),
  "llm.bad_script": spec(400, "INVALID_ARGUMENT", false, "A scripted: or replay: model file is missing, outside models.script_dirs, too large or malformed; fix the file or the reference."),
  "llm.cancelled": spec(503, "UNAVAILABLE", true, "The llm service is stopping and cancelled the completion; retry, another replica takes it."),
  "llm.empty_reply": spec(502, "INTERNAL", false, "The model returned no text and no tool calls; raise max_tokens when it stopped for length, otherwise retry."),
  "llm.insecure_credentials": spec(502, "FAILED_PRECONDITION", false, "The credentials file is readable by other users; restrict it with `chmod 600`."),
  "llm.invalid_request": spec(502, "INTERNAL", false, "The completion request cannot be sent to the provider (a tool schema that is not JSON, a message role it has no place for); this is a bug in the sender."),
  "llm.malformed_chunk": spec(502, "UNAVAILABLE", true, "The provider sent a stream chunk that is not what its API promises; retry, and check the base URL points at the provider's API."),
  "llm.missing_key": spec(400, "FAILED_PRECONDITION", false, "The model's provider has no API key configured; use another model, or set the provider's key variable or ~/.tack/credentials.yaml and restart the llm service."),
  "llm.rate_limited": spec(502, "UNAVAILABLE", true, "The provider is rate limiting the operator's key; the call is retried after the delay it asks for."),
  "llm.script_exhausted": spec(400, "FAILED_PRECONDITION", false, "A scripted or replayed model has no reply left for this request (the session went further than the script); add replies to the script."),
  "llm.server_error": spec(502, "UNAVAILABLE", true, "The provider failed (5xx, overloaded) before or while streaming; retry later."),
  "llm.stream_cut": spec(502, "UNAVAILABLE", true, "The provider's stream ended before the reply was complete; retry."),
  "llm.timeout": spec(504, "DEADLINE_EXCEEDED", true, "The provider sent nothing for the idle timeout; retry."),
  "llm.unknown_model": spec(400, "INVALID_ARGUMENT", false, "The model reference names no known provider or model; use a form the message lists, e.g. deepseek:deepseek-chat."),
  "llm.unreachable": spec(502, "UNAVAILABLE", true, "The provider's API cannot be reached from the llm service; check the network or the provider's base URL setting."),
} as const;
