// Attack suite, workspaces: a valid key of one tenant tries to reach host directories and
// managed workspaces that are not its own; a model runs in a root-owned project. Every service
// runs as its own process with real Docker sandboxes; each refusal also checks nothing changed.
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Bus } from "@tack/bus";
import { launch, type Launched } from "@tack/cli";
import { INSTALL_DIR } from "@tack/config";
import { removeNamespace, waitFor } from "@tack/testkit";
import { sseJson } from "../e2e/support/sse.js";

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const namespace = `wsec${randomBytes(4).toString("hex")}`;
const work = mkdtempSync(join(tmpdir(), "tack-wsec-"));
const stateDir = join(work, "state");
const roots = { acme: join(work, "acme"), globex: join(work, "globex") };
const keys = { acme: randomBytes(16).toString("hex"), globex: randomBytes(16).toString("hex") };
const marker = randomBytes(4).toString("hex");
let tack: Launched;

type EventJson = { seq: number; type: string } & Record<string, Record<string, unknown> | undefined>;

async function api(tenant: keyof typeof keys, path: string, init: RequestInit & { json?: unknown } = {}): Promise<Response> {
  const headers: Record<string, string> = { authorization: `Bearer ${keys[tenant]}`, ...(init.headers as Record<string, string> | undefined) };
  if (init.json !== undefined) headers["content-type"] = "application/json";
  return fetch(`${tack.gatewayUrl}${path}`, { ...init, headers, body: init.json === undefined ? init.body : JSON.stringify(init.json) });
}

function script(name: string, replies: unknown[]): string {
  mkdirSync(join(stateDir, "scripts"), { recursive: true });
  const file = join(stateDir, "scripts", `${name}.json`);
  writeFileSync(file, JSON.stringify({ replies }));
  return `scripted:${file}`;
}

async function sessionCount(tenant: keyof typeof keys): Promise<number> {
  return ((await (await api(tenant, "/v1/sessions")).json()) as { sessions: unknown[] }).sessions.length;
}

async function runTurn(tenant: keyof typeof keys, id: string, text: string): Promise<EventJson[]> {
  expect((await api(tenant, `/v1/sessions/${id}/messages`, { method: "POST", json: { text } })).status).toBe(202);
  return waitFor(`the turn to end in session ${id}`, async () => {
    const body = await (await api(tenant, `/v1/sessions/${id}/events?follow=0`)).text();
    const events = sseJson<EventJson>(body);
    if (events.some((e) => e.type === "turn/end")) return events;
    throw new Error(`log so far: ${events.map((e) => e.type).join(", ")}`);
  }, { timeoutMs: 60_000 });
}

/** A tar archive built with Python's tarfile, so that it can hold entries GNU tar would not write. */
function craftTar(entries: Array<{ name: string; content?: string; symlinkTo?: string }>): Buffer {
  const program = `
import io, json, sys, tarfile
out = io.BytesIO()
with tarfile.open(fileobj=out, mode="w") as tar:
    for e in json.loads(sys.argv[1]):
        info = tarfile.TarInfo(e["name"])
        if "symlinkTo" in e:
            info.type = tarfile.SYMTYPE
            info.linkname = e["symlinkTo"]
            tar.addfile(info)
        else:
            data = e.get("content", "").encode()
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
sys.stdout.buffer.write(out.getvalue())
`;
  return execFileSync("python3", ["-c", program, JSON.stringify(entries)]);
}

beforeAll(async () => {
  for (const dir of [join(stateDir, "workspaces"), roots.acme, roots.globex]) mkdirSync(dir, { recursive: true });
  const config = join(work, "operator.yaml");
  writeFileSync(config, [
    "tenants:",
    `  local: { workspace_roots: [${roots.acme}] }`,
    `  acme: { workspace_roots: [${roots.acme}] }`,
    `  globex: { workspace_roots: [${roots.globex}] }`,
    "keys:",
    "  - { tenant: acme, env: TACK_TEST_ACME_KEY }",
    "  - { tenant: globex, env: TACK_TEST_GLOBEX_KEY }",
    "workspaces:",
    `  dir: ${join(stateDir, "workspaces")}`,
    "  max_upload_bytes: 65536",
  ].join("\n"));
  tack = await launch({
    dataDir: stateDir, natsUrl: NATS_URL, namespace,
    env: { TACK_CONFIG: config, TACK_STATE_DIR: stateDir, TACK_TEST_ACME_KEY: keys.acme, TACK_TEST_GLOBEX_KEY: keys.globex, TACK_SANDBOX_REMOVE_ON_STOP: "1" },
  });
}, 120_000);

afterAll(async () => {
  await tack?.stop();
  const bus = await Bus.connect({ url: NATS_URL, namespace, name: "wsec-cleanup" });
  await removeNamespace(bus.nc, namespace);
  await bus.close();
  rmSync(work, { recursive: true, force: true });
  for (const name of readdirSync("/tmp")) if (name.includes(marker)) rmSync(join("/tmp", name), { recursive: true, force: true });
});

describe("security: workspaces", () => {
  it("workspaces - a valid key cannot name a directory outside its tenant's roots: 403 naming the roots, nothing created", async () => {
    const globexProject = join(roots.globex, "project");
    mkdirSync(globexProject, { recursive: true });
    const link = join(roots.acme, `to-etc-${marker}`);
    symlinkSync("/etc", link);
    for (const target of [globexProject, "/", "/etc", "/root", INSTALL_DIR, stateDir, join(stateDir, "workspaces"), link, work]) {
      const r = await api("acme", "/v1/sessions", { method: "POST", json: { workspace: target, model: script("never", [{ content: "no" }]) } });
      const body = (await r.json()) as { error: { code: string; message: string } };
      expect(r.status, `${target}: ${JSON.stringify(body)}`).toBe(403);
      expect(body.error.code).toBe("gateway.workspace_forbidden");
    }
    const outside = (await (await api("acme", "/v1/sessions", { method: "POST", json: { workspace: globexProject, model: script("never", [{ content: "no" }]) } })).json()) as { error: { message: string; details: Record<string, string> } };
    expect(outside.error.message).toContain(`allowed roots: ${roots.acme}`);
    expect(outside.error.details.allowed_roots).toBe(roots.acme);
    expect(await sessionCount("acme")).toBe(0);
    expect(execFileSync("docker", ["ps", "-aq", "--filter", `label=tack.namespace=${namespace}`, "--filter", "label=tack.session"]).toString().trim()).toBe("");
  });

  it("workspaces - a root-owned project works in workspace-write as the configured user; what it writes belongs to root on the host", async () => {
    const project = join(roots.acme, "root-owned");
    mkdirSync(project, { mode: 0o700 });
    writeFileSync(join(project, "README"), "root's project\n", { mode: 0o600 });
    const created = await api("acme", "/v1/sessions", { method: "POST", json: { workspace: project, model: script("rootowned", [
      { tool_calls: [{ name: "bash", arguments: { command: "id -u; cat README; echo built > out.txt" } }] },
      { content: "done" },
    ]) } });
    expect(created.status, await created.clone().text()).toBe(201);
    const events = await runTurn("acme", ((await created.json()) as { id: string }).id, "build it");
    const result = events.find((e) => e.type === "tool/result")!.toolResult!;
    expect(String(result.content)).toMatch(/^1000\nroot's project\n/);
    expect(statSync(join(project, "out.txt")).uid).toBe(0);
  });

  it("workspaces - an archive with members that climb out (`..`, through a symlink) is refused whole, naming the member; nothing lands anywhere", async () => {
    for (const [entries, named] of [
      [[{ name: "ok.txt", content: "ok" }, { name: `../escape-${marker}.txt`, content: "escaped" }], `../escape-${marker}.txt`],
      [[{ name: "ok.txt", content: "ok" }, { name: "link", symlinkTo: "/tmp" }, { name: `link/through-${marker}.txt`, content: "escaped" }], "link"],
      // Absolute names are refused too (they were once unpacked inside; now no name is rewritten).
      [[{ name: "ok.txt", content: "ok" }, { name: `/tmp/abs-${marker}.txt`, content: "absolute" }], `/tmp/abs-${marker}.txt`],
    ] as const) {
      const r = await api("acme", "/v1/workspaces", { method: "POST", body: craftTar([...entries]), headers: { "content-type": "application/x-tar" } });
      const body = (await r.json()) as { error: { code: string; message: string } };
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(body.error.code).toBe("gateway.bad_archive");
      expect(body.error.message).toContain(named);
    }
    expect(readdirSync("/tmp").filter((n) => n.includes(marker))).toEqual([]);
    expect(existsSync(join(stateDir, "workspaces", `escape-${marker}.txt`))).toBe(false);
    expect(readdirSync(join(stateDir, "workspaces", "acme"))).toEqual([]);
    expect(((await (await api("acme", "/v1/workspaces")).json()) as { workspaces: unknown[] }).workspaces).toEqual([]);
  });

  it("workspaces - a managed workspace from an archive: sessions run in it, the owner downloads it, another tenant cannot", async () => {
    const archive = craftTar([
      { name: "hello.txt", content: "hello from the archive\n" },
      { name: "sub/inner.txt", content: "inside" },
    ]);
    const r = await api("acme", "/v1/workspaces?title=demo", { method: "POST", body: archive, headers: { "content-type": "application/x-tar" } });
    const ws = (await r.json()) as { id: string; title: string };
    expect(r.status, JSON.stringify(ws)).toBe(201);
    expect(ws.title).toBe("demo");
    const path = join(stateDir, "workspaces", "acme", ws.id);
    expect(existsSync(join(path, "sub", "inner.txt"))).toBe(true);
    expect(lstatSync(path).uid).toBe(1000);

    // Another tenant sees nothing of it: not in its list, no download, no session on it by id or by path.
    expect(((await (await api("globex", "/v1/workspaces")).json()) as { workspaces: unknown[] }).workspaces).toEqual([]);
    expect((await api("globex", `/v1/workspaces/${ws.id}/archive`)).status).toBe(404);
    expect((await api("globex", `/v1/workspaces/${ws.id}`, { method: "DELETE" })).status).toBe(404);
    expect((await api("globex", "/v1/sessions", { method: "POST", json: { workspace_id: ws.id, model: script("never", [{ content: "no" }]) } })).status).toBe(404);
    expect((await api("globex", "/v1/sessions", { method: "POST", json: { workspace: path, model: script("never", [{ content: "no" }]) } })).status).toBe(403);
    expect(await sessionCount("globex")).toBe(0);

    const created = await api("acme", "/v1/sessions", { method: "POST", json: { workspace_id: ws.id, model: script("managed", [
      { tool_calls: [{ name: "bash", arguments: { command: "cat hello.txt; echo made > made.txt" } }] },
      { content: "done" },
    ]) } });
    expect(created.status, await created.clone().text()).toBe(201);
    const session = (await created.json()) as { id: string };
    const events = await runTurn("acme", session.id, "go");
    expect(String(events.find((e) => e.type === "tool/result")!.toolResult!.content)).toContain("hello from the archive");

    const download = await api("acme", `/v1/workspaces/${ws.id}/archive`);
    expect(download.status).toBe(200);
    expect(download.headers.get("content-type")).toBe("application/x-tar");
    const tarFile = join(work, "download.tar");
    writeFileSync(tarFile, Buffer.from(await download.arrayBuffer()));
    expect(execFileSync("tar", ["-tf", tarFile]).toString().split("\n")).toEqual(expect.arrayContaining(["./hello.txt", "./made.txt"]));

    // Deleting the workspace deletes its sessions too.
    const deleted = await api("acme", `/v1/workspaces/${ws.id}`, { method: "DELETE" });
    expect(deleted.status, await deleted.clone().text()).toBe(200);
    expect(((await deleted.json()) as { sessions_deleted: string[] }).sessions_deleted).toEqual([session.id]);
    expect(existsSync(path)).toBe(false);
    expect((await api("acme", `/v1/sessions/${session.id}`)).status).toBe(404);
  });

  it("workspaces - an upload over the limit is refused with 413 naming the limit, and nothing is created", async () => {
    const big = craftTar([{ name: "big.bin", content: "x".repeat(100_000) }]);
    const r = await api("acme", "/v1/workspaces", { method: "POST", body: big, headers: { "content-type": "application/x-tar" } });
    const body = (await r.json()) as { error: { code: string; message: string } };
    expect(r.status).toBe(413);
    expect(body.error.code).toBe("gateway.upload_too_large");
    expect(body.error.message).toContain("65536");
    // Without a Content-Length (chunked), the stream itself is cut at the limit.
    const chunked = await api("acme", "/v1/workspaces", {
      method: "POST", body: new Blob([big]).stream(), headers: { "content-type": "application/x-tar" }, duplex: "half",
    } as RequestInit & { duplex: "half" });
    expect(chunked.status).toBe(413);
    expect(((await chunked.json()) as { error: { code: string } }).error.code).toBe("gateway.upload_too_large");
    expect(((await (await api("acme", "/v1/workspaces")).json()) as { workspaces: unknown[] }).workspaces).toEqual([]);
    const r2 = await api("acme", "/v1/workspaces", { method: "POST", body: "not a tar", headers: { "content-type": "text/plain" } });
    expect(r2.status).toBe(415);
  });

  it("workspaces - an empty managed workspace is owned by the sandbox user and closed to others", async () => {
    const r = await api("acme", "/v1/workspaces", { method: "POST" });
    expect(r.status).toBe(201);
    const { id } = (await r.json()) as { id: string };
    const info = statSync(join(stateDir, "workspaces", "acme", id));
    expect([info.uid, info.gid, info.mode & 0o777]).toEqual([1000, 1000, 0o700]);
  });
});
