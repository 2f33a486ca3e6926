import { mkdtemp, rmdir, stat, utimes } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSandboxService } from "../src/index.js";
import { LABELS } from "../src/spec.js";
import { docker, Harness, NATS_URL, uniqueNamespace } from "./helpers.js";

// Every sandbox service collects, at start and then now and then, the mounts under the pool
// directory that dead processes left behind, in every namespace. What a live container of
// another process binds must never be one of them.
describe("collecting abandoned mounts", () => {
  let poolDir: string;
  let h: Harness;

  beforeAll(async () => {
    poolDir = await mkdtemp(join(tmpdir(), "tack-collect-"));
    h = await Harness.start({ poolDir, replicaId: "a" });
  });
  afterAll(async () => {
    await h.cleanup();
    await rmdir(poolDir).catch(() => undefined);
  });

  // Starts a service of another namespace on the same pool directory and waits for its first collection (stop awaits it).
  const collectFromElsewhere = async () => {
    const other = await startSandboxService({ natsUrl: NATS_URL, namespace: uniqueNamespace(), poolDir, poolSize: 0 });
    await other.stop();
  };

  const mountOf = async (containerId: string) => {
    const path = (await docker.getContainer(containerId).inspect()).Config.Labels[LABELS.mount];
    expect(path).toContain(poolDir);
    return path!;
  };

  it("collect - the mount of a container created directly survives another service's collection, and the container restarts on it", async () => {
    const workspace = await h.workspace();
    const { containerId } = await h.ensure({ sessionId: "kept", workspace });
    const mount = await mountOf(containerId);
    // Old enough to be collected if nothing used it (stat through the mount reads the workspace's times).
    const longAgo = new Date(Date.now() - 10 * 60_000);
    await utimes(workspace, longAgo, longAgo);
    // Stopped from outside: a stopped container still binds its mount.
    await docker.getContainer(containerId).kill();
    await collectFromElsewhere();
    expect((await stat(mount)).isDirectory()).toBe(true);
    expect(await h.ensure({ sessionId: "kept", workspace })).toMatchObject({ containerId, created: false });
    expect((await h.exec("kept", ["ls", "-d", "/workspace"])).stdout).toBe("/workspace\n");
  });

  it("collect - the mount of a container removed behind the service's back is collected", async () => {
    const workspace = await h.workspace();
    const { containerId } = await h.ensure({ sessionId: "gone", workspace });
    const mount = await mountOf(containerId);
    const longAgo = new Date(Date.now() - 10 * 60_000);
    await utimes(workspace, longAgo, longAgo);
    await docker.getContainer(containerId).remove({ force: true });
    await collectFromElsewhere();
    await expect(stat(mount)).rejects.toThrow(/ENOENT/);
    // The workspace itself is untouched: only the service's mount of it went.
    expect((await stat(workspace)).isDirectory()).toBe(true);
  });
});
