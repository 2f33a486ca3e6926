// The compiled build (`make build`, scripts/build.mjs) and when it may be run: plain JavaScript, so that
// bin/tack.js can decide before anything is compiled. `dist/manifest.json` records, for each bundle, every
// file it was built from with that file's mtime and size; a bundle is fresh while all of them are unchanged.
import { readFileSync, statSync } from "node:fs";
import { isAbsolute, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** Version of `manifest.json`'s format; a manifest of another version is treated as no build. */
export const MANIFEST_VERSION = 1;

/** Absolute path of the repository root (this file is packages/cli/src/build-manifest.js). */
export const checkoutRoot = fileURLToPath(new URL("../../../", import.meta.url)).replace(/\/$/, "");

/** Where `make build` writes the bundles. */
export const defaultDistDir = join(checkoutRoot, "dist");

/** The manifest's path in a build directory. */
export function manifestPath(distDir) {
  return join(distDir, "manifest.json");
}

/** The manifest of `distDir`, or undefined when there is none (or one this code does not understand). */
export function readManifest(distDir) {
  let manifest;
  try {
    manifest = JSON.parse(readFileSync(manifestPath(distDir), "utf8"));
  } catch {
    return undefined;
  }
  if (manifest?.version !== MANIFEST_VERSION || typeof manifest.entries !== "object" || manifest.entries === null) return undefined;
  return manifest;
}

/** The mtime and size of `file` as the manifest records them, or undefined when it does not exist. */
export function fileStamp(file) {
  const stat = statSync(file, { throwIfNoEntry: false });
  return stat ? [stat.mtimeMs, stat.size] : undefined;
}

/**
 * Whether bundle `name` (`cli` or `services/<service>`) of `distDir` was built from the files as they are now.
 * Cheap: one small JSON file and one stat per input. Resolves to `{ file }` (the bundle to run) or
 * `{ why }` (a sentence saying why not). `TACK_DEV=1` in `env` always answers `{ why }`.
 */
export function compiledEntry(name, { distDir = defaultDistDir, env = process.env, root = checkoutRoot } = {}) {
  if (env.TACK_DEV === "1") return { why: "TACK_DEV=1 runs the TypeScript sources through tsx" };
  const manifest = readManifest(distDir);
  if (!manifest) return { why: `there is no build in ${distDir}; \`make build\` makes one` };
  return entryFreshness(manifest, name, distDir, root);
}

/** `compiledEntry` for a manifest already read. */
export function entryFreshness(manifest, name, distDir, root = checkoutRoot) {
  const entry = manifest.entries[name];
  if (!entry || typeof entry.output !== "string" || typeof entry.inputs !== "object") {
    return { why: `the build in ${distDir} has no ${name}; \`make build\` makes it` };
  }
  const file = join(distDir, entry.output);
  for (const output of [entry.output, ...(Array.isArray(entry.outputs) ? entry.outputs : [])]) {
    if (!fileStamp(join(distDir, output))) return { why: `${join(distDir, output)} is missing; \`make build\` makes it` };
  }
  for (const [input, recorded] of Object.entries(entry.inputs)) {
    const now = fileStamp(isAbsolute(input) ? input : resolve(root, input));
    if (!now) return { why: `${input}, which ${name} was built from, is gone; \`make build\` brings the build up to date` };
    if (now[0] !== recorded[0] || now[1] !== recorded[1]) {
      return { why: `${input} changed since ${name} was built; \`make build\` brings the build up to date` };
    }
  }
  return { file };
}
