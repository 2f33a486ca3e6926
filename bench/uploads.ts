// Upload bombs for `make bench` (part `uploads`): a 9 MB tar.gz of a 2 GB sparse file sent to
// POST /v1/workspaces of an in-process gateway and sandbox service, packed with --sparse (a
// sparse entry: refused at its header) and without (2 GB of mostly zeros in the stream: stopped
// at the limit). While each upload runs, the disk blocks under the managed workspaces root are
// sampled; `upload_bomb_bytes_written` is the largest growth seen.
// Alone: `npx tsx bench/uploads.ts` prints the JSON (NATS_URL, default nats://127.0.0.1:4222).
import { execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { compileOperatorConfig } from "@tack/config";
import { startGateway } from "@tack/gateway-service";
import { startSandboxService } from "@tack/sandbox-service";
import { removeNamespace } from "@tack/testkit";
import { Bus } from "@tack/bus";
import { round, say } from "./lib.js";

const GiB = 1024 ** 3;
// Random data spread through the sparse file: what makes the archive about 9 MB.
const DATA_CHUNKS = 36;
const CHUNK_BYTES = 256 * 1024;

/** Disk blocks in use under `dir`, in bytes (holes take none). */
function diskUsage(dir: string): Promise<number> {
  return new Promise((resolve) => {
    const child = spawn("du", ["-s", "--block-size=1", dir], { stdio: ["ignore", "pipe", "ignore"] });
    let out = "";
    child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
    child.on("close", () => resolve(Number(out.split("\t")[0]) || 0));
  });
}

/** Sends `archive` while sampling the disk use under `root`; the answer and the largest growth seen. */
async function send(url: string, key: string, archive: Buffer, root: string) {
  const before = await diskUsage(root);
  let peak = before;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) peak = Math.max(peak, await diskUsage(root));
  })();
  const started = performance.now();
  const res = await fetch(`${url}/v1/workspaces`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/gzip" }, body: archive });
  const body = (await res.json()) as { id?: string; error?: { code: string; message: string } };
  const ms = performance.now() - started;
  sampling = false;
  await sampler;
  peak = Math.max(peak, await diskUsage(root));
  return { status: res.status, code: body.error?.code ?? "", ms: Math.round(ms), bytesWritten: Math.max(0, peak - before), archiveBytes: archive.length, message: body.error?.message ?? "" };
}

/** The `uploads` part: `upload_bomb_bytes_written` with its limit, goal and each variant. */
export async function benchUploads(options: { natsUrl: string }): Promise<Record<string, unknown>> {
  const work = mkdtempSync(join(tmpdir(), "tack-bench-uploads-"));
  const namespace = `benchup${randomBytes(4).toString("hex")}`;
  const key = randomBytes(16).toString("hex");
  const root = join(work, "managed");
  mkdirSync(root);
  const operator = compileOperatorConfig(
    { tenants: { bench: { workspace_roots: [work] } }, workspaces: { dir: root } },
    { stateDir: join(work, "state"), baseDir: work, source: "bench" },
  );
  say("uploads: building a 2 GB sparse file and its archives");
  const src = join(work, "src");
  mkdirSync(src);
  const file = join(src, "big.bin");
  execFileSync("truncate", ["-s", String(2 * GiB), file]);
  for (let i = 0; i < DATA_CHUNKS; i++) {
    execFileSync("dd", ["if=/dev/urandom", `of=${file}`, `bs=${CHUNK_BYTES}`, "count=1", `seek=${Math.floor((i * 2 * GiB) / DATA_CHUNKS / CHUNK_BYTES)}`, "conv=notrunc", "status=none"]);
  }
  const archives = {
    sparse: execFileSync("tar", ["--sparse", "-czf", "-", "big.bin"], { cwd: src, maxBuffer: 256 * 1024 * 1024 }),
    plain: execFileSync("bash", ["-c", "tar -cf - big.bin | gzip -1"], { cwd: src, maxBuffer: 256 * 1024 * 1024 }),
  };
  rmSync(src, { recursive: true, force: true });
  const sandbox = await startSandboxService({ natsUrl: options.natsUrl, namespace, poolSize: 0, operator });
  const gateway = await startGateway({ natsUrl: options.natsUrl, namespace, port: 0, sqlitePath: join(work, "index.db"), operator, apiKeys: [{ key, tenant: "bench" }] });
  try {
    const variants: Record<string, Awaited<ReturnType<typeof send>> & { limitBytes: number }> = {};
    for (const [name, archive] of Object.entries(archives)) {
      say(`uploads: ${name} archive of ${round(archive.length / 1024 ** 2, 1)} MB`);
      // The limit this archive unpacks under: 8 times its size, max_unpacked_bytes, the tenant's max_workspace_bytes.
      const limitBytes = Math.min(archive.length * 8, operator.workspaces.maxUnpackedBytes, operator.tenants.bench!.max_workspace_bytes);
      variants[name] = { ...(await send(gateway.url, key, archive, root)), limitBytes };
    }
    const worst = Math.max(...Object.values(variants).map((v) => v.bytesWritten));
    const limit = Math.min(...Object.values(variants).map((v) => v.limitBytes));
    const refused = Object.values(variants).every((v) => v.status >= 400);
    return {
      upload_bomb_bytes_written: {
        bytes: worst,
        limit_bytes: limit,
        goal: "≤ the configured limit (8 × the archive, workspaces.max_unpacked_bytes, the tenant's max_workspace_bytes), the upload refused",
        met: worst <= limit && refused,
        variants: Object.fromEntries(Object.entries(variants).map(([name, v]) => [name, {
          archive_bytes: v.archiveBytes, status: v.status, code: v.code, bytes_written: v.bytesWritten, limit_bytes: v.limitBytes, ms: v.ms, message: v.message,
        }])),
        definition: "POST /v1/workspaces with a tar.gz of a 2 GB sparse file (36 random 256 KiB chunks) packed with --sparse and without; largest growth of the disk blocks under the managed workspaces root (du, sampled back to back) while each upload ran",
      },
    };
  } finally {
    await gateway.stop();
    await sandbox.stop({ removeContainers: true });
    const bus = await Bus.connect({ url: options.natsUrl, namespace, name: "bench-uploads-cleanup" });
    await removeNamespace(bus.nc, namespace).catch(() => undefined);
    await bus.close();
    if (statSync(work, { throwIfNoEntry: false })) rmSync(work, { recursive: true, force: true });
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const result = await benchUploads({ natsUrl: process.env.NATS_URL ?? "nats://127.0.0.1:4222" });
  process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
  process.exit(0);
}
