import { describe, expect, it } from "vitest";
import { Event } from "@tack/proto";
import { sessionUsage } from "../src/usage.js";

const ev = (seq: number, payload: Event["payload"]) => Event.fromPartial({ seq, payload });

describe("usage", () => {
  it("usage - sums money and tokens per session and per turn, including summary calls", () => {
    const u = (miss: number, hit: number, out: number) => ({ inputMissTokens: miss, inputHitTokens: hit, outputTokens: out, reasoningTokens: 1 });
    const usage = sessionUsage([
      ev(1, { $case: "turnStart", value: { turn: 1, userMessageSeq: 0 } }),
      ev(2, { $case: "usage", value: { turn: 1, step: 1, model: "m", usage: u(100, 0, 10), costUsd: 0.5, priceWindow: "standard" } }),
      ev(3, { $case: "usage", value: { turn: 1, step: 2, model: "m", usage: u(10, 100, 5), costUsd: 0.25, priceWindow: "standard" } }),
      ev(4, { $case: "turnStart", value: { turn: 2, userMessageSeq: 0 } }),
      ev(5, { $case: "contextSummarized", value: { fromSeq: 1, toSeq: 3, summarySeq: 6, model: "m", usage: u(50, 0, 20), costUsd: 0.125, requestedBy: "" } }),
    ]);
    expect(usage.cost_usd).toBe(0.875);
    expect(usage.tokens).toEqual({ input_miss: 160, input_hit: 100, output: 35, reasoning: 3 });
    expect(usage.turns).toEqual([{ turn: 1, cost_usd: 0.75 }, { turn: 2, cost_usd: 0.125 }]);
  });
});
