// Workspace uploads through POST /v1/workspaces (issue 18, item 2): a bomb or an entry that
// breaks a rule is refused with the right status and code naming it, a tenant's workspace
// quotas answer 413 (bytes) and 429 (count) naming the quota and what to do, and a refusal
// leaves no directory and no row. The sandbox side is the service's own ManagedWorkspaces,
// served on the bus in this process (no Docker needed).
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, readdirSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Bus, WorkspacesRpc } from "@tack/bus";
import { compileOperatorConfig } from "@tack/config";
import { ensureLogStream } from "@tack/log";
import { CreateWorkspaceRequest, DeleteWorkspaceRequest } from "@tack/proto";
import { removeNamespace } from "@tack/testkit";
import { startGateway, type Gateway } from "@tack/gateway-service";
import { ManagedWorkspaces } from "../../sandbox/src/workspaces.js";

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const namespace = `t${randomBytes(5).toString("hex")}`;
const KEYS = { acme: randomBytes(16).toString("hex"), few: randomBytes(16).toString("hex"), small: randomBytes(16).toString("hex") };
const MiB = 1024 * 1024;

let dir: string;
let managed: string;
let bus: Bus;
let gateway: Gateway;
let subscriptions: Array<{ unsubscribe(): void }>;

/** A tar built with Python's tarfile; `size` alone is that many zero bytes, `type` a link, device or fifo. */
function craftTar(entries: Array<{ name: string; content?: string; size?: number; type?: "symlink" | "hardlink" | "chr"; link?: string }>): Buffer {
  const program = `
import io, json, sys, tarfile
out = io.BytesIO()
types = {"symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE, "chr": tarfile.CHRTYPE}
with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
    for e in json.loads(sys.argv[1]):
        info = tarfile.TarInfo(e["name"])
        info.mode = 0o644
        if "type" in e:
            info.type = types[e["type"]]
            info.linkname = e.get("link", "")
            tar.addfile(info)
        else:
            data = e["content"].encode() if "content" in e else bytes(e.get("size", 0))
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
sys.stdout.buffer.write(out.getvalue())
`;
  return execFileSync("python3", ["-c", program, JSON.stringify(entries)], { maxBuffer: 64 * MiB });
}

async function upload(tenant: keyof typeof KEYS, body?: Buffer, type = "application/x-tar") {
  const res = await fetch(`${gateway.url}/v1/workspaces`, {
    method: "POST", headers: { authorization: `Bearer ${KEYS[tenant]}`, ...(body ? { "content-type": type } : {}) }, body,
  });
  return { status: res.status, json: (await res.json()) as { id?: string; error?: { code: string; message: string; details?: Record<string, string> } } };
}

async function listed(tenant: keyof typeof KEYS): Promise<string[]> {
  const res = await fetch(`${gateway.url}/v1/workspaces`, { headers: { authorization: `Bearer ${KEYS[tenant]}` } });
  return ((await res.json()) as { workspaces: Array<{ id: string }> }).workspaces.map((w) => w.id);
}

const onDisk = (tenant: string): string[] => {
  try {
    return readdirSync(join(managed, tenant));
  } catch {
    return [];
  }
};

beforeAll(async () => {
  dir = realpathSync(mkdtempSync(join(tmpdir(), "tack-uploads-")));
  managed = join(dir, "managed");
  mkdirSync(managed);
  const operator = compileOperatorConfig({
    tenants: {
      acme: { workspace_roots: [dir] },
      few: { workspace_roots: [dir], max_workspaces: 2 },
      small: { workspace_roots: [dir], max_workspace_bytes: 3 * MiB },
    },
    workspaces: { dir: managed, max_unpacked_bytes: 8 * MiB },
  }, { stateDir: join(dir, "state"), baseDir: dir, source: "test" });
  bus = await Bus.connect({ url: NATS_URL, namespace, name: "uploads-test" });
  await ensureLogStream(bus.nc, bus.names);
  // The sandbox service's side of workspace creation, as service.ts serves it.
  const workspaces = await ManagedWorkspaces.open(bus, operator);
  subscriptions = [
    bus.serve(WorkspacesRpc.CreateWorkspace, (request: CreateWorkspaceRequest) => workspaces.create(request)),
    bus.serve(WorkspacesRpc.DeleteWorkspace, (request: DeleteWorkspaceRequest) => workspaces.delete(request)),
  ];
  gateway = await startGateway({
    natsUrl: NATS_URL, namespace, port: 0, sqlitePath: join(dir, "index.db"), operator,
    apiKeys: [{ key: KEYS.acme, tenant: "acme" }, { key: KEYS.few, tenant: "few" }, { key: KEYS.small, tenant: "small" }],
  });
}, 60_000);

afterAll(async () => {
  await gateway?.stop();
  for (const s of subscriptions ?? []) s.unsubscribe();
  await removeNamespace(bus.nc, namespace).catch(() => undefined);
  await bus?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("workspace uploads", () => {
  it("uploads - a tar.gz of a 2 GB sparse file is 400 gateway.bad_archive naming the entry; no directory, no row", async () => {
    const src = join(dir, "bomb");
    mkdirSync(src);
    execFileSync("bash", ["-c", "truncate -s 2G big.bin && printf x | dd of=big.bin bs=1 seek=1500000000 conv=notrunc status=none"], { cwd: src });
    const bomb = execFileSync("tar", ["--sparse", "-czf", "-", "big.bin"], { cwd: src });
    rmSync(src, { recursive: true });
    const r = await upload("acme", bomb, "application/gzip");
    expect(r.status, JSON.stringify(r.json)).toBe(400);
    expect(r.json.error?.code).toBe("gateway.bad_archive");
    expect(r.json.error?.message).toMatch(/"big.bin" is a sparse file; sparse files are not unpacked \(pack the project without --sparse\)/);
    expect(onDisk("acme")).toEqual([]);
    expect(await listed("acme")).toEqual([]);
  });

  it("uploads - a zeros bomb is 413 naming workspaces.max_unpacked_bytes; hard link, device, absolute and .. entries are 400 naming the entry", async () => {
    const zeros = execFileSync("bash", ["-c", "python3 -c \"import sys,tarfile,io; b=io.BytesIO(); t=tarfile.open(fileobj=b, mode='w'); i=tarfile.TarInfo('zeros.bin'); i.size=64<<20; t.addfile(i, io.BytesIO(bytes(64<<20))); t.close(); sys.stdout.buffer.write(b.getvalue())\" | gzip -c"], { maxBuffer: 64 * MiB });
    expect(zeros.length).toBeLessThan(MiB);
    const big = await upload("acme", zeros, "application/gzip");
    expect(big.status, JSON.stringify(big.json)).toBe(413);
    expect(big.json.error?.code).toBe("gateway.upload_too_large");
    expect(big.json.error?.message).toContain("(workspaces.max_unpacked_bytes)");
    for (const [entries, named] of [
      [[{ name: "a.txt", content: "a" }, { name: "hard", type: "hardlink", link: "a.txt" }], /"hard" is a hard link/],
      [[{ name: "zero", type: "chr" }], /"zero" is a device file/],
      [[{ name: "/etc/cron.d/x", content: "x" }], /"\/etc\/cron.d\/x" has an absolute name/],
      [[{ name: "../up.txt", content: "x" }], /"..\/up.txt" climbs out with \.\./],
    ] as const) {
      const r = await upload("acme", craftTar([...entries]));
      expect(r.status, JSON.stringify(r.json)).toBe(400);
      expect(r.json.error?.code).toBe("gateway.bad_archive");
      expect(r.json.error?.message).toMatch(named);
    }
    expect(onDisk("acme")).toEqual([]);
    expect(await listed("acme")).toEqual([]);
  });

  it("uploads - max_workspaces: the third workspace is 429 gateway.limit_exceeded naming the quota; deleting one makes room", async () => {
    const first = await upload("few");
    const second = await upload("few", craftTar([{ name: "a.txt", content: "a" }]));
    expect([first.status, second.status]).toEqual([201, 201]);
    const third = await upload("few", craftTar([{ name: "b.txt", content: "b" }]));
    expect(third.status).toBe(429);
    expect(third.json.error?.code).toBe("gateway.limit_exceeded");
    expect(third.json.error?.message).toBe("tenant few may hold at most 2 managed workspaces (max_workspaces); delete one (DELETE /v1/workspaces/<id>) or ask the operator to raise the quota");
    expect(third.json.error?.details).toEqual({ limit: "max_workspaces", value: "2" });
    expect(onDisk("few").sort()).toEqual([first.json.id, second.json.id].sort());
    expect((await listed("few")).sort()).toEqual([first.json.id, second.json.id].sort());
    const deleted = await fetch(`${gateway.url}/v1/workspaces/${first.json.id}`, { method: "DELETE", headers: { authorization: `Bearer ${KEYS.few}` } });
    expect(deleted.status).toBe(200);
    expect((await upload("few")).status).toBe(201);
  });

  it("uploads - max_workspace_bytes: an upload that would pass it is 413 gateway.workspace_quota_exceeded naming the quota; no directory, no row", async () => {
    const first = await upload("small", craftTar([{ name: "one.bin", size: 2 * MiB }]));
    expect(first.status, JSON.stringify(first.json)).toBe(201);
    const second = await upload("small", craftTar([{ name: "two.bin", size: 2 * MiB }]));
    expect(second.status, JSON.stringify(second.json)).toBe(413);
    expect(second.json.error?.code).toBe("gateway.workspace_quota_exceeded");
    expect(second.json.error?.message).toContain(`tenant small's managed workspaces may hold at most ${3 * MiB} bytes (max_workspace_bytes)`);
    expect(second.json.error?.message).toContain("delete a workspace (DELETE /v1/workspaces/<id>) or ask the operator to raise the quota");
    expect(second.json.error?.details).toEqual({ limit: "max_workspace_bytes", value: String(3 * MiB) });
    expect(onDisk("small")).toEqual([first.json.id]);
    expect(await listed("small")).toEqual([first.json.id]);
  });
});
