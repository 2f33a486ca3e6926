// Services meet only on the bus: no service's source imports another service's source, no package
// imports a service, and the CLI (packages/cli, its tests too) reaches services only through the bus
// and the packages. Code two of them need lives in a package (@tack/credentials, @tack/egress,
// @tack/skills-format, @tack/mcp-config, ...). Tests of a service may start other services to test it
// with them (services/*/test), so they are not checked here.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";

const ROOT = join(import.meta.dirname, "../..");

/** Every service: its folder under services/ and its package name (`@tack/tools-service`). */
function services(root: string): { dir: string; name: string }[] {
  return readdirSync(join(root, "services")).sort().flatMap((dir) => {
    try {
      const { name } = JSON.parse(readFileSync(join(root, "services", dir, "package.json"), "utf8")) as { name: string };
      return [{ dir, name }];
    } catch {
      return [];
    }
  });
}

function sources(dir: string): string[] {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return [];
  }
  return names.sort().flatMap((name) => {
    const path = join(dir, name);
    if (name === "node_modules" || name === "dist") return [];
    if (statSync(path).isDirectory()) return sources(path);
    return /\.(ts|tsx|mts|cts|js|mjs|cjs)$/.test(name) && !name.endsWith(".d.ts") ? [path] : [];
  });
}

/** What `file` (relative to the root) belongs to: a service's source, a package, the CLI; undefined when it is not checked. */
function ownerOf(file: string): { kind: "service"; service: string } | { kind: "package"; name: string } | undefined {
  const [top, name, part] = file.split("/");
  if (top === "services" && part === "src") return { kind: "service", service: name! };
  if (top === "packages" && (part === "src" || name === "cli")) return { kind: "package", name: name! };
  return undefined;
}

/**
 * The imports of `file` (its path relative to the root, `text` its source) that reach into a
 * service it does not belong to: a relative path into services/<other>/, or a service's package
 * name (`@tack/tools-service`, `@tack/tools-service/web-guard`). Each is `<file> imports <specifier> (services/<dir>)`.
 */
function crossServiceImports(file: string, text: string, known: readonly { dir: string; name: string }[]): string[] {
  const owner = ownerOf(file);
  if (!owner) return [];
  const found: string[] = [];
  for (const { fileName: specifier } of ts.preProcessFile(text, true, true).importedFiles) {
    let target: string | undefined;
    if (specifier.startsWith(".")) {
      const path = relative(ROOT, resolve(ROOT, dirname(file), specifier)).split(sep).join("/");
      const [top, dir] = path.split("/");
      if (top === "services" && dir) target = dir;
    } else {
      target = known.find((s) => specifier === s.name || specifier.startsWith(`${s.name}/`))?.dir;
    }
    if (target === undefined || (owner.kind === "service" && owner.service === target)) continue;
    found.push(`${file} imports ${specifier} (services/${target})`);
  }
  return found;
}

describe("boundaries between services", () => {
  const known = services(ROOT);

  it("boundaries - the checker finds relative paths, package names and subpaths into another service, in every import form", () => {
    const text = [
      'import { loadCredentials } from "@tack/llm-service";',
      'import { checkUrl } from "@tack/tools-service/web-guard";',
      'export { parseSkill } from "../../skills/src/parse.js";',
      'const lazy = await import("../../mcp/src/config.js");',
      'import { own } from "./own.js";',
      'const later = await import("../../tools/src/web/guard.js");',
      'import { Bus } from "@tack/bus";',
      '// import { x } from "@tack/gateway-service"; (a comment is no import)',
    ].join("\n");
    expect(crossServiceImports("services/mcp/src/http-guard.ts", text, known)).toEqual([
      "services/mcp/src/http-guard.ts imports @tack/llm-service (services/llm)",
      "services/mcp/src/http-guard.ts imports @tack/tools-service/web-guard (services/tools)",
      "services/mcp/src/http-guard.ts imports ../../skills/src/parse.js (services/skills)",
      "services/mcp/src/http-guard.ts imports ../../tools/src/web/guard.js (services/tools)",
    ]);
    // A package (the CLI above all) imports no service at all, its own tests included.
    expect(crossServiceImports("packages/cli/test/service-env.test.ts", 'import { keyVariable } from "../../../services/llm/src/credentials.js";', known)).toEqual([
      "packages/cli/test/service-env.test.ts imports ../../../services/llm/src/credentials.js (services/llm)",
    ]);
    expect(crossServiceImports("packages/cli/src/skill-install.ts", 'import { parseSkill } from "@tack/skills-service";', known)).toEqual([
      "packages/cli/src/skill-install.ts imports @tack/skills-service (services/skills)",
    ]);
    // A service's tests may start other services; a service's own source may use its own paths.
    expect(crossServiceImports("services/loop/test/rules.test.ts", 'import { listTools } from "@tack/tools-service";', known)).toEqual([]);
    expect(crossServiceImports("services/tools/src/index.ts", 'export { x } from "./web/fetch.js";', known)).toEqual([]);
  });

  it("boundaries - no service source, package or CLI file imports another service's source", () => {
    expect(known.map((s) => s.dir)).toContain("tools");
    const files = [
      ...known.flatMap((s) => sources(join(ROOT, "services", s.dir, "src"))),
      ...readdirSync(join(ROOT, "packages")).sort().flatMap((p) => (p === "cli" ? sources(join(ROOT, "packages", p)) : sources(join(ROOT, "packages", p, "src")))),
    ].map((path) => relative(ROOT, path).split(sep).join("/"));
    expect(files.length).toBeGreaterThan(100);
    const offending = files.flatMap((file) => crossServiceImports(file, readFileSync(join(ROOT, file), "utf8"), known));
    expect(offending, `move what both sides need into a package under packages/ (see docs/decisions/0026-shared-code-in-packages.md):\n${offending.join("\n")}`).toEqual([]);
  });
});
