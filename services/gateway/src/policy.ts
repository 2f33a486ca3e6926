// Per-tenant policy from the operator configuration, enforced before anything is asked of the
// loop: the widest sandbox mode, the model providers, sessions at once, event streams at once
// and requests per minute. Counts of streams and requests are kept in this gateway process;
// with several gateway replicas each enforces them on its own share. `max_sandboxes` and
// `budget_usd` are enforced by the sandbox service and the loop, which read the same file.
import { modeRank, SANDBOX_MODES, tenantPolicy, type OperatorConfig, type SandboxMode, type TenantPolicy } from "@tack/config";
import { GatewayError } from "./errors.js";
import type { Call } from "./call.js";
import type { SessionIndex } from "./store.js";

/** One open event stream: aborted when its key is revoked. */
interface OpenStream {
  readonly keyHash: string;
  readonly abort: AbortController;
}

// A tenant the configuration does not list (the TACK_API_KEY tenant of a file that names others)
// gets the schema's defaults, derived from the schema itself so they cannot drift.

/** The narrower of two sandbox modes. */
function narrower(a: SandboxMode, b: SandboxMode): SandboxMode {
  return modeRank(a) <= modeRank(b) ? a : b;
}

/** A refusal that names the limit and its value (`details.limit`, `details.value`). */
function limitError(status: number, code: string, message: string, limit: string, value: string, extra: Record<string, string> = {}): GatewayError {
  return new GatewayError(status, code, message, { details: { limit, value, ...extra } });
}

/** The tenants' policies and this process's counts of what each tenant uses. */
export class TenantPolicies {
  readonly #operator: OperatorConfig;
  readonly #index: SessionIndex;
  readonly #checkEveryMs: number;
  readonly #buckets = new Map<string, { tokens: number; at: number }>();
  /** Session creations admitted and not yet answered, per tenant (they are not in the index yet). */
  readonly #pending = new Map<string, number>();
  /** Serializes admission per tenant, so two creations cannot both take the last free slot. */
  readonly #admitting = new Map<string, Promise<unknown>>();
  readonly #streams = new Map<string, Set<OpenStream>>();
  #timer: NodeJS.Timeout | undefined;

  /** `checkEveryMs`: how often open streams' keys are checked against the index (revoked on another replica). */
  constructor(operator: OperatorConfig, index: SessionIndex, checkEveryMs: number) {
    this.#operator = operator;
    this.#index = index;
    this.#checkEveryMs = checkEveryMs;
  }

  /** The tenant's policy: as configured, else the defaults. */
  policy(tenant: string): TenantPolicy {
    return tenantPolicy(this.#operator, tenant);
  }

  /** Open event streams of the tenant in this process. */
  streamCount(tenant: string): number {
    return this.#streams.get(tenant)?.size ?? 0;
  }

  /**
   * Spends one token of the tenant's bucket for a call (after authentication):
   * `requests_per_minute` tokens, refilled evenly over the minute, so a burst of a full minute's
   * worth is allowed. Refused with 429 naming when to retry (`details.retry_after_seconds`, sent
   * as `retry-after`).
   */
  spendRequest(tenant: string): void {
    const perMinute = this.policy(tenant).requests_per_minute;
    const rate = perMinute / 60_000;
    const now = Date.now();
    const bucket = this.#buckets.get(tenant) ?? { tokens: perMinute, at: now };
    bucket.tokens = Math.min(perMinute, bucket.tokens + (now - bucket.at) * rate);
    bucket.at = now;
    this.#buckets.set(tenant, bucket);
    if (bucket.tokens < 1) {
      const seconds = Math.max(1, Math.ceil((1 - bucket.tokens) / rate / 1000));
      throw limitError(429, "gateway.limit_exceeded",
        `tenant ${tenant} may make at most ${perMinute} requests per minute (requests_per_minute); retry in ${seconds} s or ask the operator to raise it`,
        "requests_per_minute", String(perMinute), { retry_after_seconds: String(seconds) });
    }
    bucket.tokens -= 1;
  }

  /** Refuses a sandbox mode wider than the tenant's `max_sandbox_mode` with 403 `gateway.mode_not_allowed`. */
  checkSandboxMode(tenant: string, mode: SandboxMode): void {
    const widest = this.policy(tenant).max_sandbox_mode;
    if (modeRank(mode) > modeRank(widest)) {
      const allowed = SANDBOX_MODES.slice(0, modeRank(widest) + 1).join(", ");
      throw limitError(403, "gateway.mode_not_allowed",
        `tenant ${tenant} may use sandbox modes up to ${widest} (max_sandbox_mode), not ${mode}; use one of ${allowed} or ask the operator to widen it`,
        "max_sandbox_mode", widest, { requested: mode });
    }
  }

  /**
   * Admits a new session of the caller's tenant, or refuses it before anything is created:
   * a model provider outside `model_providers` (403 `gateway.provider_not_allowed`), a sandbox
   * mode wider than `max_sandbox_mode` (403), or `max_sessions` reached (429). Resolves to the
   * sandbox mode to use: the requested one, else workspace-write or the tenant's widest if
   * narrower. The admitted creation counts against `max_sessions` until `release` is called
   * (once it is in the index, or failed).
   */
  async admitSession(tenant: string, request: { model: string; sandboxMode: SandboxMode | undefined }): Promise<{ mode: SandboxMode; release(): void }> {
    const policy = this.policy(tenant);
    const provider = request.model.slice(0, request.model.indexOf(":"));
    if (policy.model_providers !== undefined && !policy.model_providers.includes(provider)) {
      const allowed = policy.model_providers.length > 0 ? policy.model_providers.join(", ") : "none";
      throw limitError(403, "gateway.provider_not_allowed",
        `tenant ${tenant} may not use the model provider ${provider} (model_providers allows ${allowed}); use an allowed provider or ask the operator to add it`,
        "model_providers", policy.model_providers.join(","), { provider });
    }
    const mode = request.sandboxMode ?? narrower("workspace-write", policy.max_sandbox_mode);
    this.checkSandboxMode(tenant, mode);
    const previous = this.#admitting.get(tenant) ?? Promise.resolve();
    const admission = previous.catch(() => undefined).then(async () => {
      const existing = await this.#index.countSessions(tenant);
      const pending = this.#pending.get(tenant) ?? 0;
      if (existing + pending >= policy.max_sessions) {
        throw limitError(429, "gateway.limit_exceeded",
          `tenant ${tenant} may have at most ${policy.max_sessions} sessions at once (max_sessions); delete one or ask the operator to raise it`,
          "max_sessions", String(policy.max_sessions));
      }
      this.#pending.set(tenant, pending + 1);
    });
    this.#admitting.set(tenant, admission);
    try {
      await admission;
    } finally {
      if (this.#admitting.get(tenant) === admission) this.#admitting.delete(tenant);
    }
    // Once answered (created or failed), the session is in the index or nowhere.
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      const left = (this.#pending.get(tenant) ?? 1) - 1;
      if (left > 0) this.#pending.set(tenant, left);
      else this.#pending.delete(tenant);
    };
    return { mode, release };
  }

  /**
   * Registers an event stream of the caller, refused with 429 at the tenant's
   * `max_event_streams`. The returned signal aborts when the caller's key is revoked;
   * `close` must be called when the stream ends.
   */
  openStream(call: Call): { signal: AbortSignal; close(): void } {
    const tenant = call.tenant;
    const max = this.policy(tenant).max_event_streams;
    const open = this.#streams.get(tenant) ?? new Set<OpenStream>();
    if (open.size >= max) {
      throw limitError(429, "gateway.limit_exceeded",
        `tenant ${tenant} may have at most ${max} event streams open at once (max_event_streams); close one or ask the operator to raise it`,
        "max_event_streams", String(max));
    }
    const stream: OpenStream = { keyHash: call.caller.keyHash, abort: new AbortController() };
    open.add(stream);
    this.#streams.set(tenant, open);
    this.#watch();
    return {
      signal: stream.abort.signal,
      close: () => {
        open.delete(stream);
        if (open.size === 0 && this.#streams.get(tenant) === open) this.#streams.delete(tenant);
        if (this.#streams.size === 0) this.#unwatch();
      },
    };
  }

  /** Ends the open event streams of a key that was just revoked. */
  endStreamsOf(keyHash: string): void {
    for (const open of this.#streams.values()) {
      for (const stream of open) if (stream.keyHash === keyHash) stream.abort.abort();
    }
  }

  /** Stops the key check; open streams end with the gateway's shutdown signal. */
  close(): void {
    this.#unwatch();
  }

  // A key revoked through another gateway replica ends this replica's streams at the next check.
  #watch(): void {
    this.#timer ??= setInterval(() => void this.#checkKeys(), this.#checkEveryMs).unref();
  }

  #unwatch(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  async #checkKeys(): Promise<void> {
    const hashes = new Set<string>();
    for (const open of this.#streams.values()) for (const stream of open) hashes.add(stream.keyHash);
    const active = await this.#index.stillActive([...hashes]).catch(() => undefined);
    // An index that does not answer ends nothing: the next request is checked anyway.
    if (!active) return;
    for (const hash of hashes) if (!active.has(hash)) this.endStreamsOf(hash);
  }
}
