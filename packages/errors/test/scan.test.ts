import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { scanCodes, sourceFiles, type ScanResult } from "./scan.js";

// A miniature repository holding every way a code reaches a TackError, for the scan to find.
const FILES: Record<string, string> = {
  "packages/bus/src/errors.ts": `
export class TackError extends Error {
  readonly code: string;
  readonly retryable: boolean;
  constructor(code: string, message: string, options: { retryable?: boolean; cause?: unknown } = {}) {
    super(message);
    this.code = code;
    this.retryable = options.retryable ?? false;
  }
  static from(error: unknown, code = "internal"): TackError {
    return error instanceof TackError ? error : new TackError(code, String(error));
  }
}
`,
  "services/demo/src/gateway-error.ts": `
import { TackError } from "../../../packages/bus/src/errors.js";
export class GatewayError extends TackError {
  constructor(status: number, code: string, message: string) {
    super(code, message, { retryable: status >= 500 });
  }
}
`,
  "services/demo/src/helpers.ts": `
import { TackError } from "../../../packages/bus/src/errors.js";
export function fail(code: string): TackError {
  return new TackError(code, "failed");
}
export function invalidOptions(service: string): TackError {
  return new TackError(\`\${service}.invalid_options\`, "bad options");
}
`,
  "services/demo/src/a.ts": `
import { TackError } from "../../../packages/bus/src/errors.js";
import { GatewayError } from "./gateway-error.js";
import { fail, invalidOptions } from "./helpers.js";
const CODE = "demo.const";
class Sub extends TackError {
  constructor() {
    super("demo.sub", "sub", { retryable: true });
  }
}
export function all(flag: boolean, err: TackError, x: number): unknown[] {
  const [status, code] = flag ? [400, "demo.first"] : [404, "demo.second"];
  if (err.code === "demo.compared") return [];
  return [
    new TackError("demo.literal", "m"),
    new TackError(flag ? "demo.yes" : "demo.no", "m", { retryable: true }),
    new TackError(CODE, "m", { retryable: flag }),
    fail("demo.helper"),
    invalidOptions("demo"),
    new GatewayError(status, code, "m"),
    new GatewayError(503, "demo.gateway", "m"),
    new Sub(),
    TackError.from(err, "demo.wrapped"),
    { code: "demo.wire", message: "m" },
    new TackError(err.code, "passed on"),
    new TackError(String(x), "unknowable"),
  ];
}
`,
};

/** The 1-based line of `snippet` in a fixture file. */
function lineOf(path: string, snippet: string): number {
  return FILES[path]!.split("\n").findIndex((line) => line.includes(snippet)) + 1;
}
const A = "services/demo/src/a.ts";

describe("errors - the static scan", () => {
  let root: string;
  let scan: ScanResult;
  beforeAll(() => {
    root = mkdtempSync(join(tmpdir(), "tack-errors-scan-"));
    for (const [path, text] of Object.entries(FILES)) {
      mkdirSync(dirname(join(root, path)), { recursive: true });
      writeFileSync(join(root, path), text);
    }
    scan = scanCodes(root, sourceFiles(root));
  }, 60_000);
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it("errors - scan follows literals, conditionals, consts, destructuring, parameters, templates, subclasses, from() and wire objects", () => {
    const codes = [...new Set(scan.thrown.map((s) => s.code))].sort();
    expect(codes).toEqual([
      "demo.const", "demo.first", "demo.gateway", "demo.helper", "demo.invalid_options", "demo.literal", "demo.no", "demo.second",
      "demo.sub", "demo.wire", "demo.wrapped", "demo.yes", "internal",
    ]);
    // Each code is placed where its text is written.
    expect(scan.thrown.find((s) => s.code === "demo.helper")).toMatchObject({ file: A, line: lineOf(A, 'fail("demo.helper")'), via: "new TackError", retryable: false });
    expect(scan.thrown.find((s) => s.code === "demo.first")).toMatchObject({ file: A, line: lineOf(A, '"demo.first"') });
    // A code built by a template is placed at the template.
    const helpers = "services/demo/src/helpers.ts";
    expect(scan.thrown.find((s) => s.code === "demo.invalid_options")).toMatchObject({ file: helpers, line: lineOf(helpers, ".invalid_options`") });
  });

  it("errors - scan reads retryable and a GatewayError's status at each site", () => {
    const site = (code: string) => scan.thrown.find((s) => s.code === code);
    expect(site("demo.literal")?.retryable).toBe(false);
    expect(site("demo.yes")?.retryable).toBe(true);
    expect(site("demo.const")?.retryable).toBe("dynamic");
    expect(site("demo.sub")?.retryable).toBe(true);
    expect(site("demo.wrapped")?.retryable).toBe(false);
    expect(site("demo.gateway")).toMatchObject({ status: 503, retryable: true, via: "new GatewayError" });
    expect(site("demo.first")?.status).toBeUndefined();
  });

  it("errors - scan names file:line of a code it cannot follow, and lets an existing error's code pass", () => {
    expect(scan.unresolved).toEqual([expect.objectContaining({
      file: A, line: lineOf(A, "String(x)"), text: "String(x)", reason: `${A}:${lineOf(A, "String(x)")}: String(x) is a CallExpression, not a string literal, a const or a parameter`,
    })]);
    expect(scan.compared).toEqual([expect.objectContaining({ code: "demo.compared", file: A, line: lineOf(A, '"demo.compared"') })]);
  });
});
