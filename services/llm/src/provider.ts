import { TackError } from "@tack/bus";
import type { CompleteDone, CompleteRequest, Delta, ToolSpec } from "@tack/proto";
import type { LoadedImages } from "./images.js";

/** What a provider returns: the message that ends a reply stream, before the service prices it. */
export type Completion = Omit<CompleteDone, "costUsd" | "priceWindow">;

/** A model provider bound to one model: turns one request into one streamed reply. */
export interface Provider {
  /**
   * Produces the reply to `request`, passing each fragment to `onDelta` as it arrives and
   * resolving with the whole reply; fails with a TackError, `llm.cancelled` once `signal` aborts.
   * `images` holds the request's images that could be loaded, for a provider that `takesImages`.
   */
  complete(request: CompleteRequest, onDelta: (delta: Delta) => void, signal: AbortSignal, images?: LoadedImages): Promise<Completion>;
  /** True when the model views images: the service then loads the request's images (ImageRef) and passes them to `complete`. */
  readonly takesImages?: boolean;
  /** Fails with a TackError saying how to fix it when the model cannot be used now (missing key, bad script). */
  check(): Promise<void>;
}

/** One provider kind in the registry: the model-reference form it accepts and how to bind a model. */
export interface ProviderEntry {
  /** How a model reference of this provider is written, e.g. `deepseek:MODEL`. */
  readonly form: string;
  /** Binds the part after `<provider>:`; undefined when it cannot name a model of this provider. */
  create(model: string): Provider | undefined;
}

/** A model reference resolved to its provider. */
export interface ResolvedModel {
  readonly providerName: string;
  readonly model: string;
  readonly provider: Provider;
}

/** Resolves model references `<provider>:<model>` to providers. */
export class ProviderRegistry {
  readonly #entries: ReadonlyMap<string, ProviderEntry>;

  constructor(entries: Record<string, ProviderEntry>) {
    this.#entries = new Map(Object.entries(entries));
  }

  /** The accepted model-reference forms, for error messages and help text. */
  forms(): string[] {
    return [...this.#entries.values()].map((entry) => entry.form);
  }

  /** Resolves `reference`; an unknown provider or an empty model is `llm.unknown_model`. */
  resolve(reference: string): ResolvedModel {
    const colon = reference.indexOf(":");
    const providerName = colon < 0 ? "" : reference.slice(0, colon);
    const model = colon < 0 ? "" : reference.slice(colon + 1);
    const provider = model === "" ? undefined : this.#entries.get(providerName)?.create(model);
    if (!provider) {
      throw new TackError("llm.unknown_model", `unknown model ${JSON.stringify(reference)}; use one of: ${this.forms().join(", ")}`, {
        details: { model: reference },
      });
    }
    return { providerName, model, provider };
  }
}

/** The error a provider throws once its abort signal fired. */
export function cancelled(): TackError {
  return new TackError("llm.cancelled", "the completion was cancelled because the llm service is stopping; retry it", { retryable: true });
}

/** A tool's JSON Schema as an object for the wire; `parameters_json` that is not JSON is `llm.invalid_request`. */
export function toolParameters(tool: ToolSpec): unknown {
  if (tool.parametersJson === "") return { type: "object", properties: {} };
  try {
    return JSON.parse(tool.parametersJson);
  } catch (error) {
    throw new TackError("llm.invalid_request", `tool ${tool.name} has parameters_json that is not JSON (${(error as Error).message}); fix its schema export`, {
      details: { tool: tool.name }, cause: error,
    });
  }
}
