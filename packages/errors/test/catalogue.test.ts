import { readFileSync } from "node:fs";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { AREAS, CATALOGUE, errorSpec, errorsMarkdown, GRPC_STATUS_NUMBERS, HTTP_FOR_GRPC, isErrorCode, type ErrorSpec } from "../src/index.js";
import { CODE_SHAPE, scanCodes, sourceFiles, type CodeSite, type ScanResult } from "./scan.js";

const ROOT = join(import.meta.dirname, "../../..");
const entries = Object.entries(CATALOGUE) as [string, ErrorSpec][];

/** Codes whose sites decide `retryable` differently from each other on purpose, each with why. */
const RETRYABLE_VARIES: Record<string, string> = {
  "log.append_failed": "JetStream refusing an append is final; NATS still failing after the writer's own retries may pass",
};

const at = (s: CodeSite) => `${s.file}:${s.line}`;

describe("errors - the catalogue", () => {
  it("errors - every code has the shape service.what, a prefix listed in AREAS, and one sentence saying what to do", () => {
    const prefixes = new Set(AREAS.map((a) => a.prefix));
    const problems: string[] = [];
    for (const [code, s] of entries) {
      if (!CODE_SHAPE.test(code)) problems.push(`${code}: not lower-case service.what`);
      if (!prefixes.has(code.split(".")[0]!)) problems.push(`${code}: prefix not in AREAS (packages/errors/src/catalogue.ts)`);
      if (!/^[A-Z`.]/.test(s.meaning) || !s.meaning.endsWith(".")) problems.push(`${code}: meaning must be a sentence (capital, full stop)`);
      if (s.meaning.length < 30 || s.meaning.length > 260) problems.push(`${code}: meaning is ${s.meaning.length} characters; say in 30-260 what it means and what to do`);
    }
    for (const area of AREAS) {
      if (!entries.some(([code]) => code.split(".")[0] === area.prefix)) problems.push(`AREAS lists ${area.prefix}, which has no code`);
    }
    expect(problems).toEqual([]);
  });

  it("errors - each code's HTTP status agrees with its gRPC status", () => {
    const problems = entries
      .filter(([, s]) => !HTTP_FOR_GRPC[s.grpc].includes(s.http))
      .map(([code, s]) => `${code}: HTTP ${s.http} with gRPC ${s.grpc} (which pairs with ${HTTP_FOR_GRPC[s.grpc].join(", ")})`);
    expect(problems).toEqual([]);
    expect(Object.keys(GRPC_STATUS_NUMBERS)).toHaveLength(17);
  });

  it("errors - lookups answer for catalogued codes only", () => {
    expect(isErrorCode("loop.unknown_session")).toBe(true);
    expect(errorSpec("loop.unknown_session")).toMatchObject({ http: 404, grpc: "NOT_FOUND", retryable: false });
    expect(isErrorCode("loop.no_such_code")).toBe(false);
    expect(errorSpec("toString")).toBeUndefined();
    expect(errorSpec("constructor")).toBeUndefined();
  });

  it("errors - docs/errors.md is generated from the catalogue (fix: node scripts/gen-errors.mjs)", () => {
    const committed = readFileSync(join(ROOT, "docs/errors.md"), "utf8");
    const fresh = errorsMarkdown();
    if (committed !== fresh) {
      throw new Error("docs/errors.md is stale: run `node scripts/gen-errors.mjs` and commit it");
    }
    for (const [code] of entries) expect(committed).toContain(`| \`${code}\` |`);
  });
});

describe("errors - the sources against the catalogue", () => {
  let scan: ScanResult;
  beforeAll(() => {
    scan = scanCodes(ROOT, sourceFiles(ROOT));
  }, 180_000);

  it("errors - every code argument can be followed to literal codes", () => {
    expect(scan.files).toBeGreaterThan(100);
    const problems = scan.unresolved.map((u) => `${u.file}:${u.line}: cannot tell which code ${u.text} is: ${u.reason}`);
    expect(problems, "pass a string literal (or a const or parameter fed literals) as the code").toEqual([]);
  });

  it("errors - every code the sources throw is in the catalogue", () => {
    const missing = scan.thrown.filter((s) => !isErrorCode(s.code)).map((s) => `${at(s)}: ${s.code} (${s.via}) is not in packages/errors/src/codes/`);
    expect(missing, "add each code to the catalogue with its statuses and meaning, then run node scripts/gen-errors.mjs").toEqual([]);
  });

  it("errors - every code the sources compare against is one something throws", () => {
    const thrown = new Set(scan.thrown.map((s) => s.code));
    const dangling = scan.compared.filter((s) => CODE_SHAPE.test(s.code) && !thrown.has(s.code)).map((s) => `${at(s)}: compares with ${s.code}, which nothing throws`);
    expect(dangling).toEqual([]);
  });

  it("errors - every catalogue entry is thrown somewhere (no dead entries)", () => {
    const thrown = new Set(scan.thrown.map((s) => s.code));
    const dead = entries.filter(([code]) => !thrown.has(code)).map(([code]) => `${code}: in the catalogue but nothing in services/*/src or packages/*/src throws it; remove it`);
    expect(dead).toEqual([]);
  });

  it("errors - each site's retryable agrees with the catalogue's default (or is decided at run time)", () => {
    const problems = scan.thrown
      .filter((s) => typeof s.retryable === "boolean" && isErrorCode(s.code) && CATALOGUE[s.code].retryable !== s.retryable && !RETRYABLE_VARIES[s.code])
      .map((s) => `${at(s)}: ${s.code} is thrown with retryable ${s.retryable}, the catalogue says ${String(!s.retryable)}`);
    expect(problems).toEqual([]);
    const varies = new Set(scan.thrown.filter((s) => typeof s.retryable === "boolean" && isErrorCode(s.code) && CATALOGUE[s.code].retryable !== s.retryable).map((s) => s.code));
    expect(Object.keys(RETRYABLE_VARIES).filter((code) => !varies.has(code)), "RETRYABLE_VARIES entries nothing needs any more").toEqual([]);
  });

  it("errors - each GatewayError's literal status is the catalogue's HTTP status for its code", () => {
    const problems = scan.thrown
      .filter((s) => s.status !== undefined && isErrorCode(s.code) && CATALOGUE[s.code].http !== s.status)
      .map((s) => `${at(s)}: ${s.code} is answered with ${s.status}, the catalogue says ${isErrorCode(s.code) ? CATALOGUE[s.code].http : "?"}`);
    expect(problems).toEqual([]);
    expect(scan.thrown.filter((s) => s.status !== undefined).length).toBeGreaterThan(20);
  });
});
