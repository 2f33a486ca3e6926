import { Kvm } from "@nats-io/kv";
import type { Bus } from "@tack/bus";
import type { Event, gatewayV1 } from "@tack/proto";
import type { Operation } from "./call.js";
import { restSessionUsage, type RestJson } from "./gen/rest-json.js";

/**
 * Money and tokens summed one event at a time: `usage/report` and `context/summarized` events
 * (the summary call is priced there), per turn by the last `turn/start`.
 */
export class UsageFold {
  #cost = 0;
  readonly #tokens = { inputMiss: 0, inputHit: 0, output: 0, reasoning: 0 };
  readonly #perTurn = new Map<number, number>();
  #turn = 0;

  apply(e: Event): void {
    const p = e.payload;
    if (p?.$case === "turnStart") this.#turn = p.value.turn;
    const priced = p?.$case === "usage" ? p.value : p?.$case === "contextSummarized" ? p.value : undefined;
    if (!priced) return;
    this.#cost += priced.costUsd;
    this.#perTurn.set(this.#turn, (this.#perTurn.get(this.#turn) ?? 0) + priced.costUsd);
    const u = priced.usage;
    if (u) {
      this.#tokens.inputMiss += u.inputMissTokens;
      this.#tokens.inputHit += u.inputHitTokens;
      this.#tokens.output += u.outputTokens;
      this.#tokens.reasoning += u.reasoningTokens;
    }
  }

  /** The sums so far, as a new message (`tack.gateway.v1.SessionUsage`). */
  snapshot(): gatewayV1.SessionUsage {
    return { costUsd: this.#cost, tokens: { ...this.#tokens }, turns: [...this.#perTurn].map(([turn, cost]) => ({ turn, costUsd: cost })) };
  }
}

/** Sums a whole log (see `UsageFold`), in the REST form. */
export function sessionUsage(events: readonly Event[]): RestJson {
  const fold = new UsageFold();
  for (const e of events) fold.apply(e);
  return restSessionUsage(fold.snapshot());
}

/** `GetUsage`: what the caller's tenant has spent, as recorded by the loop for tenant budgets. */
export function tenantUsage(context: { readonly bus: Bus }): Operation<gatewayV1.GetUsageRequest, gatewayV1.GetUsageResponse> {
  return async (call) => {
    const tenant = call.tenant;
    const kv = await new Kvm(context.bus.nc).open(context.bus.names.spendBucket).catch(() => undefined);
    const entry = kv ? await kv.get(tenant).catch(() => null) : null;
    const spent = entry && entry.value.length ? Number(new TextDecoder().decode(entry.value)) : 0;
    return { message: { tenant, costUsd: spent } };
  };
}
