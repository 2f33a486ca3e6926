#!/usr/bin/env node
// The `tack` executable: runs the compiled CLI (dist/cli/main.js from `make build`) when it was built from
// the sources as they are now, else the TypeScript CLI through tsx, as always with TACK_DEV=1
// (decision docs/decisions/0011-compiled-javascript.md).
import { existsSync, readFileSync } from "node:fs";
import module from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";
import { compiledEntry } from "../src/build-manifest.js";

// Once `make` brought the Node of .node-version (decision 0023), the npm packages' native modules are built for
// its major: another one would fail later, on the first service that loads them.
const root = fileURLToPath(new URL("../../../", import.meta.url));
const pinned = readFileSync(`${root}.node-version`, "utf8").trim();
if (existsSync(`${root}.tack/node/bin/node`) && process.versions.node.split(".")[0] !== pinned.split(".")[0]) {
  process.stderr.write(`tack: this is Node ${process.versions.node}; Tack runs on Node ${pinned} (.node-version), the one its npm packages were built for: run ${root}.tack/node/bin/node ${root}packages/cli/bin/tack.js, or put ${root}.tack/node/bin first on PATH\n`);
  process.exit(1);
}

const compiled = compiledEntry("cli");
if (compiled.file) {
  // Node keeps the compiled code of the bundle between runs, in the checkout (services/cli: packages/cli/src/entry.ts).
  module.enableCompileCache?.(`${root}.tack/compile-cache`); // absent before Node 22
  // Stack traces point into the TypeScript sources; the maps are read only when asked for.
  if (process.env.TACK_DEBUG) process.setSourceMapsEnabled(true);
  await import(pathToFileURL(compiled.file).href);
} else {
  const { register } = await import("tsx/esm/api");
  register();
  await import("../src/main.ts");
}
