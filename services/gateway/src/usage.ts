import { Kvm } from "@nats-io/kv";
import type { Event } from "@tack/proto";
import { sendJson, type Handler } from "./http.js";
import type { GatewayContext } from "./sessions.js";

/** Money and tokens of one session, in total and per turn, summed from its log. */
export interface SessionUsage {
  cost_usd: number;
  tokens: { input_miss: number; input_hit: number; output: number; reasoning: number };
  turns: Array<{ turn: number; cost_usd: number }>;
}

/** Sums `usage/report` and `context/summarized` events (the summary call is priced there). */
export function sessionUsage(events: readonly Event[]): SessionUsage {
  const out: SessionUsage = { cost_usd: 0, tokens: { input_miss: 0, input_hit: 0, output: 0, reasoning: 0 }, turns: [] };
  const perTurn = new Map<number, number>();
  let turn = 0;
  for (const e of events) {
    const p = e.payload;
    if (p?.$case === "turnStart") turn = p.value.turn;
    const priced = p?.$case === "usage" ? p.value : p?.$case === "contextSummarized" ? p.value : undefined;
    if (!priced) continue;
    out.cost_usd += priced.costUsd;
    perTurn.set(turn, (perTurn.get(turn) ?? 0) + priced.costUsd);
    const u = priced.usage;
    if (u) {
      out.tokens.input_miss += u.inputMissTokens;
      out.tokens.input_hit += u.inputHitTokens;
      out.tokens.output += u.outputTokens;
      out.tokens.reasoning += u.reasoningTokens;
    }
  }
  out.turns = [...perTurn].map(([t, cost]) => ({ turn: t, cost_usd: cost }));
  return out;
}

/** `GET /v1/usage`: what the caller's tenant has spent, as recorded by the loop for tenant budgets. */
export function tenantUsage(context: GatewayContext): Handler {
  return async (exchange) => {
    const tenant = exchange.tenant!;
    const kv = await new Kvm(context.bus.nc).open(context.bus.names.spendBucket).catch(() => undefined);
    const entry = kv ? await kv.get(tenant).catch(() => null) : null;
    const spent = entry && entry.value.length ? Number(new TextDecoder().decode(entry.value)) : 0;
    sendJson(exchange.res, 200, { tenant, cost_usd: spent });
  };
}
