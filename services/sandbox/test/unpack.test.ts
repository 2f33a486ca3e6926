// Bounded unpacking of managed workspace archives (issue 18, item 2): bombs stop at the limit
// with nothing written past it, entries that break a rule are refused by name, a tenant's
// max_workspace_bytes holds, and a refusal leaves no directory behind. Drives the service's
// ManagedWorkspaces directly over real NATS (the object store); needs no Docker.
import { execFileSync } from "node:child_process";
import { chownSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { gzipSync } from "node:zlib";
import { Objm } from "@nats-io/obj";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Bus, TackError } from "@tack/bus";
import { compileOperatorConfig, type OperatorConfig } from "@tack/config";
import { removeNamespace } from "@tack/testkit";
import { unpackBounded } from "../src/unpack.js";
import { ManagedWorkspaces } from "../src/workspaces.js";
import { NATS_URL, uniqueNamespace } from "./helpers.js";

const MiB = 1024 * 1024;

/** One archive entry for `craftTar` (Python's tarfile writes entries GNU tar would not). */
type Entry = { name: string; content?: string; size?: number; type?: "dir" | "symlink" | "hardlink" | "chr" | "fifo"; link?: string; mode?: number };

/** A tar archive (POSIX pax format) made with Python's tarfile; `size` alone gives that many zero bytes. */
function craftTar(entries: Entry[]): Buffer {
  const program = `
import io, json, sys, tarfile
out = io.BytesIO()
types = {"dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE, "chr": tarfile.CHRTYPE, "fifo": tarfile.FIFOTYPE}
with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
    for e in json.loads(sys.argv[1]):
        info = tarfile.TarInfo(e["name"])
        info.mode = e.get("mode", 0o755 if e.get("type") == "dir" else 0o644)
        if "type" in e:
            info.type = types[e["type"]]
            info.linkname = e.get("link", "")
            if e["type"] == "chr":
                info.devmajor, info.devminor = 1, 3
            tar.addfile(info)
        else:
            data = e["content"].encode() if "content" in e else bytes(e.get("size", 0))
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
sys.stdout.buffer.write(out.getvalue())
`;
  return execFileSync("python3", ["-c", program, JSON.stringify(entries)], { maxBuffer: 512 * MiB });
}

/** Disk blocks in use under `dir`, in bytes (sparse holes take none). */
function diskUsage(dir: string): number {
  return Number(execFileSync("du", ["-s", "--block-size=1", dir]).toString().split("\t")[0]);
}

describe("bounded unpacking of workspace archives", () => {
  const namespace = uniqueNamespace();
  let work: string;
  let managedDir: string;
  let bus: Bus;
  let sparseBomb: { gnu: Buffer; posix: Buffer; plain: Buffer };
  let seq = 0;

  /** A ManagedWorkspaces on the test namespace with the given limits. */
  async function workspaces(limits: { workspaces?: Record<string, unknown>; tenant?: Record<string, unknown> } = {}): Promise<{ ws: ManagedWorkspaces; operator: OperatorConfig }> {
    const operator = compileOperatorConfig(
      { tenants: { acme: { workspace_roots: [work], ...limits.tenant } }, workspaces: { dir: managedDir, ...limits.workspaces } },
      { stateDir: join(work, "state"), baseDir: work, source: "test" },
    );
    return { ws: await ManagedWorkspaces.open(bus, operator), operator };
  }

  /** Uploads `archive` to the object store and creates a workspace from it; the error (as TackError) or the result. */
  async function create(ws: ManagedWorkspaces, archive: Buffer | undefined): Promise<{ id: string; result?: { path: string; bytes: number }; error?: TackError }> {
    const id = `ws_${++seq}`;
    let archiveObject = "";
    if (archive) {
      archiveObject = `acme.${id}.upload`;
      const store = await new Objm(bus.nc).open(bus.names.workspacesBucket);
      await store.putBlob({ name: archiveObject }, archive);
    }
    try {
      const result = await ws.create({ tenant: "acme", workspaceId: id, archiveObject });
      return { id, result: { path: result.path, bytes: Number(result.bytes) } };
    } catch (error) {
      return { id, error: TackError.from(error) };
    }
  }

  /** What is left in the tenant's managed directory (after a refusal: only the workspaces that were made). */
  const tenantDir = () => join(managedDir, "acme");
  const left = () => readdirSync(tenantDir());

  beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), "tack-unpack-"));
    managedDir = join(work, "managed");
    mkdirSync(managedDir);
    bus = await Bus.connect({ url: NATS_URL, namespace, name: "unpack-test" });
    // The bomb of the report: a 2 GB sparse file with a few real blocks, packed with --sparse (GNU and POSIX formats).
    const src = join(work, "bomb-src");
    mkdirSync(src);
    execFileSync("bash", ["-c", "truncate -s 2G big.bin && printf 'data' | dd of=big.bin bs=1 seek=1000000000 conv=notrunc status=none"], { cwd: src });
    sparseBomb = {
      gnu: execFileSync("tar", ["--sparse", "--format=gnu", "-czf", "-", "big.bin"], { cwd: src, maxBuffer: 64 * MiB }),
      posix: execFileSync("tar", ["--sparse", "--format=posix", "-czf", "-", "big.bin"], { cwd: src, maxBuffer: 64 * MiB }),
      // The same kind of bomb without --sparse: 64 MiB of zeros (GNU tar reads the holes as zeros) in a few dozen KB.
      plain: execFileSync("bash", ["-c", "truncate -s 64M zeros.bin && tar -czf - zeros.bin"], { cwd: src, maxBuffer: 64 * MiB }),
    };
    rmSync(src, { recursive: true, force: true });
  }, 120_000);

  afterAll(async () => {
    await removeNamespace(bus.nc, namespace).catch(() => undefined);
    await bus?.close();
    rmSync(work, { recursive: true, force: true });
  });

  it("unpack - a tar.gz of a 2 GB sparse file is refused at its header: nothing written, no directory left", async () => {
    const { ws } = await workspaces();
    for (const archive of [sparseBomb.gnu, sparseBomb.posix]) {
      expect(archive.length).toBeLessThan(MiB);
      const before = diskUsage(managedDir);
      const { error } = await create(ws, archive);
      expect(error?.code).toBe("sandbox.archive_refused");
      expect(error?.message).toMatch(/sparse/);
      expect(error?.message).toContain("big.bin");
      // At most the tenant's own directory, made on its first workspace.
      expect(diskUsage(managedDir) - before).toBeLessThanOrEqual(4096);
      expect(left()).toEqual([]);
    }
  });

  it("unpack - a zeros bomb stops at workspaces.max_unpacked_bytes: disk use never goes past the limit, nothing is kept", async () => {
    const { ws } = await workspaces({ workspaces: { max_unpacked_bytes: 2 * MiB } });
    const before = diskUsage(managedDir);
    let peak = before;
    const sampler = setInterval(() => (peak = Math.max(peak, diskUsage(managedDir))), 5);
    const { error } = await create(ws, sparseBomb.plain);
    clearInterval(sampler);
    expect(error?.code).toBe("sandbox.archive_too_large");
    expect(error?.message).toContain("workspaces.max_unpacked_bytes");
    // The 64 MiB entry is refused at its header: not one byte of it reaches the disk (a few directory blocks may).
    expect(peak - before).toBeLessThan(64 * 1024);
    expect(left()).toEqual([]);
  });

  it("unpack - an archive with more entries than workspaces.max_entries stops at the limit and leaves nothing", async () => {
    const { ws } = await workspaces({ workspaces: { max_entries: 50 } });
    const { error } = await create(ws, craftTar(Array.from({ length: 400 }, (_, i) => ({ name: `f${i}.txt`, content: "x" }))));
    expect(error?.code).toBe("sandbox.archive_too_large");
    expect(error?.message).toContain("more than 50 entries (workspaces.max_entries)");
    expect(left()).toEqual([]);
    // At the limit is fine.
    const ok = await create(ws, craftTar(Array.from({ length: 50 }, (_, i) => ({ name: `f${i}.txt`, content: "x" }))));
    expect(ok.error).toBeUndefined();
    expect(readdirSync(ok.result!.path)).toHaveLength(50);
    rmSync(ok.result!.path, { recursive: true });
  });

  it("unpack - hard links, device files, fifos, absolute and `..` names, names through a link and links leading out are refused by name", async () => {
    const { ws } = await workspaces();
    const cases: Array<[Entry[], RegExp]> = [
      [[{ name: "a.txt", content: "a" }, { name: "hard", type: "hardlink", link: "a.txt" }], /"hard" is a hard link/],
      [[{ name: "null", type: "chr" }], /"null" is a device file/],
      [[{ name: "pipe", type: "fifo" }], /"pipe" is a fifo/],
      [[{ name: "ok.txt", content: "ok" }, { name: "/etc/abs.txt", content: "x" }], /"\/etc\/abs.txt" has an absolute name/],
      [[{ name: "ok.txt", content: "ok" }, { name: "sub/../../up.txt", content: "x" }], /"sub\/..\/..\/up.txt" climbs out with \.\./],
      [[{ name: "ok.txt", content: "ok" }, { name: "d", type: "dir" }, { name: "d/link", type: "symlink", link: "." }, { name: "d/link/x.txt", content: "x" }], /"d\/link\/x.txt" lies through the symlink "d\/link"/],
      [[{ name: "out", type: "symlink", link: "/tmp" }], /"out" -> "\/tmp" points to an absolute path/],
      [[{ name: "d", type: "dir" }, { name: "d/out", type: "symlink", link: "../.." }], /"d\/out" -> "..\/.." leads outside/],
      // Each link stays inside on its own; followed through the other, `t` climbs out.
      [[{ name: "t", type: "symlink", link: "d/s/.." }, { name: "d", type: "dir" }, { name: "d/s", type: "symlink", link: ".." }], /"t" -> "d\/s\/.." leads outside/],
      [[{ name: "l", type: "symlink", link: "x" }, { name: "l", content: "replaced" }], /replaces the symlink "l"/],
    ];
    for (const [entries, message] of cases) {
      const { error } = await create(ws, craftTar(entries));
      expect(error?.code, JSON.stringify(entries)).toBe("sandbox.archive_refused");
      expect(error?.message).toMatch(message);
      expect(error?.message).toContain("nothing was created");
      expect(left(), JSON.stringify(entries)).toEqual([]);
    }
    // Not a tar at all.
    const junk = await create(ws, gzipSync(Buffer.from("just some text, not a tar archive\n".repeat(40))));
    expect(junk.error?.code).toBe("sandbox.archive_refused");
    expect(junk.error?.message).toMatch(/checksum/);
    expect(left()).toEqual([]);
  });

  it("unpack - a good archive unpacks: files, directories, inside links; set-id bits cleared; owned by the sandbox user", async () => {
    const { ws } = await workspaces();
    const archive = craftTar([
      { name: "./", type: "dir" },
      { name: "src", type: "dir" },
      { name: "src/main.py", content: "print('hi')\n" },
      { name: "run", content: "#!/bin/sh\n", mode: 0o4755 },
      { name: "latest", type: "symlink", link: "src/main.py" },
      { name: "src/up", type: "symlink", link: "../run" },
      { name: `deep/${"n".repeat(120)}/file.txt`, content: "long name" },
    ]);
    const { result, error } = await create(ws, gzipSync(archive));
    expect(error).toBeUndefined();
    const path = result!.path;
    expect(execFileSync("cat", [join(path, "latest")]).toString()).toBe("print('hi')\n");
    expect(statSync(join(path, "run")).mode & 0o7777).toBe(0o755);
    expect(statSync(join(path, "src", "main.py")).uid).toBe(1000);
    expect(execFileSync("cat", [join(path, "deep", "n".repeat(120), "file.txt")]).toString()).toBe("long name");
    expect(result!.bytes).toBeGreaterThanOrEqual(12 + 10 + 9);
    rmSync(path, { recursive: true });
  });

  it("unpack - the tenant's max_workspace_bytes holds across workspaces (sandbox.workspace_quota naming it), and nothing is kept", async () => {
    const { ws } = await workspaces({ tenant: { max_workspace_bytes: 3 * MiB } });
    const first = await create(ws, craftTar([{ name: "one.bin", size: 2 * MiB }]));
    expect(first.error).toBeUndefined();
    const second = await create(ws, craftTar([{ name: "two.bin", size: 2 * MiB }]));
    expect(second.error?.code).toBe("sandbox.workspace_quota");
    expect(second.error?.message).toContain(`at most ${3 * MiB} bytes (max_workspace_bytes)`);
    expect(second.error?.message).toMatch(/delete a workspace/);
    expect(left()).toEqual([first.id]);
    // A small one still fits.
    const small = await create(ws, craftTar([{ name: "small.txt", content: "small" }]));
    expect(small.error).toBeUndefined();
    rmSync(first.result!.path, { recursive: true });
    rmSync(small.result!.path, { recursive: true });
  });

  it("unpack - an archive that takes longer than the time limit is stopped: tar is killed and the refusal says which limit", async () => {
    const archive = craftTar(Array.from({ length: 30 }, (_, i) => ({ name: `f${i}.txt`, content: "x".repeat(1000) })));
    // An archive that trickles in: 1 KiB every 100 ms, about 4 s in all.
    const slow = Readable.from((async function* () {
      for (let at = 0; at < archive.length; at += 1024) {
        await new Promise((r) => setTimeout(r, 100));
        yield archive.subarray(at, at + 1024);
      }
    })());
    const dir = mkdtempSync(join(work, "slow-"));
    chownSync(dir, 1000, 1000);
    const started = Date.now();
    const error = await unpackBounded(slow, dir, {
      maxBytes: MiB, maxEntries: 100, timeoutMs: 1000, uid: 1000, gid: 1000, bytesRefusal: () => new TackError("sandbox.archive_too_large", "bytes"),
    }).then(() => undefined, (e: unknown) => TackError.from(e));
    expect(Date.now() - started).toBeLessThan(2500);
    expect(error?.code).toBe("sandbox.archive_too_large");
    expect(error?.message).toContain("did not unpack within 1 s (workspaces.unpack_timeout_seconds)");
    expect(readdirSync(dir).length).toBeLessThan(30);
  });
});
