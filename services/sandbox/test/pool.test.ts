import { readFile, readdir, rmdir, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "@tack/testkit";
import { docker, Harness, rejection, uniqueNamespace } from "./helpers.js";

const mountsUnder = async (dir: string) => (await readFile("/proc/self/mountinfo", "utf8")).split("\n").filter((line) => line.split(" ")[4]?.startsWith(dir));

describe("sandbox warm pool", () => {
  let h: Harness;
  let poolDir: string;
  beforeAll(async () => {
    const namespace = uniqueNamespace();
    poolDir = join(tmpdir(), `tack-pool-${namespace}`);
    h = await Harness.start({ namespace, poolSize: 2, poolDir });
    await h.service.whenPoolFull();
  });
  afterAll(async () => {
    await h.cleanup();
    // Nothing stays mounted, and nothing but the (empty) base directory stays behind.
    expect(await mountsUnder(poolDir)).toEqual([]);
    expect(await readdir(poolDir)).toEqual([]);
    await rmdir(poolDir);
  });

  it("pool - a new session claims a started container that sees its workspace, without a cold start", async () => {
    expect(h.service.pool()).toEqual({ size: 2, ready: 2 });
    const workspace = await h.workspace();
    await writeFile(join(workspace, "from-host.txt"), "host\n");
    const startedAt = performance.now();
    const ensured = await h.ensure({ sessionId: "p1", workspace });
    const claimMs = performance.now() - startedAt;
    expect(ensured).toMatchObject({ created: true, runtime: "runc" });
    // A cold start takes most of a second here; a claim is a mount and a rename.
    expect(claimMs).toBeLessThan(400);
    const info = await docker.getContainer(ensured.containerId).inspect();
    expect(info.Name).toBe(`/${h.containerName("p1")}`);
    expect(info.Config.Labels["tack.pool"]).toBeDefined();
    expect(info.HostConfig).toMatchObject({ CapDrop: ["ALL"], SecurityOpt: ["no-new-privileges"], ReadonlyRootfs: true, NetworkMode: "none", PidsLimit: 256 });

    expect(await h.exec("p1", ["bash", "-c", "cat from-host.txt; echo sandbox > from-sandbox.txt; id -u"])).toMatchObject({ exitCode: 0, stdout: "host\n1000\n" });
    expect(await readFile(join(workspace, "from-sandbox.txt"), "utf8")).toBe("sandbox\n");
    expect((await stat(join(workspace, "from-sandbox.txt"))).uid).toBe(1000);
    // The pool refills behind the claim.
    await h.service.whenPoolFull();
  });

  it("pool - a read-only claim cannot write the workspace, and cannot remount it", async () => {
    const workspace = await h.workspace();
    const ensured = await h.ensure({ sessionId: "p-ro", workspace, mode: "read-only" });
    expect((await docker.getContainer(ensured.containerId).inspect()).Config.Labels["tack.pool"]).toBeDefined();
    const write = await h.exec("p-ro", ["touch", "/workspace/nope"]);
    expect(write.exitCode).not.toBe(0);
    expect(write.stderr).toContain("Read-only file system");
    expect((await h.exec("p-ro", ["grep", " /workspace ", "/proc/self/mountinfo"])).stdout).toMatch(/ro,nosuid,nodev/);
    expect((await h.exec("p-ro", ["mount", "-o", "remount,rw", "/workspace"])).exitCode).not.toBe(0);
  });

  it("pool - a networked session starts cold; a workspace of another owner is served from the pool through an ID mapping", async () => {
    const full = await h.ensure({ sessionId: "p-net", workspace: await h.workspace(), mode: "danger-full-access" });
    expect((await docker.getContainer(full.containerId).inspect()).Config.Labels["tack.pool"]).toBeUndefined();
    const workspace = await h.workspace(1234, 1234);
    const other = await h.ensure({ sessionId: "p-uid", workspace });
    expect((await docker.getContainer(other.containerId).inspect()).Config.Labels["tack.pool"]).toBeDefined();
    expect((await h.exec("p-uid", ["bash", "-c", "id -u; touch mine"])).stdout).toBe("1000\n");
    expect((await stat(join(workspace, "mine"))).uid).toBe(1234);
  });

  it("pool - release unmounts the workspace from the host and removes the container", async () => {
    const workspace = await h.workspace();
    const ensured = await h.ensure({ sessionId: "p-rel", workspace });
    expect((await mountsUnder(poolDir)).some((line) => line.split(" ")[3] === workspace)).toBe(true);
    expect(await h.release("p-rel")).toEqual({ removed: true });
    expect((await mountsUnder(poolDir)).some((line) => line.split(" ")[3] === workspace)).toBe(false);
    expect(await h.containerIds("p-rel")).toEqual([]);
    expect((await docker.listContainers({ all: true, filters: { id: [ensured.containerId] } })).length).toBe(0);
  });

  it("pool - a claimed container whose agent died comes back with its workspace on the next ensure", async () => {
    const workspace = await h.workspace();
    await writeFile(join(workspace, "kept.txt"), "kept\n");
    const { containerId } = await h.ensure({ sessionId: "p-restart", workspace });
    // Killed from outside: the agent is PID 1, whose signals from commands the kernel drops.
    // Caught from the start: the agent_lost answer can arrive before docker's kill call returns.
    const running = rejection(h.exec("p-restart", ["sleep", "30"]));
    await waitFor("the command to run", async () => (await h.processes("p-restart")).processes.some((p) => p.command === "sleep 30"), { timeoutMs: 10_000 });
    await docker.getContainer(containerId).kill();
    expect(await running).toMatchObject({ code: "sandbox.agent_lost" });
    expect(await h.ensure({ sessionId: "p-restart", workspace })).toMatchObject({ created: false });
    expect((await h.exec("p-restart", ["cat", "kept.txt"])).stdout).toBe("kept\n");
  });

  it("pool - a restarted service takes its claimed containers back and replaces its unclaimed ones", async () => {
    const workspace = await h.workspace();
    const { containerId } = await h.ensure({ sessionId: "p-again", workspace });
    await h.service.whenPoolFull();
    const before = new Set(await h.containerIds());
    await h.service.stop();
    h.service = await (await import("../src/index.js")).startSandboxService({ natsUrl: "nats://127.0.0.1:4222", namespace: h.namespace, poolSize: 2, poolDir });
    await h.service.whenPoolFull();
    expect((await h.exec("p-again", ["bash", "-c", "ls /workspace >/dev/null && echo still here"])).stdout).toBe("still here\n");
    expect(await h.ensure({ sessionId: "p-again", workspace })).toMatchObject({ containerId, created: false });
    const after = await h.containerIds();
    // The session containers stayed; the two pool containers are new.
    expect(after.filter((id) => !before.has(id))).toHaveLength(2);
  });
});
