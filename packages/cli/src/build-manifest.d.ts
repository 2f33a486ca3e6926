// Types of build-manifest.js (plain JavaScript so that bin/tack.js can use it before anything is compiled).

/** An input's `[mtimeMs, size]` when the bundle was built. */
export type FileStamp = readonly [mtimeMs: number, size: number];

export interface BuildManifest {
  readonly version: number;
  readonly builtAt: string;
  /**
   * Bundle name (`cli`, `services/<service>`) → the file to run and every JavaScript file of the bundle (main
   * and chunks), relative to the build directory, and the files it was built from, relative to the checkout.
   */
  readonly entries: Readonly<Record<string, { readonly output: string; readonly outputs: readonly string[]; readonly inputs: Readonly<Record<string, FileStamp>> }>>;
}

/** Either the bundle to run, or why the sources must run through tsx instead. */
export type Freshness = { readonly file: string; readonly why?: undefined } | { readonly file?: undefined; readonly why: string };

export interface FreshnessOptions {
  /** The build directory (default `<checkout>/dist`). */
  readonly distDir?: string;
  /** `TACK_DEV=1` here forces tsx (default `process.env`). */
  readonly env?: NodeJS.ProcessEnv;
  /** The checkout the inputs are relative to (default this file's). */
  readonly root?: string;
}

export const MANIFEST_VERSION: number;
export const checkoutRoot: string;
export const defaultDistDir: string;
export function manifestPath(distDir: string): string;
export function readManifest(distDir: string): BuildManifest | undefined;
export function fileStamp(file: string): FileStamp | undefined;
export function compiledEntry(name: string, options?: FreshnessOptions): Freshness;
export function entryFreshness(manifest: BuildManifest, name: string, distDir: string, root?: string): Freshness;
