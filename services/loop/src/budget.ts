import { JetStreamApiCodes, JetStreamApiError } from "@nats-io/jetstream";
import { Kvm, type KV } from "@nats-io/kv";
import { LlmRpc, retrying, retryPolicy, TackError, type Bus } from "@tack/bus";
import type { OperatorConfig } from "@tack/config";
import type { Event } from "@tack/proto";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

// Another writer changed the tenant's total between our read and our compare-and-set.
const CONFLICTS = new Set<number>([JetStreamApiCodes.StreamWrongLastSequence, JetStreamApiCodes.StreamWrongLastSequenceUnknown]);
/** Re-reads after a conflicting write: 20 attempts, short jittered waits so racing replicas spread out. */
const SPEND_RETRY = retryPolicy({ maxAttempts: 20, baseDelayMs: 5, maxDelayMs: 200 });

/** Money spent so far by one session, from its log (model calls and summaries). */
export function sessionSpend(events: readonly Event[]): number {
  let total = 0;
  for (const e of events) {
    if (e.payload?.$case === "usage") total += e.payload.value.costUsd;
    else if (e.payload?.$case === "contextSummarized") total += e.payload.value.costUsd;
  }
  return total;
}

/**
 * Tenant budgets in USD: each tenant's `budget_usd` in the operator configuration, with
 * `override` (TACK_TENANT_BUDGETS) taking precedence tenant by tenant.
 */
export function tenantBudgets(operator: OperatorConfig, override: Readonly<Record<string, number>> = {}): Record<string, number> {
  const budgets: Record<string, number> = {};
  for (const [tenant, policy] of Object.entries(operator.tenants)) if (policy.budget_usd !== undefined) budgets[tenant] = policy.budget_usd;
  return { ...budgets, ...override };
}

/**
 * Budgets per session (from `session/created`) and per tenant (configured), checked before a
 * model call with an upper-bound estimate of what the call can cost; tenant spending is kept
 * in a KV bucket so every loop replica sees the same total.
 */
export class Budgets {
  readonly #bus: Bus;
  readonly #tenantBudgets: Readonly<Record<string, number>>;
  readonly #replicas: number;
  #kv: Promise<KV> | undefined;

  /** `options.replicas`: JetStream replicas of the spend bucket when this creates it (the log's). */
  constructor(bus: Bus, tenantBudgets: Readonly<Record<string, number>>, options: { replicas?: number } = {}) {
    this.#bus = bus;
    this.#tenantBudgets = tenantBudgets;
    this.#replicas = options.replicas ?? 1;
  }

  #bucket(): Promise<KV> {
    this.#kv ??= new Kvm(this.#bus.nc).create(this.#bus.names.spendBucket, { history: 1, replicas: this.#replicas });
    return this.#kv;
  }

  /** Total recorded for a tenant, in USD. */
  async tenantSpend(tenant: string): Promise<number> {
    const entry = await (await this.#bucket()).get(tenant);
    return entry && entry.value.length ? Number(decoder.decode(entry.value)) : 0;
  }

  /**
   * Adds a call's cost to its tenant's total (compare-and-set, safe with several replicas):
   * when another replica recorded between the read and the write, it reads again, under the
   * one retry policy (`SPEND_RETRY`). Any other failure is thrown at once: after a timeout
   * the write may have landed, and writing again could count the call twice.
   */
  async record(tenant: string, costUsd: number): Promise<void> {
    if (!(costUsd > 0)) return;
    const kv = await this.#bucket();
    await retrying(SPEND_RETRY, async (attempt) => {
      const entry = await kv.get(tenant);
      const next = encoder.encode(String((entry && entry.value.length ? Number(decoder.decode(entry.value)) : 0) + costUsd));
      try {
        if (entry) await kv.update(tenant, next, entry.revision);
        else await kv.create(tenant, next);
      } catch (error) {
        if (!(error instanceof JetStreamApiError && CONFLICTS.has(error.code))) throw error;
        throw new TackError("loop.spend_not_recorded", `could not record $${costUsd} for tenant ${tenant}: other loop replicas recorded first ${attempt} times in a row; retry the call`, {
          retryable: true, cause: error,
        });
      }
    });
  }

  /**
   * Refuses a model call that could cross the session's or the tenant's budget: spent so far
   * plus the most the call can cost (all input at the cache-miss price, `maxTokens` output).
   */
  async check(options: { tenant: string; model: string; sessionBudget: number; sessionSpent: number; inputTokens: number; maxTokens: number }): Promise<void> {
    const tenantBudget = this.#tenantBudgets[options.tenant] ?? 0;
    if (!(options.sessionBudget > 0) && !(tenantBudget > 0)) return;
    const { costUsd } = await this.#bus.request(LlmRpc.EstimateCost, {
      model: options.model, inputTokens: options.inputTokens, outputTokens: options.maxTokens,
    }, { timeoutMs: 10_000 });
    const usd = (n: number) => `$${n.toFixed(6)}`;
    if (options.sessionBudget > 0 && options.sessionSpent + costUsd > options.sessionBudget) {
      throw new TackError("budget.session_exceeded",
        `the next model call could cross this session's budget of ${usd(options.sessionBudget)} (spent ${usd(options.sessionSpent)}, the call may cost up to ${usd(costUsd)}); start a new session with a larger budget_usd to go on`,
        { details: { budget_usd: String(options.sessionBudget), spent_usd: String(options.sessionSpent), estimate_usd: String(costUsd) } });
    }
    if (tenantBudget > 0) {
      const spent = await this.tenantSpend(options.tenant);
      if (spent + costUsd > tenantBudget) {
        throw new TackError("budget.tenant_exceeded",
          `the next model call could cross tenant ${options.tenant}'s budget of ${usd(tenantBudget)} (spent ${usd(spent)}, the call may cost up to ${usd(costUsd)}); ask the operator to raise the tenant's budget_usd in the operator configuration`,
          { details: { budget_usd: String(tenantBudget), spent_usd: String(spent), estimate_usd: String(costUsd) } });
      }
    }
  }
}
