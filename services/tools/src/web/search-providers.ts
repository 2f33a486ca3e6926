import { loadCredentials } from "@tack/credentials";

// web_search's backends. Each one is a plain HTTPS API reached from the tools service itself
// (not the sandbox, not through web_fetch's guard: their URLs are the operator's, never the
// model's). A key only ever goes into a request header; every text that leaves this module
// (results, errors, health details) passes `redact` first.

/** An API key and where it was found (`env:BRAVE_API_KEY`, a file path); the source may be shown, the key never. */
export interface SearchKey {
  readonly key: string;
  readonly source: string;
}

/** One search as the tool asks for it. */
export interface SearchRequest {
  readonly query: string;
  readonly maxResults: number;
  /** Only results from these domains (and their subdomains). */
  readonly allowedDomains: readonly string[];
  readonly blockedDomains: readonly string[];
}

/** One result, in the provider's order. */
export interface SearchResult {
  readonly title: string;
  readonly url: string;
  readonly snippet: string;
  /** How old the page is, as the provider says it ("3 days ago", "2024-05-01"); empty when unknown. */
  readonly age: string;
}

export interface SearchAnswer {
  readonly results: readonly SearchResult[];
  /** A provider that answers with prose (DeepSeek's search model) puts it here; it is as untrusted as the results. */
  readonly summary?: string;
}

/** A search backend. */
export interface SearchProvider {
  /** Stable id, the value of TACK_WEB_SEARCH_PROVIDER. */
  readonly id: string;
  readonly name: string;
  /** How an operator gives it a key, e.g. "set BRAVE_API_KEY". */
  readonly setup: string;
  /** Its key, or undefined when none is configured; throws when the key store itself is broken. */
  key(): Promise<SearchKey | undefined>;
  search(request: SearchRequest, key: SearchKey, signal: AbortSignal): Promise<SearchAnswer>;
  /** The cheapest request that proves the key and the endpoint work; returns what it saw. */
  probe(key: SearchKey, signal: AbortSignal): Promise<string>;
}

/** Why a provider failed; `health` says whether it makes the provider unhealthy (a refused query does not). */
export class SearchProviderError extends Error {
  constructor(
    readonly provider: string,
    message: string,
    readonly health: boolean,
    readonly status?: number,
  ) {
    super(message);
    this.name = "SearchProviderError";
  }
}

/** Why no provider can serve a call: none configured, several and none chosen, or the chosen one unusable. */
export class SearchSelectionError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SearchSelectionError";
  }
}

/** One provider's state, as GET /v1/web/search/health shows it. */
export interface ProviderHealth {
  readonly id: string;
  readonly name: string;
  /** It has a key. */
  readonly configured: boolean;
  /** Calls go to it. */
  readonly selected: boolean;
  /** Its last call or probe worked; false when never checked or unconfigured. */
  readonly healthy: boolean;
  readonly detail: string;
  /** When `healthy` and `detail` were established (ms since the epoch). */
  readonly checkedAtMs: number;
}

export interface SearchHealth {
  readonly providers: readonly ProviderHealth[];
  /** Id calls go to; empty when there is none (then `selectionError` says why). */
  readonly selected: string;
  readonly selectionError: string;
}

export interface RegistryOptions {
  readonly providers: readonly SearchProvider[];
  /** Provider id that wins over everything else (TACK_WEB_SEARCH_PROVIDER or the operator's choice). */
  readonly selected?: string;
  /** How long a health state stands before `health()` probes again; default 5 min. */
  readonly healthTtlMs?: number;
  /** A probe's time limit; default 15 s. */
  readonly probeTimeoutMs?: number;
  readonly now?: () => number;
}

type KeyState = { key: SearchKey } | { error?: string };

interface Known { readonly healthy: boolean; readonly detail: string; readonly checkedAtMs: number }

/**
 * The providers web_search may use and which one it does: the configured id wins; else the
 * only one with a key; else an error naming the candidates (or saying how to configure one).
 * Every call's outcome is remembered as that provider's health.
 */
export class SearchRegistry {
  readonly #providers: readonly SearchProvider[];
  readonly #selected: string | undefined;
  readonly #ttl: number;
  readonly #probeTimeout: number;
  readonly #now: () => number;
  readonly #known = new Map<string, Known>();

  constructor(options: RegistryOptions) {
    this.#providers = options.providers;
    this.#selected = options.selected?.trim() || undefined;
    this.#ttl = options.healthTtlMs ?? 5 * 60_000;
    this.#probeTimeout = options.probeTimeoutMs ?? 15_000;
    this.#now = options.now ?? Date.now;
  }

  get providers(): readonly SearchProvider[] {
    return this.#providers;
  }

  /** The provider calls go to and its key; throws SearchSelectionError saying what to configure. */
  async select(): Promise<{ provider: SearchProvider; key: SearchKey }> {
    const keys = await this.#keys();
    return pick(this.#providers, keys, this.#selected);
  }

  /** Runs a search on the selected provider and records the outcome as its health. */
  async search(request: SearchRequest, signal: AbortSignal): Promise<{ provider: SearchProvider; answer: SearchAnswer }> {
    const { provider, key } = await this.select();
    try {
      const answer = await provider.search(request, key, signal);
      this.#record(provider.id, true, `last search answered (${answer.results.length} results)`);
      return { provider, answer };
    } catch (error) {
      // A call cancelled by its caller says nothing about the provider.
      if (signal.aborted) throw error;
      const failure = asProviderError(provider, key, error);
      if (failure.health) this.#record(provider.id, false, failure.message);
      throw failure;
    }
  }

  /** Each provider's state; a configured one whose state is unknown or older than the TTL (or all, with `refresh`) is probed now. */
  async health(options: { refresh?: boolean } = {}): Promise<SearchHealth> {
    const keys = await this.#keys();
    let selected = "";
    let selectionError = "";
    try {
      selected = pick(this.#providers, keys, this.#selected).provider.id;
    } catch (error) {
      selectionError = (error as Error).message;
    }
    const providers = await Promise.all(this.#providers.map(async (provider): Promise<ProviderHealth> => {
      const found = keys.get(provider.id)!;
      const base = { id: provider.id, name: provider.name, selected: provider.id === selected };
      if (!("key" in found)) {
        const detail = found.error ? `${found.error}; ${provider.setup}` : `no key: ${provider.setup}`;
        return { ...base, configured: false, healthy: false, detail, checkedAtMs: this.#now() };
      }
      let known = this.#known.get(provider.id);
      if (options.refresh || !known || this.#now() - known.checkedAtMs > this.#ttl) known = await this.#probe(provider, found.key);
      return { ...base, configured: true, ...known };
    }));
    return { providers, selected, selectionError };
  }

  async #probe(provider: SearchProvider, key: SearchKey): Promise<Known> {
    try {
      const seen = await provider.probe(key, AbortSignal.timeout(this.#probeTimeout));
      return this.#record(provider.id, true, `probe: ${seen}`);
    } catch (error) {
      return this.#record(provider.id, false, `probe: ${asProviderError(provider, key, error).message}`);
    }
  }

  #record(id: string, healthy: boolean, detail: string): Known {
    const known = { healthy, detail, checkedAtMs: this.#now() };
    this.#known.set(id, known);
    return known;
  }

  // Keys are read at each use, so a rotated key or a newly set one needs no restart.
  async #keys(): Promise<Map<string, KeyState>> {
    const entries = await Promise.all(this.#providers.map(async (provider): Promise<[string, KeyState]> => {
      try {
        const key = await provider.key();
        return [provider.id, key ? { key } : {}];
      } catch (error) {
        return [provider.id, { error: `its key cannot be read (${(error as Error).message})` }];
      }
    }));
    return new Map(entries);
  }
}

function pick(
  providers: readonly SearchProvider[],
  keys: Map<string, KeyState>,
  wanted: string | undefined,
): { provider: SearchProvider; key: SearchKey } {
  const ids = providers.map((p) => p.id).join(", ");
  if (wanted) {
    const provider = providers.find((p) => p.id === wanted);
    if (!provider) throw new SearchSelectionError(`web_search provider "${wanted}" (TACK_WEB_SEARCH_PROVIDER) is not one of ${ids}; set it to one of those`);
    const found = keys.get(provider.id)!;
    if (!("key" in found)) throw new SearchSelectionError(`web_search is set to use ${provider.name} (${provider.id}) but ${found.error ?? "it has no key"}; ${provider.setup}`);
    return { provider, key: found.key };
  }
  const ready = providers.filter((p) => "key" in keys.get(p.id)!);
  if (ready.length === 1) return { provider: ready[0]!, key: (keys.get(ready[0]!.id) as { key: SearchKey }).key };
  if (ready.length > 1) {
    throw new SearchSelectionError(
      `web_search has keys for several providers (${ready.map((p) => p.id).join(", ")}) and none is chosen; set TACK_WEB_SEARCH_PROVIDER to one of them`,
    );
  }
  const how = providers.map((p) => `${p.name}: ${p.setup}`).join("; ");
  throw new SearchSelectionError(`web_search has no provider configured. An operator must configure one (${how}); keys are read at each call, so no restart is needed`);
}

function asProviderError(provider: SearchProvider, key: SearchKey, error: unknown): SearchProviderError {
  if (error instanceof SearchProviderError) return new SearchProviderError(error.provider, redact(error.message, key), error.health, error.status);
  const e = error as NodeJS.ErrnoException & { cause?: NodeJS.ErrnoException };
  if (e.name === "TimeoutError") return new SearchProviderError(provider.id, `${provider.name} did not answer in time; try again later`, true);
  const code = e.cause?.code ?? e.code;
  const what = redact(e.cause?.message ?? e.message, key);
  return new SearchProviderError(provider.id, `${provider.name} could not be reached (${what}${code && !what.includes(code) ? `, ${code}` : ""}); check its URL and the network, or choose another provider with TACK_WEB_SEARCH_PROVIDER`, true);
}

/** Removes a key from text a provider sent back (some echo it in their error messages). */
export function redact(text: string, key: SearchKey): string {
  return key.key.length >= 4 ? text.split(key.key).join("[redacted key]") : text;
}

// ---- HTTP ----

/** Bodies above this are refused: a search answer is a few KB, never megabytes. */
const MAX_BODY_BYTES = 4 * 1024 * 1024;

interface HttpAnswer { status: number; headers: Headers; text: string }

async function send(provider: SearchProvider, url: string, init: RequestInit, signal: AbortSignal): Promise<HttpAnswer> {
  const response = await fetch(url, { ...init, signal, redirect: "error" });
  const reader = response.body?.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const next = await reader?.read();
    if (!next || next.done) break;
    size += next.value.byteLength;
    if (size > MAX_BODY_BYTES) {
      await reader!.cancel();
      throw new SearchProviderError(provider.id, `${provider.name} answered with more than ${MAX_BODY_BYTES} bytes; check its URL`, true, response.status);
    }
    chunks.push(next.value);
  }
  return { status: response.status, headers: response.headers, text: Buffer.concat(chunks).toString("utf8") };
}

/** Turns a non-2xx answer into an error that says what happened and what to do. */
function httpFailure(provider: SearchProvider, key: SearchKey, answer: HttpAnswer, message: string): SearchProviderError {
  const said = message ? `: ${redact(message, key).slice(0, 300)}` : "";
  const status = answer.status;
  const prefix = `${provider.name} answered HTTP ${status}${said}`;
  if (status === 401 || status === 403) {
    return new SearchProviderError(provider.id, `${prefix}. The key from ${key.source} was refused; an operator must ${provider.setup.replace(/^set/, "set a valid")}`, true, status);
  }
  if (status === 429) {
    const after = answer.headers.get("retry-after");
    return new SearchProviderError(provider.id, `${prefix}. Rate limit or quota reached; retry${after ? ` after ${after} s` : " later"}, or ask an operator to raise the plan's limit`, true, status);
  }
  if (status >= 500) {
    return new SearchProviderError(provider.id, `${prefix}. The provider is failing; try again later, or an operator can choose another provider with TACK_WEB_SEARCH_PROVIDER`, true, status);
  }
  return new SearchProviderError(provider.id, `${prefix}. The search was refused; change the query or its domain filters`, false, status);
}

function parseJson(provider: SearchProvider, answer: HttpAnswer): unknown {
  try {
    return JSON.parse(answer.text);
  } catch {
    const start = answer.text.slice(0, 80).replace(/\s+/g, " ");
    throw new SearchProviderError(provider.id, `${provider.name} answered HTTP ${answer.status} with a body that is not JSON (${JSON.stringify(start)}); check its URL, or try again later`, true, answer.status);
  }
}

function malformed(provider: SearchProvider, what: string): SearchProviderError {
  return new SearchProviderError(provider.id, `${provider.name} answered JSON without ${what}; its API may have changed, so an operator should check the provider's URL and Tack's version`, true);
}

type Json = Record<string, unknown>;
const isObject = (value: unknown): value is Json => typeof value === "object" && value !== null && !Array.isArray(value);
const text = (value: unknown): string => (typeof value === "string" ? value : "");

/** The message of an error body: Anthropic's and OpenAI's `{error: {message}}`, Brave's `{error: {detail, code}}`. */
function errorMessage(body: unknown): string {
  if (!isObject(body)) return "";
  const error = isObject(body.error) ? body.error : body;
  return [text(error.code), text(error.message) || text(error.detail)].filter(Boolean).join(": ");
}

async function errorOf(provider: SearchProvider, key: SearchKey, answer: HttpAnswer): Promise<SearchProviderError> {
  let message = "";
  try {
    message = errorMessage(JSON.parse(answer.text));
  } catch {
    message = answer.text.trim().slice(0, 120);
  }
  return httpFailure(provider, key, answer, message);
}

// ---- Domains ----

/**
 * Lower-case host without scheme, path or leading dots; what allowed_domains entries are compared as.
 * The entries are the model's, so no regex here may backtrack over a long run: `[/:].*$` and
 * `\.+$` are quadratic on a run of slashes before a line break or of dots before a letter
 * (50,000 took 3 s), hence a cut at the first `/` or `:` and a scan for the trailing dots.
 */
export function normaliseDomain(domain: string): string {
  const host = domain.trim().toLowerCase().replace(/^[a-z]+:\/\//, "");
  const cut = host.search(/[/:]/);
  const bare = cut === -1 ? host : host.slice(0, cut);
  let end = bare.length;
  while (end > 0 && bare[end - 1] === ".") end--;
  return bare.slice(0, end).replace(/^\.+/, "").replace(/^www\./, "");
}

function hostOf(url: string): string {
  try {
    return new URL(url).hostname.toLowerCase();
  } catch {
    return "";
  }
}

const within = (host: string, domain: string) => host === domain || host.endsWith(`.${domain}`) || host === `www.${domain}`;

/** Applies the filters to results too: a provider that ignores one must not leak results past it. */
export function filterResults(results: readonly SearchResult[], request: SearchRequest): SearchResult[] {
  const allowed = request.allowedDomains.map(normaliseDomain).filter(Boolean);
  const blocked = request.blockedDomains.map(normaliseDomain).filter(Boolean);
  return results.filter((result) => {
    const host = hostOf(result.url);
    if (!host) return false;
    if (allowed.length > 0 && !allowed.some((d) => within(host, d))) return false;
    return !blocked.some((d) => within(host, d));
  });
}

// ---- Brave Search ----

export const BRAVE_BASE_URL = "https://api.search.brave.com";

export interface BraveOptions {
  /** Default BRAVE_BASE_URL; tests point it at a local server. */
  readonly baseUrl?: string;
  readonly env?: NodeJS.ProcessEnv;
  readonly timeoutMs?: number;
}

/**
 * Brave Search API, web endpoint: `GET /res/v1/web/search?q=&count=` with the key in
 * `X-Subscription-Token`; results are `web.results[] {title, url, description, age}`. Domain
 * filters become `site:` operators in the query (Brave has no separate parameter for them).
 * Key: BRAVE_API_KEY.
 */
export function braveProvider(options: BraveOptions = {}): SearchProvider {
  const base = (options.baseUrl ?? BRAVE_BASE_URL).replace(/\/+$/, "");
  const env = options.env ?? process.env;
  const timeoutMs = options.timeoutMs ?? 20_000;
  const provider: SearchProvider = {
    id: "brave",
    name: "Brave Search",
    setup: "set BRAVE_API_KEY to a Brave Search API key (https://api-dashboard.search.brave.com)",
    async key() {
      const key = env.BRAVE_API_KEY?.trim();
      return key ? { key, source: "env:BRAVE_API_KEY" } : undefined;
    },
    async search(request, key, signal) {
      const allowed = request.allowedDomains.map(normaliseDomain).filter(Boolean);
      const blocked = request.blockedDomains.map(normaliseDomain).filter(Boolean);
      const q = [
        request.query,
        allowed.length > 0 ? `(${allowed.map((d) => `site:${d}`).join(" OR ")})` : "",
        ...blocked.map((d) => `-site:${d}`),
      ].filter(Boolean).join(" ");
      // Asks for a few more than wanted when filtering, since results outside the filters are dropped here too.
      const count = Math.min(20, request.maxResults + (allowed.length + blocked.length > 0 ? 5 : 0));
      const body = await get(q, count, key, signal);
      const web = isObject(body) ? body.web : undefined;
      if (web === undefined) return { results: [] };
      if (!isObject(web) || !Array.isArray(web.results)) throw malformed(provider, "web.results");
      const results = web.results.filter(isObject).map((r) => ({
        title: plain(text(r.title)), url: text(r.url), snippet: plain(text(r.description)), age: text(r.age) || text(r.page_age),
      })).filter((r) => r.url);
      return { results: filterResults(results, request).slice(0, request.maxResults) };
    },
    async probe(key, signal) {
      const body = await get("tack health check", 1, key, signal);
      if (!isObject(body)) throw malformed(provider, "an object");
      return "HTTP 200, search answered";
    },
  };
  async function get(q: string, count: number, key: SearchKey, signal: AbortSignal): Promise<unknown> {
    const url = `${base}/res/v1/web/search?${new URLSearchParams({ q, count: String(count), text_decorations: "false" })}`;
    const answer = await send(provider, url, {
      headers: { accept: "application/json", "x-subscription-token": key.key, "user-agent": "Tack-web_search/1" },
    }, AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)]));
    if (answer.status !== 200) throw await errorOf(provider, key, answer);
    return parseJson(provider, answer);
  }
  return provider;
}

/** Brave marks matches with <strong> even when asked not to, and escapes entities. */
function plain(value: string): string {
  return value
    // `[^<>]`, not `[^>]`: a run of `<` without `>` must not make every `<` scan to the end (quadratic).
    .replace(/<[^<>]*>/g, "")
    .replace(/&(amp|lt|gt|quot|#39|#x27|apos|nbsp);/g, (_, name: string) => ({ amp: "&", lt: "<", gt: ">", quot: '"', "#39": "'", "#x27": "'", apos: "'", nbsp: " " })[name]!)
    .replace(/\s+/g, " ")
    .trim();
}

// ---- DeepSeek ----

export const DEEPSEEK_ANTHROPIC_URL = "https://api.deepseek.com/anthropic";

export interface DeepSeekOptions {
  /** Anthropic-compatible base URL (`/v1/messages` is appended); default DEEPSEEK_ANTHROPIC_URL. */
  readonly baseUrl?: string;
  /** Model that runs the search; default deepseek-v4-flash (the cheap one). */
  readonly model?: string;
  readonly env?: NodeJS.ProcessEnv;
  /** Home directory holding `.tack/credentials.yaml`, as for the llm service. */
  readonly home?: string;
  /** A search is a whole model turn; default 90 s. */
  readonly timeoutMs?: number;
}

/**
 * DeepSeek's search: a Messages request to its Anthropic-compatible API with the server-side
 * `web_search_20250305` tool. Results come from the `web_search_tool_result` blocks (never from
 * URLs in the model's prose); snippets are the `cited_text` of the answer's citations, and the
 * answer itself is kept as a summary. An answer without any such block is a failure: the model
 * did not search. Key: the llm service's DeepSeek key (DEEPSEEK_API_KEY or
 * `deepseek.api_key` in ~/.tack/credentials.yaml).
 */
export function deepseekProvider(options: DeepSeekOptions = {}): SearchProvider {
  const base = (options.baseUrl ?? DEEPSEEK_ANTHROPIC_URL).replace(/\/+$/, "");
  const model = options.model ?? "deepseek-v4-flash";
  const timeoutMs = options.timeoutMs ?? 90_000;
  const provider: SearchProvider = {
    id: "deepseek",
    name: "DeepSeek web search",
    setup: "set DEEPSEEK_API_KEY (or deepseek.api_key in ~/.tack/credentials.yaml, as for the llm service)",
    async key() {
      const { deepseek } = await loadCredentials({ env: options.env ?? process.env, ...(options.home ? { home: options.home } : {}) });
      return deepseek;
    },
    async search(request, key, signal) {
      const tool: Json = { type: "web_search_20250305", name: "web_search", max_uses: 1 };
      const allowed = request.allowedDomains.map(normaliseDomain).filter(Boolean);
      const blocked = request.blockedDomains.map(normaliseDomain).filter(Boolean);
      // The tool takes one of the two lists, not both; the other is applied to the results only.
      if (allowed.length > 0) tool.allowed_domains = allowed;
      else if (blocked.length > 0) tool.blocked_domains = blocked;
      const body = await post({
        model, max_tokens: 1024, tools: [tool],
        messages: [{ role: "user", content: `Search the web once for: ${request.query}\nThen answer in at most five sentences, citing the results.` }],
      }, key, signal);
      const answer = parseMessage(provider, body);
      return { ...answer, results: filterResults(answer.results, request).slice(0, request.maxResults) };
    },
    async probe(key, signal) {
      const body = await post({ model, max_tokens: 1, messages: [{ role: "user", content: "ping" }] }, key, signal);
      if (!isObject(body) || !Array.isArray(body.content)) throw malformed(provider, "content");
      return `HTTP 200, ${text(body.model) || model} answered`;
    },
  };
  async function post(payload: Json, key: SearchKey, signal: AbortSignal): Promise<unknown> {
    const answer = await send(provider, `${base}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": key.key, "anthropic-version": "2023-06-01", "user-agent": "Tack-web_search/1" },
      body: JSON.stringify(payload),
    }, AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)]));
    if (answer.status !== 200) throw await errorOf(provider, key, answer);
    return parseJson(provider, answer);
  }
  return provider;
}

/** Reads a Messages answer: `web_search_tool_result` blocks, and text blocks with their citations. */
export function parseMessage(provider: SearchProvider, body: unknown): SearchAnswer {
  if (!isObject(body) || !Array.isArray(body.content)) throw malformed(provider, "content");
  const found = new Map<string, { title: string; age: string; cited: string[] }>();
  const summary: string[] = [];
  let searched = false;
  for (const block of body.content.filter(isObject)) {
    if (block.type === "web_search_tool_result") {
      searched = true;
      const content = block.content;
      if (isObject(content) && content.type === "web_search_tool_result_error") {
        const code = text(content.error_code) || "unknown";
        const transient = code === "unavailable" || code === "too_many_requests";
        throw new SearchProviderError(provider.id, `${provider.name} could not search (error_code ${code}); ${transient ? "try again later" : "change the query"}`, transient);
      }
      if (!Array.isArray(content)) throw malformed(provider, "results in its web_search_tool_result");
      for (const r of content.filter(isObject)) {
        const url = text(r.url);
        if (r.type === "web_search_result" && url && !found.has(url)) found.set(url, { title: text(r.title), age: text(r.page_age), cited: [] });
      }
    } else if (block.type === "text") {
      summary.push(text(block.text));
      for (const c of Array.isArray(block.citations) ? block.citations.filter(isObject) : []) {
        const hit = found.get(text(c.url));
        const cited = text(c.cited_text).replace(/\s+/g, " ").trim();
        if (hit && cited && !hit.cited.includes(cited)) hit.cited.push(cited);
      }
    }
  }
  if (!searched) {
    throw new SearchProviderError(provider.id, `${provider.name} answered without searching (no web_search_tool_result block); its endpoint may not support the web search tool, so an operator should check its URL or choose another provider`, true);
  }
  const results = [...found].map(([url, r]) => ({ title: r.title, url, snippet: r.cited.join(" … "), age: r.age }));
  const prose = summary.join("").trim();
  return prose ? { results, summary: prose } : { results };
}
