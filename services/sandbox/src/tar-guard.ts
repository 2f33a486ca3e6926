// The rules an uploaded tar archive is held to before tar sees any of it. The guard reads the
// uncompressed stream header by header (512-byte blocks) and hands on only what it checked, so
// tar never gets an entry that breaks a rule nor a byte past a limit: a bomb stops where the
// limit is, not after it was written out.
import { TackError } from "@tack/bus";

const BLOCK = 512;
// PAX and GNU long-name records are metadata: a megabyte is far more than any real name needs.
const MAX_META_BYTES = 1 << 20;
// A real entry is preceded by at most a pax header and GNU long name/link records.
const MAX_META_RUN = 4;
// Symlinks followed while resolving one link's target; more is a loop (ELOOP in the sandbox), not an escape.
const MAX_HOPS = 40;

/** What one archive may unpack to. */
export interface GuardLimits {
  /** Most bytes of entry data (file contents, and the archive's own metadata records). */
  readonly bytes: number;
  /** Most entries (files, directories, symlinks). */
  readonly entries: number;
}

/** Thrown when a limit would be crossed; the caller names the limit that bound it. */
export class GuardLimitError extends Error {
  readonly kind: "bytes" | "entries";
  /** Where the count would have been with the refused entry. */
  readonly would: number;
  constructor(kind: "bytes" | "entries", would: number, entry: string) {
    super(`entry ${JSON.stringify(entry)} would take the archive to ${would} ${kind === "bytes" ? "bytes" : "entries"}`);
    this.name = "GuardLimitError";
    this.kind = kind;
    this.would = would;
  }
}

type Meta = "x" | "g" | "L" | "K";

/**
 * Reads an uncompressed tar stream and passes on only entries that keep the rules: regular
 * files, directories and symlinks whose names are relative without `..`, that do not lie
 * through (or replace) a symlink of the archive, and symlinks whose targets, followed through
 * the archive's other links, stay inside. Sparse files, hard links, devices and fifos are
 * refused. Set-id and sticky bits are cleared on the way. `feed` returns the bytes to hand to
 * tar; `finish` the end-of-archive blocks. Refusals are `sandbox.archive_refused`; limits throw
 * `GuardLimitError` before the entry's header is passed on.
 */
export class TarGuard {
  /** Bytes of entry data passed on so far. */
  bytes = 0;
  /** Entries (not counting metadata records) passed on so far. */
  entries = 0;
  /** True once the end-of-archive block was read; nothing after it is passed on. */
  ended = false;
  readonly #limits: GuardLimits;
  #header = Buffer.alloc(0);
  // Data (with padding) of the current entry still to pass on.
  #left = 0;
  #capture: { kind: Meta; size: number; chunks: Buffer[]; got: number } | undefined;
  #next: { path?: string; linkpath?: string; size?: number } = {};
  #metaRun = 0;
  #current = "";
  readonly #links = new Map<string, string>();

  constructor(limits: GuardLimits) {
    this.#limits = limits;
  }

  /** Checks the next piece of the stream; returns what may go on to tar (possibly nothing yet). */
  feed(chunk: Buffer): Buffer[] {
    const out: Buffer[] = [];
    let offset = 0;
    while (offset < chunk.length && !this.ended) {
      if (this.#left > 0) {
        const n = Math.min(this.#left, chunk.length - offset);
        const piece = chunk.subarray(offset, offset + n);
        if (this.#capture) {
          this.#capture.chunks.push(piece);
          this.#capture.got += n;
        }
        out.push(piece);
        this.#left -= n;
        offset += n;
        if (this.#left === 0 && this.#capture) this.#endCapture();
        continue;
      }
      const take = Math.min(BLOCK - this.#header.length, chunk.length - offset);
      this.#header = Buffer.concat([this.#header, chunk.subarray(offset, offset + take)]);
      offset += take;
      if (this.#header.length < BLOCK) continue;
      const header = this.#header;
      this.#header = Buffer.alloc(0);
      out.push(...this.#entry(header));
    }
    return out;
  }

  /** The end of the stream: refuses a truncated archive and links that lead outside; returns the end-of-archive blocks. */
  finish(): Buffer {
    if (!this.ended && (this.#left > 0 || this.#header.length > 0)) {
      throw refused(`the archive ends inside entry ${JSON.stringify(this.#current)} (truncated upload?)`);
    }
    for (const [path, target] of this.#links) {
      if (this.#escapes(path, target)) throw refused(`the symlink ${JSON.stringify(path)} -> ${JSON.stringify(target)} leads outside the workspace (through the archive's other links)`);
    }
    return Buffer.alloc(2 * BLOCK);
  }

  // One 512-byte header: checked, and passed on (with its set-id bits cleared) or refused.
  #entry(header: Buffer): Buffer[] {
    if (header.every((byte) => byte === 0)) {
      if (this.#metaRun > 0) throw refused(`the archive ends right after a metadata record for ${JSON.stringify(this.#current)}`);
      this.ended = true;
      return [];
    }
    checkChecksum(header);
    const type = String.fromCharCode(header[156]!);
    const size = this.#next.size ?? number(header, 124, 12, "size");
    const name = this.#next.path ?? headerName(header);
    this.#current = name;
    if (type === "x" || type === "g" || type === "L" || type === "K") {
      if (++this.#metaRun > MAX_META_RUN) throw refused(`more than ${MAX_META_RUN} metadata records in a row before ${JSON.stringify(name)}`);
      if (size > MAX_META_BYTES) throw refused(`a metadata record of ${size} bytes before ${JSON.stringify(name)} (at most ${MAX_META_BYTES})`);
      this.#charge(size, name);
      this.#startData(size);
      if (size === 0) this.#applyMeta(type, Buffer.alloc(0));
      else this.#capture = { kind: type, size, chunks: [], got: 0 };
      return [header];
    }
    this.#metaRun = 0;
    const linkpath = this.#next.linkpath ?? field(header, 157, 100);
    this.#next = {};
    const kind = entryKind(type, name);
    const path = relativeName(name);
    if (path === "" && kind !== "directory") throw refused(`an entry with an empty name (${JSON.stringify(name)})`);
    this.#checkNotThroughLink(path, name);
    if (kind === "symlink") this.#checkLink(path, linkpath);
    if (++this.entries > this.#limits.entries) throw new GuardLimitError("entries", this.entries, name);
    this.#charge(size, name);
    this.#startData(size);
    return [withoutSetId(header)];
  }

  #charge(size: number, name: string): void {
    if (this.bytes + size > this.#limits.bytes) throw new GuardLimitError("bytes", this.bytes + size, name);
    this.bytes += size;
  }

  #startData(size: number): void {
    this.#left = Math.ceil(size / BLOCK) * BLOCK;
  }

  #endCapture(): void {
    const capture = this.#capture!;
    this.#capture = undefined;
    this.#applyMeta(capture.kind, Buffer.concat(capture.chunks).subarray(0, capture.size));
  }

  // What a metadata record says about the next entry (GNU long names, pax `path`, `linkpath`, `size`).
  #applyMeta(kind: Meta, data: Buffer): void {
    if (kind === "L" || kind === "K") {
      const end = data.indexOf(0);
      const text = data.subarray(0, end === -1 ? data.length : end).toString("utf8");
      if (kind === "L") this.#next.path = text;
      else this.#next.linkpath = text;
      return;
    }
    const records = paxRecords(data);
    for (const [key, value] of records) {
      if (key.startsWith("GNU.sparse.")) throw refused(`a sparse file (pax ${key}) before ${JSON.stringify(this.#current)}: sparse files are not unpacked; pack the project without --sparse`);
      if (kind === "g" && (key === "path" || key === "linkpath" || key === "size")) {
        throw refused(`a global pax header sets ${key}, which would apply to every entry; pack the project with an ordinary tar`);
      }
      if (key === "path") this.#next.path = value;
      else if (key === "linkpath") this.#next.linkpath = value;
      else if (key === "size") {
        if (!/^\d{1,16}$/.test(value) || !Number.isSafeInteger(Number(value))) throw refused(`a pax size ${JSON.stringify(value)} that is not a byte count`);
        this.#next.size = Number(value);
      }
    }
  }

  #checkNotThroughLink(path: string, name: string): void {
    const parts = path === "" ? [] : path.split("/");
    for (let i = 1; i <= parts.length; i++) {
      const prefix = parts.slice(0, i).join("/");
      if (!this.#links.has(prefix)) continue;
      throw refused(i === parts.length
        ? `the entry ${JSON.stringify(name)} replaces the symlink ${JSON.stringify(prefix)} made earlier in the archive; links are never replaced`
        : `the entry ${JSON.stringify(name)} lies through the symlink ${JSON.stringify(prefix)}; nothing is written through a link`);
    }
  }

  #checkLink(path: string, target: string): void {
    if (target === "") throw refused(`the symlink ${JSON.stringify(path)} has an empty target`);
    if (target.startsWith("/")) throw refused(`the symlink ${JSON.stringify(path)} -> ${JSON.stringify(target)} points to an absolute path, outside the workspace; use a relative target`);
    if (this.#escapes(path, target)) throw refused(`the symlink ${JSON.stringify(path)} -> ${JSON.stringify(target)} leads outside the workspace`);
    this.#links.set(path, target);
  }

  // Follows `target` from the link's directory, through the archive's links known so far; true when it climbs above the root.
  #escapes(path: string, target: string): boolean {
    const stack = path.split("/").slice(0, -1);
    const queue = target.split("/");
    let hops = 0;
    while (queue.length > 0) {
      const part = queue.shift()!;
      if (part === "" || part === ".") continue;
      if (part === "..") {
        if (stack.length === 0) return true;
        stack.pop();
        continue;
      }
      stack.push(part);
      const link = this.#links.get(stack.join("/"));
      if (link === undefined) continue;
      if (++hops > MAX_HOPS) return false;
      if (link.startsWith("/")) return true;
      stack.pop();
      queue.unshift(...link.split("/"));
    }
    return false;
  }
}

/** An archive entry broke a rule: `sandbox.archive_refused` naming it. */
export function refused(what: string): TackError {
  return new TackError("sandbox.archive_refused", `the archive was refused: ${what}; nothing was created`);
}

function entryKind(type: string, name: string): "file" | "directory" | "symlink" {
  switch (type) {
    case "0":
    case "\0":
    case "7":
      // Old (V7) archives mark directories by a trailing slash only.
      return type === "\0" && name.endsWith("/") ? "directory" : "file";
    case "5":
      return "directory";
    case "2":
      return "symlink";
    case "1":
      throw refused(`the entry ${JSON.stringify(name)} is a hard link; hard links are not unpacked (pack the project with --hard-dereference)`);
    case "3":
    case "4":
      throw refused(`the entry ${JSON.stringify(name)} is a device file; only files, directories and symlinks are unpacked`);
    case "6":
      throw refused(`the entry ${JSON.stringify(name)} is a fifo; only files, directories and symlinks are unpacked`);
    case "S":
      throw refused(`the entry ${JSON.stringify(name)} is a sparse file; sparse files are not unpacked (pack the project without --sparse)`);
    default:
      throw refused(`the entry ${JSON.stringify(name)} has type ${JSON.stringify(type)}; only files, directories and symlinks are unpacked`);
  }
}

// The entry's name relative to the workspace ("" for the root itself); absolute names and `..` are refused.
function relativeName(name: string): string {
  if (name.startsWith("/")) throw refused(`the entry ${JSON.stringify(name)} has an absolute name; archive the project with relative names (tar -C <dir> -c .)`);
  const parts = name.split("/").filter((part) => part !== "" && part !== ".");
  if (parts.includes("..")) throw refused(`the entry ${JSON.stringify(name)} climbs out with ..; archive the project with relative names (tar -C <dir> -c .)`);
  return parts.join("/");
}

function headerName(header: Buffer): string {
  const name = field(header, 0, 100);
  // POSIX ustar keeps the leading part of long names in `prefix`; GNU's format uses those bytes otherwise.
  const ustar = header.subarray(257, 263).toString("latin1") === "ustar\0";
  const prefix = ustar ? field(header, 345, 155) : "";
  return prefix ? `${prefix}/${name}` : name;
}

function field(header: Buffer, offset: number, length: number): string {
  const bytes = header.subarray(offset, offset + length);
  const end = bytes.indexOf(0);
  return bytes.subarray(0, end === -1 ? length : end).toString("utf8");
}

// A numeric header field: octal text, or GNU's base-256 for large values.
function number(header: Buffer, offset: number, length: number, what: string): number {
  const bytes = header.subarray(offset, offset + length);
  if (bytes[0]! & 0x80) {
    if (bytes[0] === 0xff) throw refused(`a negative ${what} in a header`);
    let value = bytes[0]! & 0x7f;
    for (const byte of bytes.subarray(1)) {
      value = value * 256 + byte;
      if (!Number.isSafeInteger(value)) throw refused(`a ${what} too large to be real in a header`);
    }
    return value;
  }
  const text = bytes.toString("latin1").replace(/\0.*$/s, "").trim();
  if (text === "") return 0;
  if (!/^[0-7]+$/.test(text)) throw refused(`a ${what} field ${JSON.stringify(text)} that is not an octal number (is it a tar file?)`);
  const value = parseInt(text, 8);
  if (!Number.isSafeInteger(value)) throw refused(`a ${what} too large to be real in a header`);
  return value;
}

function checkChecksum(header: Buffer): void {
  const stored = number(header, 148, 8, "checksum");
  let unsigned = 0;
  let signed = 0;
  for (let i = 0; i < BLOCK; i++) {
    const byte = i >= 148 && i < 156 ? 0x20 : header[i]!;
    unsigned += byte;
    signed += byte > 127 ? byte - 256 : byte;
  }
  if (stored !== unsigned && stored !== signed) throw refused("a header's checksum does not match (it is not a tar or tar.gz file, or it is damaged)");
}

// The header with set-uid, set-gid and sticky bits cleared and its checksum redone.
function withoutSetId(header: Buffer): Buffer {
  const text = header.subarray(100, 108).toString("latin1").replace(/\0.*$/s, "").trim();
  if (!/^[0-7]+$/.test(text)) return header;
  const mode = parseInt(text, 8);
  if ((mode & 0o7000) === 0) return header;
  const copy = Buffer.from(header);
  copy.write(`${(mode & 0o777).toString(8).padStart(7, "0")}\0`, 100, 8, "latin1");
  copy.fill(0x20, 148, 156);
  let sum = 0;
  for (const byte of copy) sum += byte;
  copy.write(`${sum.toString(8).padStart(6, "0")}\0 `, 148, 8, "latin1");
  return copy;
}

// `<length> <key>=<value>\n` records of a pax header.
function paxRecords(data: Buffer): Array<[string, string]> {
  const records: Array<[string, string]> = [];
  let offset = 0;
  while (offset < data.length) {
    if (data[offset] === 0) break;
    const space = data.indexOf(0x20, offset);
    const length = space === -1 ? NaN : Number(data.subarray(offset, space).toString("latin1"));
    if (!Number.isSafeInteger(length) || length <= space - offset || offset + length > data.length) throw refused("a pax header that is not well-formed");
    const record = data.subarray(space + 1, offset + length - 1).toString("utf8");
    const equals = record.indexOf("=");
    if (equals <= 0) throw refused("a pax header that is not well-formed");
    records.push([record.slice(0, equals), record.slice(equals + 1)]);
    offset += length;
  }
  return records;
}
