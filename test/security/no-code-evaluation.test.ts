// Decision 0020: no service evaluates code it did not ship. Model-written programs (run_code),
// defined tools, hooks and MCP stdio servers run in the session's sandbox container; regular
// expressions from models or repositories go to a linear-time engine. This test reads every
// source file the services and packages run and fails on any way of turning a string into code in
// the service's own process (eval, Function, vm, worker threads, computed imports). What is shipped
// into the sandbox to run there is listed by name, and checked to be only ever started there.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = join(import.meta.dirname, "../..");

/** Files that run inside a sandbox container, never in a service (each with the place that starts it there). */
const RUNS_IN_THE_SANDBOX: Readonly<Record<string, { startedBy: string; how: RegExp }>> = {
  "services/tools/src/modes/code-runner.cjs": { startedBy: "services/tools/src/modes/program.ts", how: /options\.spawn\(\s*\[\s*"node"/ },
};

/** Ways of making code out of a string (or of loading code chosen at run time) in a Node process. */
const EVALUATION = [
  { name: "the vm module", pattern: /["'](node:)?vm["']/ },
  { name: "eval", pattern: /(^|[^\w.$])eval\s*\)?\s*\(/ },
  { name: "the Function constructor", pattern: /\bnew\s+Function\s*\(|(^|[^\w.$])Function\s*\(\s*["'`]/ },
  { name: "worker threads", pattern: /["'](node:)?worker_threads["']/ },
  { name: "a computed dynamic import", pattern: /(^|[^\w.$#])import\(\s*[^\s"'`)]/ },
  { name: "a computed require", pattern: /(^|[^\w.$#])require\(\s*[^\s"'`)]/ },
  { name: "string timers", pattern: /\bset(Timeout|Interval|Immediate)\(\s*["'`]/ },
];

function sources(dir: string): string[] {
  const found: string[] = [];
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (name === "node_modules" || name === "gen" || name === "dist") continue;
    if (statSync(path).isDirectory()) found.push(...sources(path));
    else if (/\.(ts|mts|cts|js|mjs|cjs)$/.test(name) && !name.endsWith(".d.ts")) found.push(path);
  }
  return found;
}

/** The source files that run in a service or the CLI: every service's and package's src/ (the web UI runs in a browser). */
function serviceSources(): string[] {
  const roots = [
    ...readdirSync(join(ROOT, "services")).map((name) => join(ROOT, "services", name, "src")),
    ...readdirSync(join(ROOT, "packages")).filter((name) => name !== "web").map((name) => join(ROOT, "packages", name, "src")),
  ];
  return roots.flatMap((root) => {
    try {
      return sources(root);
    } catch {
      return [];
    }
  });
}

/** The code of a file without its comments (a comment may name what it avoids). */
function code(text: string): string {
  return text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/(^|[^:"'`\\])\/\/.*$/gm, "$1");
}

describe("no code evaluation in services", () => {
  it("no code evaluation in services - no service or package source turns a string into code", () => {
    const files = serviceSources();
    expect(files.length).toBeGreaterThan(200);
    const offences: string[] = [];
    for (const file of files) {
      const path = relative(ROOT, file);
      if (RUNS_IN_THE_SANDBOX[path]) continue;
      const lines = code(readFileSync(file, "utf8")).split("\n");
      lines.forEach((line, index) => {
        for (const { name, pattern } of EVALUATION) if (pattern.test(line)) offences.push(`${path}:${index + 1}: ${name}: ${line.trim()}`);
      });
    }
    expect(offences, "a service may not evaluate code it did not ship; run it in the session's sandbox (decision 0020)").toEqual([]);
  });

  it("no code evaluation in services - what runs in the sandbox is started only there, by the file that ships it", () => {
    for (const [file, { startedBy, how }] of Object.entries(RUNS_IN_THE_SANDBOX)) {
      const name = file.split("/").pop()!;
      const users = serviceSources().filter((f) => !f.endsWith(name) && readFileSync(f, "utf8").includes(name)).map((f) => relative(ROOT, f));
      expect(users, `${file} is read by`).toEqual([startedBy]);
      expect(code(readFileSync(join(ROOT, startedBy), "utf8"))).toMatch(how);
    }
  });

  it("no code evaluation in services - the check finds each way of evaluating a string", () => {
    const samples = [
      'import vm from "node:vm";', "const f = eval(text);", "(0, eval)(text)", "new Function(body)()", 'Function("return this")()',
      'import { Worker } from "node:worker_threads";', "await import(modulePath)", "require(name)", 'setTimeout("alert(1)", 1)',
    ];
    for (const sample of samples) expect(EVALUATION.some(({ pattern }) => pattern.test(code(sample))), sample).toBe(true);
    const innocent = ['await import("./local.js")', 'require("node:fs")', "evaluate(x)", "medieval(x)", "// eval(x) is what we avoid", "obj.eval(x)"];
    for (const sample of innocent) expect(EVALUATION.some(({ pattern }) => pattern.test(code(sample))), sample).toBe(false);
  });
});
