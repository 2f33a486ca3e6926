import type { PriceConfig } from "./prices.js";

// DeepSeek V4 list prices in USD per 1M tokens as of writing (December 2026), from DeepSeek's
// "Models & Pricing" page: they change often and must be checked there before they are
// relied on. The base rate is the off-peak rate; since the V4 release DeepSeek bills twice
// that in two daily peak windows, 09:00–12:00 and 14:00–18:00 Beijing time (UTC+8),
// i.e. 01:00–04:00 and 06:00–10:00 UTC. A cache hit costs 1/50 (flash) to 1/120 (pro) of a miss.
const FLASH = { input_miss: 0.14, input_hit: 0.0028, output: 0.28 };
const PRO = { input_miss: 0.435, input_hit: 0.003625, output: 0.87 };

function doubled(prices: typeof FLASH): typeof FLASH {
  return { input_miss: prices.input_miss * 2, input_hit: prices.input_hit * 2, output: prices.output * 2 };
}

function deepseek(match: string, prices: typeof FLASH): PriceConfig["models"][number] {
  return {
    match,
    window: "off-peak",
    usd_per_million: prices,
    windows: [
      { name: "peak", from: "01:00", to: "04:00", usd_per_million: doubled(prices) },
      { name: "peak", from: "06:00", to: "10:00", usd_per_million: doubled(prices) },
    ],
  };
}

/** The built-in price table, used when neither the `prices` option nor TACK_PRICES names a file. */
export const DEFAULT_PRICES: PriceConfig = {
  models: [
    deepseek("deepseek:deepseek-v4-flash", FLASH),
    deepseek("deepseek:deepseek-v4-pro", PRO),
    // The older names are served by V4 flash (non-thinking and thinking mode).
    deepseek("deepseek:deepseek-chat", FLASH),
    deepseek("deepseek:deepseek-reasoner", FLASH),
  ],
};
