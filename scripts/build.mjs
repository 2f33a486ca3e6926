#!/usr/bin/env node
// `make build`: bundles the CLI and every service into dist/ with esbuild, so that they start as plain
// JavaScript (tsx stays for development: TACK_DEV=1). Decision: docs/decisions/0011-compiled-javascript.md.
//
//   node scripts/build.mjs [--outdir DIR] [--force]
//
// One bundle per entry point: packages/cli/src/main.ts → cli/main.js, services/<name>/src/main.ts →
// services/<name>/main.js (ESM, for the Node of .node-version, with a linked source map). The workspace packages (@tack/*) are
// bundled in; every npm package stays external and is loaded from node_modules at run time (native
// modules such as better-sqlite3 and dynamic requires keep working). In every bundled module
// `import.meta.url`, `import.meta.dirname` and `import.meta.filename` mean its source file, as under tsx,
// so files read next to a module (prompts, tool descriptions, idmap.py, the sandbox agent) and paths
// computed from it (the checkout root) stay right without copying anything. The bundles therefore run
// inside this checkout (with its node_modules), wherever DIR is. Lazy imports (`await import(...)`) stay
// lazy (code splitting: chunks next to main.js), and `import { X } from "@tack/pkg"` is pointed at the
// module of the package that defines X, so that a bundle loads only the modules (and npm packages) it uses.
//
// Incremental: <DIR>/manifest.json records each bundle's inputs (mtime and size); a bundle whose inputs
// are unchanged is not rebuilt (--force rebuilds everything). packages/cli/src/build-manifest.js reads the
// same manifest to decide whether `tack` and the services it starts may run the bundles.
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { builtinModules } from "node:module";
import { basename, dirname, extname, isAbsolute, join, relative, resolve, sep } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { MANIFEST_VERSION, entryFreshness, fileStamp, manifestPath, readManifest } from "../packages/cli/src/build-manifest.js";

const root = fileURLToPath(new URL("..", import.meta.url)).replace(/\/$/, "");
const started = performance.now();
// A reader that went away (`make build | head`) is not an error.
process.stdout.on("error", (error) => {
  if (error.code === "EPIPE") process.exit(0);
  throw error;
});

/** Prints what was wrong and how to fix it, then exits 1. */
function fail(message) {
  process.stderr.write(`build: ${message}\n`);
  process.exit(1);
}

function parseArgs(argv) {
  const options = { outdir: join(root, "dist"), force: false };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === "--force") options.force = true;
    else if (arg === "--outdir" || arg.startsWith("--outdir=")) {
      const value = arg === "--outdir" ? argv[++i] : arg.slice("--outdir=".length);
      if (!value) fail("--outdir needs a directory, e.g. --outdir dist");
      options.outdir = resolve(value);
    } else if (arg === "--help" || arg === "-h") {
      process.stdout.write("usage: node scripts/build.mjs [--outdir DIR] [--force]\n  bundles the CLI and every service into DIR (default dist/); unchanged bundles are kept\n");
      process.exit(0);
    } else fail(`unknown argument ${JSON.stringify(arg)}; usage: node scripts/build.mjs [--outdir DIR] [--force]`);
  }
  return options;
}

const options = parseArgs(process.argv.slice(2));
const outdir = options.outdir;
const shown = (path) => (relative(process.cwd(), path).startsWith("..") ? path : relative(process.cwd(), path) || ".");

/** Every bundle: its manifest name, source entry point and output path (relative to the build directory). */
function entryPoints() {
  const entries = [{ name: "cli", source: "packages/cli/src/main.ts", output: "cli/main.js" }];
  for (const service of readdirSync(join(root, "services")).sort()) {
    if (fileStamp(join(root, "services", service, "src", "main.ts"))) {
      entries.push({ name: `services/${service}`, source: `services/${service}/src/main.ts`, output: `services/${service}/main.js` });
    }
  }
  return entries;
}

/** package.json of the root and of each workspace package: they steer resolution and list what stays external. */
function packageJsonFiles() {
  const files = ["package.json"];
  for (const dir of ["packages", "services"]) {
    for (const name of readdirSync(join(root, dir)).sort()) {
      if (fileStamp(join(root, dir, name, "package.json"))) files.push(`${dir}/${name}/package.json`);
    }
  }
  return files;
}

/** npm packages the code may import: the dependencies of the root and of every workspace package. */
function declaredDependencies(files) {
  const names = new Set();
  for (const file of files) {
    const pkg = JSON.parse(readFileSync(join(root, file), "utf8"));
    for (const name of Object.keys(pkg.dependencies ?? {})) names.add(name);
  }
  return names;
}

/** The npm package a bare import names: `@scope/name/sub` → `@scope/name`, `name/sub` → `name`. */
function packageOf(specifier) {
  const parts = specifier.split("/");
  return specifier.startsWith("@") ? parts.slice(0, 2).join("/") : parts[0];
}

const builtins = new Set(builtinModules);
const packageFiles = packageJsonFiles();
const dependencies = declaredDependencies(packageFiles);
// Files every bundle depends on besides its sources: the build itself and what steers resolution.
const buildFiles = ["scripts/build.mjs", "packages/cli/src/build-manifest.js", "tsconfig.json", ".node-version", ...packageFiles];
// The syntax the bundles may use: that of the pinned Node's major (decision 0023).
const nodeTarget = `node${readFileSync(join(root, ".node-version"), "utf8").trim().split(".")[0]}`;

/** A module-relative URL path of `rel` (a path relative to the checkout), each segment encoded. */
const urlPath = (rel) => rel.split(sep).map(encodeURIComponent).join("/");

/** `import.meta.url|dirname|filename` of the module at `rel`, in terms of the banner's `__tackRoot`. */
function rewriteImportMeta(contents, rel) {
  const source = `new URL(${JSON.stringify(urlPath(rel))}, __tackRoot)`;
  return contents.replace(/\bimport\.meta\.(url|dirname|filename)\b/g, (_, what) => {
    if (what === "url") return `${source}.href`;
    if (what === "filename") return `__tackFileURLToPath(${source})`;
    return `__tackFileURLToPath(new URL(".", ${source})).replace(/\\/$/, "")`;
  });
}

const REEXPORT = /^\s*export\s+(type\s+)?\{([^}]*)\}\s+from\s+["']([^"']+)["']\s*;?/gm;
const COMMENTS = /\/\*[\s\S]*?\*\/|^\s*\/\/.*$/gm;

/**
 * What an @tack/* package's index.ts re-exports: exported name → [module specifier, name there], or undefined
 * when the index is not a pure barrel (anything but `export { … } from`, e.g. `export *` or code).
 */
function barrelExports(file) {
  const code = readFileSync(file, "utf8").replace(COMMENTS, "");
  if (code.replace(REEXPORT, "").trim() !== "") return undefined;
  const names = new Map();
  for (const [, typeOnly, list, from] of code.matchAll(REEXPORT)) {
    if (typeOnly) continue;
    for (const spec of list.split(",").map((s) => s.trim()).filter(Boolean)) {
      if (spec.startsWith("type ")) continue;
      const [local, exported = local] = spec.split(/\s+as\s+/);
      names.set(exported, [from, local]);
    }
  }
  return names;
}

const IMPORT_FROM_PACKAGE = /\bimport\s+\{([^}]*)\}\s+from\s+["'](@tack\/[\w-]+)["']\s*;?/g;

/**
 * Imports of names from an @tack/* package rewritten to the modules that define them, e.g.
 * `import { TackError } from "@tack/bus"` → `import { TackError } from "<checkout>/packages/bus/src/errors.ts"`:
 * a bundle then loads only the modules it uses, not every module of the package and their npm imports
 * (`tack run` needs TackError, not the NATS client). Statements it cannot map are left as they are.
 */
async function importsFromDefiningModules(b, contents, resolveDir, barrels, inputs) {
  const statements = [...contents.matchAll(IMPORT_FROM_PACKAGE)];
  if (statements.length === 0) return contents;
  const replacements = new Map();
  for (const [statement, list, pkg] of statements) {
    const index = await b.resolve(pkg, { kind: "import-statement", resolveDir });
    if (index.errors.length > 0 || index.external) continue;
    if (!barrels.has(index.path)) {
      // The index is an input like any source: a change to what it re-exports makes the bundle stale.
      const stamp = fileStamp(index.path);
      barrels.set(index.path, barrelExports(index.path));
      if (stamp) inputs[relative(root, index.path)] = stamp;
    }
    const exports = barrels.get(index.path);
    if (!exports) continue;
    const byModule = new Map();
    let mapped = true;
    for (const spec of list.split(",").map((s) => s.trim()).filter(Boolean)) {
      if (spec.startsWith("type ")) continue;
      const [name, alias = name] = spec.split(/\s+as\s+/);
      const target = exports.get(name);
      if (!target) {
        mapped = false;
        break;
      }
      const module = isAbsolute(target[0]) || !target[0].startsWith(".") ? target[0] : join(dirname(index.path), target[0]);
      byModule.set(module, [...(byModule.get(module) ?? []), target[1] === alias ? alias : `${target[1]} as ${alias}`]);
    }
    if (!mapped) continue;
    replacements.set(statement, [...byModule].map(([module, names]) => `import { ${names.join(", ")} } from ${JSON.stringify(module)};`).join(" "));
  }
  return contents.replace(IMPORT_FROM_PACKAGE, (statement) => replacements.get(statement) ?? statement);
}

const LOADERS = { ".ts": "ts", ".mts": "ts", ".cts": "ts", ".js": "js", ".mjs": "js", ".cjs": "js", ".json": "json" };

/**
 * The plugin: @tack/* bundled, other packages external, sources loaded with their stamps recorded, import.meta
 * rewritten and imports from @tack/* packages pointed at the modules that define the names.
 */
function tackPlugin(inputs) {
  return {
    name: "tack",
    setup(b) {
      const barrels = new Map();
      b.onResolve({ filter: /^[^./]/ }, (args) => {
        if (args.kind === "entry-point" || args.path.startsWith("@tack/")) return undefined;
        if (args.path.startsWith("node:") || builtins.has(args.path)) return { external: true };
        const name = packageOf(args.path);
        if (!dependencies.has(name)) {
          return {
            errors: [{
              text: `${relative(root, args.importer)} imports ${JSON.stringify(args.path)}, but ${name} is not in the dependencies of package.json or of any workspace package; ` +
                `add it to the package that uses it (npm install ${name} -w <workspace>) so that it is installed where the bundle runs`,
            }],
          };
        }
        return { external: true };
      });
      b.onLoad({ filter: /\.(?:[cm]?[jt]s|json)$/ }, async (args) => {
        const rel = relative(root, args.path);
        if (rel.startsWith("..") || rel.split(sep).includes("node_modules")) {
          return { errors: [{ text: `${args.path} is outside the checkout's sources; only @tack/* workspace code is bundled, npm packages stay external` }] };
        }
        // Stamp before reading: a file that changes while the build runs is newer than its stamp, so the bundle counts as stale.
        const stamp = fileStamp(args.path);
        let text = await readFile(args.path, "utf8");
        if (stamp) inputs[rel] = stamp;
        if (text.includes("import.meta")) text = rewriteImportMeta(text, rel);
        if (text.includes("@tack/")) text = await importsFromDefiningModules(b, text, dirname(args.path), barrels, inputs);
        return { contents: text, loader: LOADERS[extname(args.path)] ?? "default", resolveDir: dirname(args.path) };
      });
    },
  };
}

/** Writes `contents` to `file` through a temporary file, so that a running `tack` never reads half a bundle. */
function writeAtomically(file, contents) {
  mkdirSync(dirname(file), { recursive: true });
  const temporary = join(dirname(file), `.${basename(file)}.${process.pid}.tmp`);
  writeFileSync(temporary, contents);
  renameSync(temporary, file);
}

async function bundle(entry) {
  const t0 = performance.now();
  const outfile = join(outdir, entry.output);
  const inputs = {};
  for (const file of buildFiles) {
    const stamp = fileStamp(join(root, file));
    if (stamp) inputs[file] = stamp;
  }
  // From the bundle's own URL to the checkout: module-relative URLs are resolved against this.
  const up = relative(dirname(outfile), root).split(sep).map(encodeURIComponent).join("/");
  const result = await build({
    absWorkingDir: root,
    entryPoints: { main: join(root, entry.source) },
    outdir: dirname(outfile),
    // Modules the code imports lazily (`await import(...)`) stay lazy: they become chunks next to main.js.
    splitting: true,
    chunkNames: "[name]-[hash]",
    bundle: true,
    format: "esm",
    platform: "node",
    target: nodeTarget,
    sourcemap: "linked",
    sourcesContent: false,
    metafile: true,
    write: false,
    logLevel: "silent",
    banner: {
      js: [
        `// Built by scripts/build.mjs from ${entry.source}; do not edit (\`make build\`, or TACK_DEV=1 to run the sources).`,
        `import { fileURLToPath as __tackFileURLToPath } from "node:url";`,
        `const __tackRoot = new URL(${JSON.stringify(up ? `${up}/` : "./")}, import.meta.url);`,
      ].join("\n"),
    },
    plugins: [tackPlugin(inputs)],
  }).catch((error) => {
    const messages = (error.errors ?? []).map((e) => `  ${e.location ? `${e.location.file}:${e.location.line}: ` : ""}${e.text}`);
    fail(`${entry.source} did not bundle:\n${messages.join("\n") || `  ${error.message}`}`);
  });
  for (const file of result.outputFiles) writeAtomically(file.path, file.contents);
  const size = result.outputFiles.find((file) => file.path === outfile)?.contents.length ?? 0;
  // Every JavaScript file of the bundle (main.js and its lazily loaded chunks), relative to the build directory.
  const outputs = result.outputFiles.map((file) => relative(outdir, file.path)).filter((file) => file.endsWith(".js")).sort();
  return { entry, inputs, outputs, size, ms: performance.now() - t0 };
}

const entries = entryPoints();
const previous = options.force ? undefined : readManifest(outdir);
const stale = [];
const lines = [];
for (const entry of entries) {
  const freshness = previous ? entryFreshness(previous, entry.name, outdir, root) : { why: "no build yet" };
  if (freshness.file) lines.push({ entry, text: "up to date" });
  else stale.push(entry);
}
// esbuild is loaded only when there is something to build: an up-to-date check stays quick.
const { build } = stale.length > 0 ? await import("esbuild") : {};
const built = await Promise.all(stale.map(bundle));
for (const { entry, inputs, size, ms } of built) {
  lines.push({ entry, text: `${(size / 1024).toFixed(0).padStart(5)} kB  ${String(Object.keys(inputs).length).padStart(3)} inputs  ${ms.toFixed(0)} ms` });
}

const manifest = {
  version: MANIFEST_VERSION,
  builtAt: new Date().toISOString(),
  entries: Object.fromEntries(entries.map((entry) => {
    const fresh = built.find((b) => b.entry === entry);
    return [entry.name, fresh ? { output: entry.output, outputs: fresh.outputs, inputs: fresh.inputs } : previous.entries[entry.name]];
  })),
};
// Written last: until it names them, the new bundles are not used.
writeAtomically(manifestPath(outdir), `${JSON.stringify(manifest, null, 1)}\n`);

// Chunks of earlier builds (their names carry a content hash) go once no process started before could still load them.
const PRUNE_AFTER_MS = 60 * 60 * 1000;
for (const { entry, outputs } of built) {
  const dir = dirname(join(outdir, entry.output));
  const current = new Set(outputs.flatMap((file) => [basename(file), `${basename(file)}.map`]));
  for (const name of readdirSync(dir)) {
    if (current.has(name) || !/^[\w-]+-[A-Z0-9]{8}\.js(\.map)?$/.test(name)) continue;
    const file = join(dir, name);
    if (Date.now() - statSync(file).mtimeMs > PRUNE_AFTER_MS) rmSync(file, { force: true });
  }
}

const width = Math.max(...entries.map((entry) => shown(join(outdir, entry.output)).length));
for (const entry of entries) {
  const line = lines.find((l) => l.entry === entry);
  process.stdout.write(`build: ${shown(join(outdir, entry.output)).padEnd(width)}  ${line.text}\n`);
}
process.stdout.write(`build: ${built.length} of ${entries.length} bundles built in ${((performance.now() - started) / 1000).toFixed(2)} s → ${shown(outdir)}/ (TACK_DEV=1 runs the TypeScript through tsx instead)\n`);
