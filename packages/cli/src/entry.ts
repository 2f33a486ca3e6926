// How a service process is started: the one place that knows where each service's entry point is.
// The compiled bundle from `make build` (dist/services/<name>/main.js) when it was built from the sources
// as they are now, else the TypeScript through tsx; TACK_DEV=1 always runs the TypeScript
// (decision docs/decisions/0011-compiled-javascript.md).
import { existsSync } from "node:fs";
import { join } from "node:path";
import { compiledEntry } from "./build-manifest.js";
import { repoRoot } from "./paths.js";

/** A service process's command line (run with cwd = the repository root). */
export interface ServiceCommand {
  readonly command: string;
  readonly args: readonly string[];
  /** The file that must exist for the command to work (checked before start, to fail with a clear message). */
  readonly entry: string;
  /** True when it runs the compiled bundle, false when it runs the TypeScript sources through tsx. */
  readonly compiled: boolean;
  /** Why the sources run through tsx (TACK_DEV=1, no build, a source changed since the build); undefined when compiled. */
  readonly why?: string;
  /** Environment the command adds to the service's own: where Node keeps the bundle's compiled code between starts. */
  readonly env: Readonly<Record<string, string>>;
}

/**
 * Where Node keeps the compiled code of the bundles between runs (module compile cache, decision 0023): in the
 * checkout, owned by whoever runs Tack, never a shared temporary directory another user could write into.
 */
export const compileCacheDir = join(repoRoot, ".tack", "compile-cache");

export interface ServiceCommandOptions {
  /** `TACK_DEV=1` here forces tsx (default `process.env`). */
  readonly env?: NodeJS.ProcessEnv;
  /** Where the build is (default `dist/` of this checkout). */
  readonly distDir?: string;
}

/**
 * The command that runs service `name`: `node dist/services/<name>/main.js` when that bundle is fresh
 * (every file it was built from is unchanged since), else `node --import tsx services/<name>/src/main.ts`.
 */
export function serviceCommand(name: string, options: ServiceCommandOptions = {}): ServiceCommand {
  const compiled = compiledEntry(`services/${name}`, { env: options.env, distDir: options.distDir, root: repoRoot });
  if (compiled.file) return { command: process.execPath, args: ["--enable-source-maps", compiled.file], entry: compiled.file, compiled: true, env: { NODE_COMPILE_CACHE: compileCacheDir } };
  const entry = join(repoRoot, "services", name, "src", "main.ts");
  return { command: process.execPath, args: ["--import", "tsx", entry], entry, compiled: false, why: compiled.why, env: {} };
}

/** True when the entry point of service `name` exists. */
export function hasServiceEntry(name: string, options: ServiceCommandOptions = {}): boolean {
  return existsSync(serviceCommand(name, options).entry);
}
