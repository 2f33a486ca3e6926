#!/usr/bin/env node
// The `tack` executable: runs the compiled CLI (dist/cli/main.js from `make build`) when it was built from
// the sources as they are now, else the TypeScript CLI through tsx, as always with TACK_DEV=1
// (decision docs/decisions/0011-compiled-javascript.md).
import module from "node:module";
import { pathToFileURL } from "node:url";
import { compiledEntry } from "../src/build-manifest.js";

const compiled = compiledEntry("cli");
if (compiled.file) {
  // Node 22+ keeps the compiled code of the bundle between runs (absent on Node 20: nothing happens).
  module.enableCompileCache?.();
  // Stack traces point into the TypeScript sources; the maps are read only when asked for.
  if (process.env.TACK_DEBUG) process.setSourceMapsEnabled(true);
  await import(pathToFileURL(compiled.file).href);
} else {
  const { register } = await import("tsx/esm/api");
  register();
  await import("../src/main.ts");
}
