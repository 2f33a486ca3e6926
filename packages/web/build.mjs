#!/usr/bin/env node
// `make build` step for the web UI: `vite build` into packages/web/dist, only when an input changed.
//
//   node packages/web/build.mjs [--force]
//
// The inputs are the UI's sources (app/, index.html, vite.config.ts, package.json), @tack/client's
// sources and the versions of react, react-dom, vite and @vitejs/plugin-react; their SHA-256 is kept in
// dist/build-inputs.json, and a build whose inputs hash the same is skipped, like the service bundles.
import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";

const here = fileURLToPath(new URL(".", import.meta.url)).replace(/\/$/, "");
const root = join(here, "..", "..");
const dist = join(here, "dist");
const stampFile = join(dist, "build-inputs.json");
const force = process.argv.includes("--force");
const unknown = process.argv.slice(2).filter((a) => a !== "--force");
if (unknown.length > 0) {
  process.stderr.write(`web build: unknown argument ${JSON.stringify(unknown[0])}; usage: node packages/web/build.mjs [--force]\n`);
  process.exit(1);
}

function files(dir) {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    return entry.isDirectory() ? files(path) : [path];
  });
}

function inputsDigest() {
  const inputs = [
    ...files(join(here, "app")),
    join(here, "index.html"), join(here, "vite.config.ts"), join(here, "package.json"),
    ...files(join(root, "packages", "client", "src")),
    ...["react", "react-dom", "vite", "@vitejs/plugin-react"].map((name) => join(root, "node_modules", name, "package.json")),
  ].sort();
  const hash = createHash("sha256");
  for (const file of inputs) {
    hash.update(relative(root, file)).update("\0");
    hash.update(existsSync(file) && statSync(file).isFile() ? readFileSync(file) : "missing").update("\0");
  }
  return hash.digest("hex");
}

const started = performance.now();
const digest = inputsDigest();
let previous;
try {
  previous = JSON.parse(readFileSync(stampFile, "utf8")).inputs;
} catch {
  previous = undefined;
}
if (!force && previous === digest && existsSync(join(dist, "index.html"))) {
  process.stdout.write("web: packages/web/dist is up to date\n");
  process.exit(0);
}
try {
  const { build } = await import("vite");
  await build({ configFile: join(here, "vite.config.ts"), logLevel: "warn" });
} catch (error) {
  process.stderr.write(`web build: vite build of packages/web failed: ${error.message}\nfix the error above, then run make build again\n`);
  process.exit(1);
}
writeFileSync(stampFile, `${JSON.stringify({ inputs: digest, built_at: new Date().toISOString() }, null, 2)}\n`);
const bytes = files(dist).filter((f) => !f.endsWith("build-inputs.json")).reduce((n, f) => n + statSync(f).size, 0);
process.stdout.write(`web: built packages/web/dist (${Math.round(bytes / 1024)} KiB) in ${Math.round(performance.now() - started)} ms\n`);
