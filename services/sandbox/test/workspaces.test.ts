// The workspace boundary where the mount happens: only the tenant's roots or managed
// workspaces, never Tack's own files, and a fixed sandbox user with an ID-mapped mount.
import { chmod, chown, mkdir, mkdtemp, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { compileOperatorConfig, INSTALL_DIR, type OperatorConfig } from "@tack/config";
import { Harness, rejection } from "./helpers.js";

/** Mount points under `dir` (from this process's mount table). */
async function mountsUnder(dir: string): Promise<string[]> {
  const table = await readFile("/proc/self/mountinfo", "utf8");
  return table.split("\n").map((line) => line.split(" ")[4] ?? "").filter((point) => point.startsWith(dir));
}

describe("sandbox workspaces", () => {
  let base: string;
  let acmeRoot: string;
  let globexRoot: string;
  let operator: OperatorConfig;
  let h: Harness;
  let pooled: Harness;
  let poolDir: string;

  beforeAll(async () => {
    base = await mkdtemp(join(tmpdir(), "tack-ws-boundary-"));
    [acmeRoot, globexRoot] = [join(base, "acme"), join(base, "globex")];
    await Promise.all([mkdir(acmeRoot), mkdir(globexRoot), mkdir(join(base, "state"))]);
    operator = compileOperatorConfig(
      { tenants: { acme: { workspace_roots: [acmeRoot, base] }, globex: { workspace_roots: [globexRoot], max_sandboxes: 1 } }, workspaces: { dir: join(base, "state", "workspaces") } },
      { stateDir: join(base, "state"), baseDir: base, source: "test" },
    );
    poolDir = join(base, "pool");
    h = await Harness.start({ operator, poolDir });
    pooled = await Harness.start({ operator, poolSize: 1, poolDir });
    await pooled.service.whenPoolFull();
  });
  afterAll(async () => {
    await h?.cleanup();
    await pooled?.cleanup();
    await rm(base, { recursive: true, force: true });
  });

  /** A root-owned project closed to others (mode 0700) holding a root-only file, like a checkout made by root. */
  async function rootProject(name: string): Promise<string> {
    const dir = join(acmeRoot, name);
    await mkdir(dir, { mode: 0o700 });
    await writeFile(join(dir, "secret.txt"), "root's\n", { mode: 0o600 });
    return dir;
  }

  it("workspaces - a root-owned workspace is writable through an ID mapping while commands run as the configured user", async () => {
    const dir = await rootProject("direct");
    await h.ensure({ sessionId: "w-direct", workspace: dir });
    const result = await h.exec("w-direct", ["bash", "-c", "id -u; cat secret.txt; echo made > made.txt; stat -c %u made.txt"]);
    expect(result).toMatchObject({ exitCode: 0, stdout: "1000\nroot's\n1000\n" });
    // On the host the new file belongs to the workspace's owner, not to uid 1000.
    expect((await stat(join(dir, "made.txt"))).uid).toBe(0);
    // Nothing in the container is root: the init and the agent run as the sandbox user too.
    expect((await h.exec("w-direct", ["bash", "-c", "ps -eo uid= | sort -u"])).stdout.trim()).toBe("1000");
  });

  it("workspaces - read-only mode maps the owner too and still refuses writes", async () => {
    const dir = await rootProject("readonly");
    await h.ensure({ sessionId: "w-ro", workspace: dir, mode: "read-only" });
    expect((await h.exec("w-ro", ["cat", "secret.txt"], { mode: "read-only" })).stdout).toBe("root's\n");
    const write = await h.exec("w-ro", ["bash", "-c", "echo x > new.txt"], { mode: "read-only" });
    expect(write.exitCode).not.toBe(0);
    expect(write.stderr).toMatch(/Read-only file system/);
    await expect(stat(join(dir, "new.txt"))).rejects.toThrow();
  });

  it("workspaces - a warm pool container gets the mapped workspace too, and the mapping goes with the container", async () => {
    const dir = await rootProject("pooled");
    const ensured = await pooled.ensure({ sessionId: "w-pool", workspace: dir });
    expect(ensured.created).toBe(true);
    expect((await pooled.exec("w-pool", ["bash", "-c", "echo p > p.txt; id -u"])).stdout).toBe("1000\n");
    expect((await stat(join(dir, "p.txt"))).uid).toBe(0);
    await h.ensure({ sessionId: "w-gone", workspace: await rootProject("gone") });
    const before = await mountsUnder(poolDir);
    expect(before.some((point) => point.includes("/direct-"))).toBe(true);
    await h.release("w-gone");
    await h.release("w-direct");
    await h.release("w-ro");
    expect((await mountsUnder(poolDir)).filter((point) => point.includes("/direct-"))).toEqual([]);
  });

  it("workspaces - a directory outside the tenant's roots is refused, and no container is made", async () => {
    const outside = await mkdtemp(join(tmpdir(), "tack-ws-outside-"));
    try {
      const error = await rejection(h.ensure({ sessionId: "w-out", workspace: outside }));
      expect(error.code).toBe("sandbox.workspace_forbidden");
      expect(error.message).toContain(acmeRoot);
      expect(await h.containerIds("w-out")).toEqual([]);
    } finally {
      await rm(outside, { recursive: true, force: true });
    }
  });

  it("workspaces - another tenant's root is out of reach with a valid tenant id", async () => {
    const dir = join(acmeRoot, "acme-project");
    await mkdir(dir);
    await chown(dir, 1000, 1000);
    const error = await rejection(h.ensure({ sessionId: "w-cross", workspace: dir, tenant: "globex" }));
    expect(error.code).toBe("sandbox.workspace_forbidden");
    expect(error.message).toContain(globexRoot);
    expect(await h.containerIds("w-cross")).toEqual([]);
  });

  it("workspaces - a symlink inside a root that leads outside is judged by where it leads", async () => {
    const link = join(acmeRoot, "to-etc");
    await symlink("/etc", link);
    const error = await rejection(h.ensure({ sessionId: "w-link", workspace: link, mode: "read-only" }));
    expect(error.code).toBe("sandbox.workspace_forbidden");
    expect(error.message).toContain("/etc");
    expect(await h.containerIds("w-link")).toEqual([]);
  });

  it("workspaces - Tack's own install and state are never a workspace, nor a directory containing them", async () => {
    for (const [i, path] of [join(base, "state"), base, INSTALL_DIR].entries()) {
      const error = await rejection(h.ensure({ sessionId: `w-own-${i}`, workspace: path, mode: "read-only" }));
      expect(error.code).toBe("sandbox.workspace_forbidden");
      expect(await h.containerIds(`w-own-${i}`)).toEqual([]);
    }
  });

  it("workspaces - a managed workspace of the tenant is allowed, another tenant's is not", async () => {
    const managed = join(base, "state", "workspaces", "acme", "ws1");
    await mkdir(managed, { recursive: true });
    await chmod(managed, 0o700);
    await h.ensure({ sessionId: "w-managed", workspace: managed });
    expect((await h.exec("w-managed", ["bash", "-c", "echo m > m.txt && cat m.txt"])).stdout).toBe("m\n");
    const error = await rejection(h.ensure({ sessionId: "w-managed-2", workspace: managed, tenant: "globex" }));
    expect(error.code).toBe("sandbox.workspace_forbidden");
    await h.release("w-managed");
  });
});

describe("sandbox requests checked against the log", () => {
  let h: Harness;
  let base: string;
  let operator: OperatorConfig;
  beforeAll(async () => {
    base = await mkdtemp(join(tmpdir(), "tack-ws-forged-"));
    await Promise.all(["acme", "globex"].map((t) => mkdir(join(base, t))));
    operator = compileOperatorConfig(
      { tenants: { acme: { workspace_roots: [join(base, "acme")] }, globex: { workspace_roots: [join(base, "globex")], max_sandboxes: 1 } } },
      { stateDir: join(base, "state"), baseDir: base, source: "test" },
    );
    h = await Harness.start({ operator });
  });
  afterAll(async () => {
    await h?.cleanup();
    await rm(base, { recursive: true, force: true });
  });

  async function project(tenant: string, name: string): Promise<string> {
    const dir = join(base, tenant, name);
    await mkdir(dir);
    await chown(dir, 1000, 1000);
    return dir;
  }

  it("sessions - an ensure for a session the loop never logged is refused, whatever it claims", async () => {
    const error = await rejection(h.ensure({ sessionId: "f-unlogged", workspace: await project("acme", "a1") }, { log: false }));
    expect(error.code).toBe("sandbox.session_unknown");
    expect(await h.containerIds("f-unlogged")).toEqual([]);
  });

  it("sessions - another tenant's name or another workspace on a real session is refused", async () => {
    const logged = await project("acme", "a2");
    await h.logSession("f-real", "acme", logged);
    const otherTenant = await rejection(h.ensure({ sessionId: "f-real", workspace: await project("globex", "g1"), tenant: "globex" }, { log: false }));
    expect(otherTenant.code).toBe("sandbox.session_unknown");
    const otherWorkspace = await rejection(h.ensure({ sessionId: "f-real", workspace: await project("acme", "a3") }, { log: false }));
    expect(otherWorkspace.code).toBe("sandbox.workspace_mismatch");
    expect(await h.containerIds("f-real")).toEqual([]);
    // The logged facts still work.
    await h.ensure({ sessionId: "f-real", workspace: logged }, { log: false });
    expect(await h.containerIds("f-real")).toHaveLength(1);
  });

  it("sessions - a mode wider than the tenant's max_sandbox_mode and sandboxes beyond max_sandboxes are refused", async () => {
    const wide = await rejection(h.ensure({ sessionId: "f-wide", workspace: await project("acme", "a4"), mode: "danger-full-access" }));
    expect(wide.code).toBe("sandbox.mode_not_allowed");
    expect(await h.containerIds("f-wide")).toEqual([]);
    await h.ensure({ sessionId: "f-g1", workspace: await project("globex", "g2"), tenant: "globex" });
    const over = await rejection(h.ensure({ sessionId: "f-g2", workspace: await project("globex", "g3"), tenant: "globex" }));
    expect(over).toMatchObject({ code: "sandbox.limit_exceeded" });
    expect(over.message).toContain("max_sandboxes");
    expect(await h.containerIds("f-g2")).toEqual([]);
  });
});

describe("sandbox workspaces under gVisor", () => {
  let h: Harness;
  let dir: string;
  beforeAll(async () => {
    h = await Harness.start({ runtime: "runsc" });
    dir = await mkdtemp(join(tmpdir(), "tack-ws-runsc-"));
  });
  afterAll(async () => {
    await h.cleanup();
    await rm(dir, { recursive: true, force: true });
  });

  it("workspaces - runsc refuses a workspace it cannot map, naming the chown, instead of running as its owner", async () => {
    const error = await rejection(h.ensure({ sessionId: "g-root", workspace: dir }));
    expect(error.code).toBe("sandbox.ownership_mapping_unsupported");
    expect(error.message).toContain(`chown -R 1000:1000 ${dir}`);
    expect(await h.containerIds("g-root")).toEqual([]);
  });
});
