import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { TackError } from "@tack/bus";
import type { Usage } from "@tack/proto";
import { describe, expect, it } from "vitest";
import { DEFAULT_PRICE_TABLE, loadPriceTable, parsePriceTable, priceFor, type PriceConfig } from "../src/prices.js";
import { startLlmService } from "../src/service.js";

const usage: Usage = { inputMissTokens: 1_000_000, inputHitTokens: 4_000_000, outputTokens: 500_000, reasoningTokens: 200_000 };
const at = (time: string) => new Date(`2026-12-02T${time}:00Z`);

function failure(fn: () => unknown): TackError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(TackError);
    return error as TackError;
  }
  throw new Error("expected a failure");
}

describe("prices", () => {
  it("prices - the built-in table prices DeepSeek V4 flash off-peak and at twice that in the peak windows", () => {
    // 1M misses at $0.14 + 4M hits at $0.0028 + 0.5M output at $0.28 (reasoning is part of the output).
    expect(priceFor("deepseek:deepseek-v4-flash", usage, at("12:00"))).toEqual({ costUsd: expect.closeTo(0.14 + 0.0112 + 0.14, 10), window: "off-peak" });
    expect(priceFor("deepseek:deepseek-v4-flash", usage, at("01:00"))).toEqual({ costUsd: expect.closeTo(2 * 0.2912, 10), window: "peak" });
    expect(priceFor("deepseek:deepseek-v4-flash", usage, at("09:59")).window).toBe("peak");
    expect(priceFor("deepseek:deepseek-v4-flash", usage, at("10:00")).window).toBe("off-peak");
    expect(priceFor("deepseek:deepseek-v4-flash", usage, at("04:00")).window).toBe("off-peak");
    expect(priceFor("deepseek:deepseek-v4-pro", usage, at("12:00")).costUsd).toBeCloseTo(0.435 + 4 * 0.003625 + 0.5 * 0.87, 10);
    expect(priceFor("deepseek:deepseek-chat", usage, at("12:00"))).toEqual(priceFor("deepseek:deepseek-v4-flash", usage, at("12:00")));
    // A hit costs 1/50 of a miss on flash and 1/120 on pro.
    const one = (kind: keyof Usage, model: string) => priceFor(model, { inputMissTokens: 0, inputHitTokens: 0, outputTokens: 0, reasoningTokens: 0, [kind]: 1_000_000 }, at("12:00")).costUsd;
    expect(one("inputMissTokens", "deepseek:deepseek-v4-flash") / one("inputHitTokens", "deepseek:deepseek-v4-flash")).toBeCloseTo(50);
    expect(one("inputMissTokens", "deepseek:deepseek-v4-pro") / one("inputHitTokens", "deepseek:deepseek-v4-pro")).toBeCloseTo(120);
  });

  it("prices - a model without a price costs 0 in the window unpriced", () => {
    expect(priceFor("scripted:/tmp/x.json", usage, at("12:00"))).toEqual({ costUsd: 0, window: "unpriced" });
    expect(priceFor("deepseek:deepseek-v4-flash-2", usage, at("12:00"))).toEqual({ costUsd: 0, window: "unpriced" });
  });

  it("prices - an exact match wins over globs, the first glob over later ones; windows can wrap past midnight", () => {
    const rate = (n: number) => ({ input_miss: n, input_hit: 0, output: 0 });
    const table = parsePriceTable({
      models: [
        { match: "openai:gpt-4.1*", usd_per_million: rate(2) },
        { match: "openai:*", usd_per_million: rate(9) },
        { match: "openai:gpt-4.1-mini", usd_per_million: rate(0.4), windows: [{ name: "night", from: "22:00", to: "02:00", usd_per_million: rate(0.1) }] },
      ],
    } satisfies PriceConfig, "test");
    const miss = { inputMissTokens: 1_000_000, inputHitTokens: 0, outputTokens: 0, reasoningTokens: 0 };
    expect(priceFor("openai:gpt-4.1-mini", miss, at("12:00"), table)).toEqual({ costUsd: 0.4, window: "standard" });
    expect(priceFor("openai:gpt-4.1-mini", miss, at("23:30"), table)).toEqual({ costUsd: 0.1, window: "night" });
    expect(priceFor("openai:gpt-4.1-mini", miss, at("01:59"), table).window).toBe("night");
    expect(priceFor("openai:gpt-4.1-nano", miss, at("12:00"), table).costUsd).toBe(2);
    expect(priceFor("openai:o3", miss, at("12:00"), table).costUsd).toBe(9);
    expect(priceFor("openai.o3", miss, at("12:00"), table).window).toBe("unpriced");
  });

  it("prices - a bad table names the entry and the field", () => {
    const bad = failure(() => parsePriceTable({ models: [{ match: "a:b", usd_per_million: { input_miss: 1, input_hit: 0, output: 1 } }, { match: "deepseek:x", usd_per_million: { input_miss: 1, input_hit: "0.1", output: 1 } }] }, "prices.json"));
    expect(bad.code).toBe("llm.bad_prices");
    expect(bad.message).toContain('price table prices.json is unusable: models[1] ("deepseek:x").usd_per_million.input_hit');
    const time = failure(() => parsePriceTable({ models: [{ match: "a:b", usd_per_million: { input_miss: 1, input_hit: 0, output: 1 }, windows: [{ name: "peak", from: "9:00", to: "12:00", usd_per_million: { input_miss: 2, input_hit: 0, output: 2 } }] }] }, "prices.json"));
    expect(time.message).toContain('models[0] ("a:b").windows[0].from: expected a UTC time HH:MM');
    const overlap = failure(() => parsePriceTable({ models: [{ match: "a:b", usd_per_million: { input_miss: 1, input_hit: 0, output: 1 }, windows: [
      { name: "peak", from: "09:00", to: "12:00", usd_per_million: { input_miss: 2, input_hit: 0, output: 2 } },
      { name: "lunch", from: "11:00", to: "13:00", usd_per_million: { input_miss: 2, input_hit: 0, output: 2 } },
    ] }] }, "prices.json"));
    expect(overlap.message).toContain('models[0] ("a:b").windows[1] (lunch) overlaps windows[0] (peak)');
    const twice = failure(() => parsePriceTable({ models: [1, 2].map(() => ({ match: "a:b", usd_per_million: { input_miss: 1, input_hit: 0, output: 1 } })) }, "prices.json"));
    expect(twice.message).toContain('models[1] ("a:b"): a second entry');
    expect(failure(() => parsePriceTable({ model: [] }, "prices.json")).message).toContain("models");
  });

  it("prices - the table comes from the path, else TACK_PRICES, else the built-in one", async () => {
    const dir = await mkdtemp(join(tmpdir(), "tack-prices-"));
    try {
      const path = join(dir, "prices.json");
      await writeFile(path, JSON.stringify({ models: [{ match: "anthropic:claude-*", usd_per_million: { input_miss: 3, input_hit: 0.3, output: 15 } }] }));
      const fromEnv = await loadPriceTable({ env: { TACK_PRICES: path } });
      expect(priceFor("anthropic:claude-sonnet-4-5", usage, at("12:00"), fromEnv).costUsd).toBeCloseTo(3 + 1.2 + 7.5, 10);
      expect(await loadPriceTable({ env: {} })).toBe(DEFAULT_PRICE_TABLE);
      expect((await loadPriceTable({ path, env: { TACK_PRICES: "/nowhere.json" } })).entries).toHaveLength(1);
      await expect(loadPriceTable({ env: { TACK_PRICES: join(dir, "missing.json") } })).rejects.toMatchObject({ code: "llm.bad_prices", message: expect.stringContaining("ENOENT") });
      await writeFile(path, "{ not json");
      await expect(loadPriceTable({ path })).rejects.toMatchObject({ code: "llm.bad_prices", message: expect.stringContaining("not valid JSON") });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("prices - the service refuses to start with an invalid table", async () => {
    const dir = await mkdtemp(join(tmpdir(), "tack-prices-"));
    try {
      const path = join(dir, "prices.json");
      await writeFile(path, JSON.stringify({ models: [{ match: "deepseek:deepseek-v4-flash", usd_per_million: { input_miss: -1, input_hit: 0, output: 0 } }] }));
      await expect(startLlmService({ url: "nats://127.0.0.1:4222", namespace: "tunused", scripts: { scriptDirs: [] }, home: dir, env: { TACK_PRICES: path } }))
        .rejects.toMatchObject({ code: "llm.bad_prices", message: expect.stringContaining('models[0] ("deepseek:deepseek-v4-flash").usd_per_million.input_miss') });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
