// Where `scripted:` and `replay:` files may come from and how they are read. A model reference
// arrives from API callers, so it must not become a way to read the llm host's files: only
// regular files inside the operator's script directories (after symlinks) are read, never more
// than the size cap, and no error ever quotes what a file holds.
import { constants, type Stats } from "node:fs";
import { lstat, open, realpath } from "node:fs/promises";
import { isAbsolute, join, normalize, resolve, sep } from "node:path";
import { TackError } from "@tack/bus";

/** The largest script or recording read when no cap is configured (the operator configuration's default too). */
export const DEFAULT_MAX_SCRIPT_BYTES = 4 * 1024 * 1024;

/** Which files the scripted and replay providers may read. */
export interface ScriptFileOptions {
  /** Absolute directories script files must be inside after symlinks; relative references are looked up in each, in order. */
  readonly scriptDirs: readonly string[];
  /** Largest file accepted, in bytes (default `DEFAULT_MAX_SCRIPT_BYTES`). */
  readonly maxScriptBytes?: number;
}

/** How errors name the files of one provider: `script` after `scripted:`, `recording` after `replay:`. */
export interface ScriptKind {
  readonly noun: "script" | "recording";
  readonly prefix: "scripted:" | "replay:";
}

// Reading a FIFO would block, and O_NONBLOCK makes open() return at once whatever the file is;
// O_NOFOLLOW refuses a symlink swapped in after the path was checked.
const OPEN_FLAGS = constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOFOLLOW;

/** Checks the options at service start: absolute directories and a positive whole cap; `llm.bad_options` otherwise. */
export function checkScriptFileOptions(options: ScriptFileOptions): void {
  for (const dir of options.scriptDirs) {
    if (!isAbsolute(dir)) throw new TackError("llm.bad_options", `script directory ${JSON.stringify(dir)} is not an absolute path; list absolute directories in models.script_dirs`);
  }
  const cap = options.maxScriptBytes;
  if (cap !== undefined && (!Number.isSafeInteger(cap) || cap < 1)) {
    throw new TackError("llm.bad_options", `the script size cap ${cap} is not a positive whole number of bytes; fix models.max_script_bytes`);
  }
}

/**
 * Reads script files for one provider, parsing each the first time and again whenever it
 * changes (device, inode, size or mtime), so an edited script is picked up without a
 * restart. `parse` gets the canonical path and the text; its errors must not quote the text.
 * Every refusal is `llm.bad_script` naming the file and what is wrong with it.
 */
export function scriptLoader<T>(options: ScriptFileOptions, kind: ScriptKind, parse: (file: string, text: string) => T): (reference: string) => Promise<{ file: string; value: T }> {
  checkScriptFileOptions(options);
  const maxBytes = options.maxScriptBytes ?? DEFAULT_MAX_SCRIPT_BYTES;
  const loaded = new Map<string, { version: string; value: T }>();
  return async (reference) => {
    const file = await locateScript(reference, options.scriptDirs, kind);
    const read = await readScript(file, maxBytes, kind, (version) => loaded.get(file)?.version === version);
    if (read.text === undefined) return { file, value: loaded.get(file)!.value };
    const value = parse(file, read.text);
    loaded.set(file, { version: read.version, value });
    return { file, value };
  };
}

/**
 * The canonical path of the file `reference` names, refused unless it is inside one of
 * `dirs` after symlinks. An absolute reference is taken as it is; a relative one is looked
 * up in each directory in order and may not climb out with `..`. A path outside every
 * directory is refused the same way whether or not it exists, so refusals say nothing about
 * the rest of the host.
 */
export async function locateScript(reference: string, dirs: readonly string[], kind: ScriptKind): Promise<string> {
  if (dirs.length === 0) {
    throw refusal(reference, "no_script_dirs", `${kind.noun} ${reference} cannot be read: no script directories are configured; list them in models.script_dirs of the operator configuration`);
  }
  if (reference.includes("\0")) throw refusal(reference, "bad_path", `${kind.noun} reference ${JSON.stringify(reference)} is not a valid path`);
  const canonicalDirs = await Promise.all(dirs.map(canonical));
  const inside = (path: string, among: readonly string[]) => among.some((dir) => isInside(path, dir));
  if (isAbsolute(reference)) {
    const path = resolve(reference);
    let real: string;
    try {
      real = await realpath(path);
    } catch (error) {
      // A missing file outside the directories gets the same answer as an existing one.
      if (!inside(path, [...dirs, ...canonicalDirs])) throw outside(kind, path, canonicalDirs);
      throw unreadable(kind, path, error);
    }
    if (!inside(real, canonicalDirs)) throw outside(kind, path, canonicalDirs, real !== path);
    return real;
  }
  const relative = normalize(reference);
  if (relative === ".." || relative.startsWith(`..${sep}`)) throw outside(kind, reference, canonicalDirs);
  for (const dir of canonicalDirs) {
    const path = join(dir, relative);
    let real: string;
    try {
      real = await realpath(path);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === "ENOENT" || code === "ENOTDIR") continue;
      throw unreadable(kind, path, error);
    }
    if (!inside(real, canonicalDirs)) throw outside(kind, path, canonicalDirs, true);
    return real;
  }
  throw refusal(reference, "not_found",
    `cannot read ${kind.noun} ${reference} (ENOENT): it is in none of the script directories (${canonicalDirs.join(", ")}); check the path after \`${kind.prefix}\``,
    { script_dirs: canonicalDirs.join(", ") });
}

/**
 * Reads the regular file at canonical path `file`: refused before reading when it is not a
 * regular file or larger than `maxBytes`, and never reading more than `maxBytes + 1` bytes
 * (a file that grows while read is refused too). `unchanged(version)` true skips the read
 * (`text` undefined) when the cached parse is still current.
 */
async function readScript(file: string, maxBytes: number, kind: ScriptKind, unchanged: (version: string) => boolean): Promise<{ version: string; text?: string }> {
  let before: Stats;
  try {
    before = await lstat(file);
  } catch (error) {
    throw unreadable(kind, file, error);
  }
  if (!before.isFile()) throw notRegular(kind, file, before);
  if (before.size > maxBytes) throw tooLarge(kind, file, String(before.size), maxBytes);
  let handle;
  try {
    handle = await open(file, OPEN_FLAGS);
  } catch (error) {
    throw unreadable(kind, file, error);
  }
  try {
    const info = await handle.stat();
    // What was opened must be what was checked: a file swapped in between is refused.
    if (!info.isFile()) throw notRegular(kind, file, info);
    if (info.dev !== before.dev || info.ino !== before.ino) {
      throw refusal(file, "changed", `${kind.noun} ${file} was replaced while it was being opened; try again`);
    }
    if (info.size > maxBytes) throw tooLarge(kind, file, String(info.size), maxBytes);
    const version = `${info.dev}:${info.ino}:${info.size}:${info.mtimeMs}`;
    if (unchanged(version)) return { version };
    // Read at most maxBytes + 1 bytes: one more than allowed shows a file that grew after fstat.
    const limit = maxBytes + 1;
    let buffer = Buffer.alloc(Math.min(info.size + 1, limit));
    let length = 0;
    for (;;) {
      if (length === buffer.length) {
        if (buffer.length === limit) break;
        const bigger = Buffer.alloc(Math.min(buffer.length * 2, limit));
        buffer.copy(bigger, 0, 0, length);
        buffer = bigger;
      }
      const { bytesRead } = await handle.read(buffer, length, buffer.length - length, length);
      if (bytesRead === 0) break;
      length += bytesRead;
    }
    if (length > maxBytes) throw tooLarge(kind, file, `more than ${maxBytes}`, maxBytes);
    return { version, text: buffer.toString("utf8", 0, length) };
  } catch (error) {
    if (error instanceof TackError) throw error;
    throw unreadable(kind, file, error);
  } finally {
    await handle.close();
  }
}

/** The directory with symlinks resolved; one that does not exist yet is kept as written (it may be created later). */
async function canonical(dir: string): Promise<string> {
  try {
    return await realpath(dir);
  } catch {
    return resolve(dir);
  }
}

function isInside(path: string, dir: string): boolean {
  return path === dir || path.startsWith(dir.endsWith(sep) ? dir : `${dir}${sep}`);
}

function refusal(file: string, reason: string, message: string, details: Record<string, string> = {}): TackError {
  return new TackError("llm.bad_script", message, { details: { file, reason, ...details } });
}

function outside(kind: ScriptKind, file: string, dirs: readonly string[], throughLink = false): TackError {
  // The link's target is not named: it is a path outside the directories.
  const where = throughLink ? "leads (through a symbolic link) outside" : "is outside";
  return refusal(file, "outside_script_dirs",
    `${kind.noun} ${file} ${where} the script directories (${dirs.join(", ")}); put the file in one of them, or add its directory to models.script_dirs of the operator configuration`,
    { script_dirs: dirs.join(", ") });
}

function unreadable(kind: ScriptKind, file: string, error: unknown): TackError {
  // Only the errno code: an fs message would be harmless, but a code is all the caller needs.
  const code = (error as NodeJS.ErrnoException | undefined)?.code ?? "unreadable";
  return refusal(file, "unreadable", `cannot read ${kind.noun} ${file} (${code}); check the path after \`${kind.prefix}\``, { errno: code });
}

function notRegular(kind: ScriptKind, file: string, info: Stats): TackError {
  const what = info.isDirectory() ? "a directory" : info.isFIFO() ? "a FIFO" : info.isCharacterDevice() ? "a character device"
    : info.isBlockDevice() ? "a block device" : info.isSocket() ? "a socket" : info.isSymbolicLink() ? "a symbolic link" : "not a regular file";
  return refusal(file, "not_regular_file", `${kind.noun} ${file} is not a regular file (it is ${what}); name a JSON file`, { file_type: what });
}

function tooLarge(kind: ScriptKind, file: string, size: string, maxBytes: number): TackError {
  return refusal(file, "too_large",
    `${kind.noun} ${file} is too large: ${size} bytes, the cap is ${maxBytes} bytes; shorten it or raise models.max_script_bytes`,
    { size_bytes: size, max_bytes: String(maxBytes) });
}
