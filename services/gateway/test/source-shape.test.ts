// The gateway's source stays typed and acyclic: its operations take the generated request
// messages (so type assertions stay few) and no two of its files import each other in a circle.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";

const SRC = join(import.meta.dirname, "../src");

/** The hand-written source files (gen/ left out), by file name. */
function sources(): Map<string, ts.SourceFile> {
  const files = new Map<string, ts.SourceFile>();
  for (const name of readdirSync(SRC)) {
    if (!name.endsWith(".ts")) continue;
    files.set(name, ts.createSourceFile(name, readFileSync(join(SRC, name), "utf8"), ts.ScriptTarget.Latest, true));
  }
  return files;
}

const isAssertion = (node: ts.Node): node is ts.AsExpression | ts.TypeAssertion => ts.isAsExpression(node) || ts.isTypeAssertionExpression(node);

/**
 * Every `x as T` and `<T>x` in a file: a chain (`x as unknown as T`) is one, and `as const` none
 * (it asserts nothing about a value's type).
 */
export function typeAssertions(file: ts.SourceFile): string[] {
  const found: string[] = [];
  const visit = (node: ts.Node) => {
    if (isAssertion(node) && !isAssertion(node.parent) && node.type.getText(file) !== "const") {
      const { line } = file.getLineAndCharacterOfPosition(node.getStart(file));
      found.push(`${file.fileName}:${line + 1}: as ${node.type.getText(file)}`);
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  return found;
}

/** The import graph among the files (type-only imports too: they tie the files' types together). */
export function importGraph(files: Map<string, ts.SourceFile>): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const [name, file] of files) {
    const targets: string[] = [];
    for (const statement of file.statements) {
      const from = (ts.isImportDeclaration(statement) || ts.isExportDeclaration(statement)) ? statement.moduleSpecifier : undefined;
      if (!from || !ts.isStringLiteral(from) || !from.text.startsWith("./")) continue;
      const target = from.text.slice(2).replace(/\.js$/, ".ts");
      if (files.has(target)) targets.push(target);
    }
    graph.set(name, targets);
  }
  return graph;
}

/** One cycle per strongly connected group of files that import each other, as a path `a → b → a`. */
export function cycles(graph: Map<string, string[]>): string[] {
  const found: string[] = [];
  const state = new Map<string, "open" | "done">();
  const stack: string[] = [];
  const visit = (node: string) => {
    state.set(node, "open");
    stack.push(node);
    for (const next of graph.get(node) ?? []) {
      if (state.get(next) === "open") found.push([...stack.slice(stack.indexOf(next)), next].join(" → "));
      else if (!state.has(next)) visit(next);
    }
    stack.pop();
    state.set(node, "done");
  };
  for (const node of [...graph.keys()].sort()) if (!state.has(node)) visit(node);
  return found;
}

describe("the gateway's source", () => {
  it("has at most 10 type assertions outside gen/ (operations take the generated messages)", () => {
    const all = [...sources().values()].flatMap(typeAssertions);
    expect(all.length, all.join("\n")).toBeLessThanOrEqual(10);
  });

  it("has no import cycle among its files", () => {
    expect(cycles(importGraph(sources()))).toEqual([]);
  });

  it("the cycle check finds a cycle", () => {
    expect(cycles(new Map([["a.ts", ["b.ts"]], ["b.ts", ["c.ts"]], ["c.ts", ["a.ts"]], ["d.ts", ["a.ts"]]]))).toEqual(["a.ts → b.ts → c.ts → a.ts"]);
  });
});
