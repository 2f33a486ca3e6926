// Unpacking an uploaded archive with bounds: the stream is decompressed here, checked entry by
// entry (TarGuard) and only then handed to tar running as the sandbox user, which writes the
// files. A limit, a rule or the clock stops it at once: tar is killed, the caller removes the tree.
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import type { Readable, Writable } from "node:stream";
import { createGunzip } from "node:zlib";
import { TackError } from "@tack/bus";
import { GuardLimitError, refused, TarGuard } from "./tar-guard.js";

/** Bounds of one unpack and who writes the files. */
export interface UnpackOptions {
  /** Most bytes of entry data; `bytesLimit` says in words which limit that is (for the refusal). */
  readonly maxBytes: number;
  readonly maxEntries: number;
  readonly timeoutMs: number;
  readonly uid: number;
  readonly gid: number;
  /** Makes the refusal for crossing `maxBytes` (the caller knows whether a quota or the per-archive limit bound it). */
  readonly bytesRefusal: (would: number) => TackError;
}

/** What an unpack wrote: bytes of entry data and entries. */
export interface Unpacked {
  readonly bytes: number;
  readonly entries: number;
}

/**
 * Unpacks `archive` (tar or tar.gz) into `dir`, which must exist and be empty. Throws a
 * TackError on a refused entry (`sandbox.archive_refused`), a limit (`sandbox.archive_too_large`
 * or the caller's `bytesRefusal`), the time limit, or tar failing (`sandbox.archive_failed`);
 * whatever was written by then is the caller's to remove.
 */
export async function unpackBounded(archive: Readable, dir: string, options: UnpackOptions): Promise<Unpacked> {
  const guard = new TarGuard({ bytes: options.maxBytes, entries: options.maxEntries });
  // Entered before the switch to the sandbox user (the directories above `dir` may be closed to that user).
  const tar = spawn("tar", ["-x", "--no-same-owner", "--no-same-permissions", "--no-overwrite-dir"], {
    cwd: dir, uid: options.uid, gid: options.gid, stdio: ["pipe", "ignore", "pipe"], env: { PATH: "/usr/bin:/bin", LC_ALL: "C" },
  });
  let stderr = "";
  tar.stderr!.on("data", (chunk: Buffer) => {
    if (stderr.length < 4096) stderr += chunk.toString("utf8");
  });
  const exited = exitOf(tar, () => stderr);
  exited.catch(() => undefined);
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    archive.destroy();
    tar.kill("SIGKILL");
  }, options.timeoutMs);
  let source: Readable | undefined;
  try {
    source = await decompressed(archive);
    const stdin = tar.stdin!;
    stdin.on("error", () => undefined);
    for await (const chunk of source) {
      for (const piece of guard.feed(chunk as Buffer)) await write(stdin, piece, exited);
      if (guard.ended) break;
    }
    await write(stdin, guard.finish(), exited);
    stdin.end();
    await exited;
    return { bytes: guard.bytes, entries: guard.entries };
  } catch (error) {
    tar.kill("SIGKILL");
    await exited.catch(() => undefined);
    if (timedOut) {
      throw new TackError("sandbox.archive_too_large", `the archive did not unpack within ${Math.round(options.timeoutMs / 1000)} s (workspaces.unpack_timeout_seconds); nothing was kept: upload a smaller archive`);
    }
    if (error instanceof GuardLimitError) {
      if (error.kind === "bytes") throw options.bytesRefusal(error.would);
      throw new TackError("sandbox.archive_too_large", `the archive holds more than ${options.maxEntries} entries (workspaces.max_entries); unpacking stopped there and nothing was kept: upload fewer files, or ask the operator to raise the limit`);
    }
    if (error instanceof TackError) throw error;
    if ((error as NodeJS.ErrnoException).code?.startsWith("Z_")) throw refused(`it is not a valid gzip stream (${(error as Error).message})`);
    throw error;
  } finally {
    clearTimeout(timer);
    source?.destroy();
    archive.destroy();
  }
}

// The archive's tar bytes: gunzipped when it starts with gzip's magic number.
async function decompressed(archive: Readable): Promise<Readable> {
  const head = await peek(archive, 2);
  if (head[0] !== 0x1f || head[1] !== 0x8b) return archive;
  const gunzip = createGunzip();
  archive.on("error", (error) => gunzip.destroy(error));
  return archive.pipe(gunzip);
}

// Writes with backpressure; fails if tar exits first.
async function write(stdin: Writable, piece: Buffer, exited: Promise<void>): Promise<void> {
  if (stdin.write(piece)) return;
  await Promise.race([once(stdin, "drain"), exited.then(() => {
    throw new TackError("sandbox.archive_failed", "could not unpack the archive: tar stopped reading before its end");
  })]);
}

// Resolves when tar exits 0; rejects quoting its stderr otherwise.
function exitOf(child: ChildProcess, stderr: () => string): Promise<void> {
  return new Promise((resolve, reject) => {
    child.once("error", (error) => reject(new TackError("sandbox.archive_failed", `could not unpack the archive: ${error.message}`)));
    child.once("close", (code, signal) => {
      if (code === 0) resolve();
      else reject(new TackError("sandbox.archive_failed", `could not unpack the archive: tar ${signal ? `was killed (${signal})` : `exited ${code}`}: ${stderr().trim().split("\n").slice(-3).join("; ")}`));
    });
  });
}

// Reads the first `n` bytes and puts them back, so the stream is still whole.
async function peek(stream: Readable, n: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const onReadable = () => {
      const chunk = stream.read() as Buffer | null;
      if (chunk === null) return;
      stream.off("readable", onReadable);
      stream.off("end", onEnd);
      stream.unshift(chunk);
      resolve(chunk.subarray(0, n));
    };
    const onEnd = () => resolve(Buffer.alloc(0));
    stream.on("readable", onReadable);
    stream.once("end", onEnd);
    stream.once("error", reject);
  });
}
