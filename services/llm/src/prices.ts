import { readFile } from "node:fs/promises";
import { TackError } from "@tack/bus";
import type { Usage } from "@tack/proto";
import { z } from "zod";
import { DEFAULT_PRICES } from "./default-prices.js";

const Prices = z.strictObject({
  input_miss: z.number().nonnegative(),
  input_hit: z.number().nonnegative(),
  output: z.number().nonnegative(),
});
const Time = z.string().regex(/^([01]\d|2[0-3]):[0-5]\d$/, "expected a UTC time HH:MM, 00:00 to 23:59");

const PriceConfigSchema = z.strictObject({
  models: z.array(z.strictObject({
    // `<provider>:<model>` exactly, or a glob where `*` matches any run of characters.
    match: z.string().min(1),
    // Name of the price that applies outside every window.
    window: z.string().min(1).default("standard"),
    usd_per_million: Prices,
    windows: z.array(z.strictObject({
      name: z.string().min(1),
      from: Time,
      // Exclusive; a window whose `to` is before its `from` runs past midnight.
      to: Time,
      usd_per_million: Prices,
    })).default([]),
  })),
});

/** A price table file as written (JSON, snake_case): USD per 1M tokens per model, with optional UTC time-of-day windows. */
export type PriceConfig = z.input<typeof PriceConfigSchema>;

/** USD per 1M tokens of each kind. */
interface Rates {
  readonly inputMiss: number;
  readonly inputHit: number;
  readonly output: number;
}

interface Entry {
  readonly match: string;
  readonly glob?: RegExp;
  readonly window: string;
  readonly rates: Rates;
  // Minutes of the day (UTC), [from, to), wrapping past midnight when from > to.
  readonly windows: readonly { name: string; from: number; to: number; rates: Rates }[];
}

/** A validated price table, ready for `priceFor`. */
export interface PriceTable {
  readonly entries: readonly Entry[];
}

/** What one call cost and which price window applied (`unpriced` with cost 0 when the table has no price for the model). */
export interface Price {
  readonly costUsd: number;
  readonly window: string;
}

/**
 * Validates a price table; a bad one fails with `llm.bad_prices` naming `source`, the entry
 * (by index and `match`) and the field.
 */
export function parsePriceTable(json: unknown, source: string): PriceTable {
  const parsed = PriceConfigSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw badPrices(source, `${where(json, issue.path)}: ${issue.message}`);
  }
  const seen = new Set<string>();
  const entries = parsed.data.models.map((model, i): Entry => {
    const name = `models[${i}] (${JSON.stringify(model.match)})`;
    if (!model.match.includes("*")) {
      if (seen.has(model.match)) throw badPrices(source, `${name}: a second entry for the same model; keep one`);
      seen.add(model.match);
    }
    const covered = new Array<string | undefined>(24 * 60);
    const windows = model.windows.map((window, j) => {
      const from = minutes(window.from);
      const to = minutes(window.to);
      if (from === to) throw badPrices(source, `${name}.windows[${j}]: "from" and "to" are both ${window.from}; a window must cover part of the day`);
      for (let m = from; m !== to; m = (m + 1) % covered.length) {
        if (covered[m] !== undefined) throw badPrices(source, `${name}.windows[${j}] (${window.name}) overlaps ${covered[m]} at ${window.from}–${window.to}; windows must not overlap`);
        covered[m] = `windows[${j}] (${window.name})`;
      }
      return { name: window.name, from, to, rates: rates(window.usd_per_million) };
    });
    return {
      match: model.match,
      glob: model.match.includes("*") ? new RegExp(`^${model.match.split("*").map(escape).join(".*")}$`) : undefined,
      window: model.window,
      rates: rates(model.usd_per_million),
      windows,
    };
  });
  return { entries };
}

/** The built-in table (DeepSeek V4 list prices; see `default-prices.ts`). */
export const DEFAULT_PRICE_TABLE: PriceTable = parsePriceTable(DEFAULT_PRICES, "the built-in price table");

/**
 * Loads the price table from `path`, else from the file env TACK_PRICES names, else the
 * built-in table. A missing, unreadable or invalid file is `llm.bad_prices`.
 */
export async function loadPriceTable(options: { path?: string; env?: NodeJS.ProcessEnv } = {}): Promise<PriceTable> {
  const path = options.path ?? ((options.env ?? process.env).TACK_PRICES || undefined);
  if (!path) return DEFAULT_PRICE_TABLE;
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    const reason = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
    throw new TackError("llm.bad_prices", `cannot read price table ${path} (${reason}); fix TACK_PRICES or unset it to use the built-in table`, { details: { path }, cause: error });
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw badPrices(path, `it is not valid JSON (${(error as Error).message})`, error);
  }
  return parsePriceTable(json, path);
}

/**
 * What `usage` of `model` (`<provider>:<model>`) costs at time `at`: misses, hits and output
 * (reasoning included) each at their price per 1M tokens, in the window `at` falls in
 * (UTC). An exact `match` wins over globs; among globs the first listed wins.
 */
export function priceFor(model: string, usage: Usage, at: Date, table: PriceTable = DEFAULT_PRICE_TABLE): Price {
  const entry = table.entries.find((e) => !e.glob && e.match === model) ?? table.entries.find((e) => e.glob?.test(model));
  if (!entry) return { costUsd: 0, window: "unpriced" };
  const minute = at.getUTCHours() * 60 + at.getUTCMinutes();
  const window = entry.windows.find((w) => (w.from < w.to ? minute >= w.from && minute < w.to : minute >= w.from || minute < w.to));
  const r = window?.rates ?? entry.rates;
  const costUsd = (usage.inputMissTokens * r.inputMiss + usage.inputHitTokens * r.inputHit + usage.outputTokens * r.output) / 1_000_000;
  return { costUsd, window: window?.name ?? entry.window };
}

function rates(prices: z.infer<typeof Prices>): Rates {
  return { inputMiss: prices.input_miss, inputHit: prices.input_hit, output: prices.output };
}

function minutes(time: string): number {
  const [hours, mins] = time.split(":").map(Number) as [number, number];
  return hours * 60 + mins;
}

function escape(text: string): string {
  return text.replace(/[.+?^${}()|[\]\\]/g, "\\$&");
}

/** A zod issue path as `models[2] ("deepseek:x").usd_per_million.output`, naming the entry by its match. */
function where(json: unknown, path: readonly PropertyKey[]): string {
  if (path.length === 0) return "the top level";
  let out = "";
  let node: unknown = json;
  for (const key of path) {
    node = node && typeof node === "object" ? (node as Record<PropertyKey, unknown>)[key] : undefined;
    out += typeof key === "number" ? `[${key}]` : `.${String(key)}`;
    if (out.match(/^\.models\[\d+\]$/) && typeof (node as { match?: unknown } | undefined)?.match === "string") out += ` (${JSON.stringify((node as { match: string }).match)})`;
  }
  return out.replace(/^\./, "");
}

function badPrices(source: string, problem: string, cause?: unknown): TackError {
  return new TackError(
    "llm.bad_prices",
    `price table ${source} is unusable: ${problem}; expected {"models": [{"match", "window"?, "usd_per_million": {"input_miss", "input_hit", "output"}, "windows"?: [{"name", "from": "HH:MM", "to": "HH:MM", "usd_per_million"}]}]}`,
    { details: { source }, cause },
  );
}
