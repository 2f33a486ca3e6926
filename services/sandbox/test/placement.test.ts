import { spawn, type ChildProcess } from "node:child_process";
import { readFile, rmdir } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Kvm } from "@nats-io/kv";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stopWaiting, waitFor } from "@tack/testkit";
import { placementBucket, replicaSubject, startSandboxService, type Placement } from "../src/index.js";
import { disposeReplicaDir } from "../src/mounts.js";
import { docker, Harness, NATS_URL, rejection, uniqueNamespace } from "./helpers.js";

const root = join(import.meta.dirname, "../../..");

describe("sandbox placement across replicas", () => {
  const namespace = uniqueNamespace();
  const poolDir = join(tmpdir(), `tack-pool-${namespace}`);
  let replicaA: ChildProcess;
  let h: Harness;
  let workspace: string;

  beforeAll(async () => {
    // Replica a runs as its own process so that it can really die (SIGKILL, no cleanup).
    replicaA = spawn(process.execPath, ["--import", "tsx", "services/sandbox/src/main.ts"], {
      cwd: root,
      env: { ...process.env, NATS_URL, TACK_NAMESPACE: namespace, TACK_SANDBOX_REPLICA: "a", TACK_SANDBOX_POOL_SIZE: "1", TACK_SANDBOX_POOL_DIR: poolDir },
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    replicaA.stderr?.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    await waitFor("replica a to fill its pool", () => {
      if (replicaA.exitCode !== null) stopWaiting(new Error(`replica a exited (${replicaA.exitCode}): ${stderr}`));
      return stderr.includes("warm pool full");
    });
    // Replica b starts only after a's session exists, so that a is the one that creates it.
    h = await Harness.start({ namespace, replicaId: "b", poolSize: 0, idleTimeoutMs: 2000 });
    await h.service.stop();
    workspace = await h.workspace();
  });
  afterAll(async () => {
    replicaA.kill("SIGKILL");
    await h.cleanup();
    // What a left if a test failed before b collected it.
    for (const id of await h.containerIds()) await docker.getContainer(id).remove({ force: true });
    await disposeReplicaDir(join(poolDir, namespace, "a"));
    await rmdir(poolDir).catch(() => undefined);
  });

  it("placement - the owner is recorded in KV, and either replica serves the session", async () => {
    // Only a serves now: the session is claimed from a's pool.
    const ensured = await h.ensure({ sessionId: "s1", workspace });
    expect(ensured.created).toBe(true);
    const kv = await new Kvm(h.bus.nc).open(placementBucket(namespace));
    const entry = await kv.get("s1.workspace-write");
    const placement = entry?.json<Placement>();
    expect(placement).toMatchObject({ replica: "a", container_id: ensured.containerId, tenant: "acme", runtime: "runc" });
    expect(placement?.slot).toContain(poolDir);

    h.service = await startSandboxService({ natsUrl: NATS_URL, namespace, replicaId: "b", poolSize: 0, idleTimeoutMs: 2000 });
    // Watch what b forwards to a: a plain subscriber sees the requests a serves in its queue group.
    let forwarded = 0;
    const watch = h.bus.nc.subscribe(replicaSubject(namespace, "a", "exec"), { callback: () => void (forwarded += 1) });
    await h.bus.nc.flush();
    const results = await Promise.all(Array.from({ length: 30 }, (_, i) => h.exec("s1", ["echo", String(i)])));
    watch.unsubscribe();
    expect(results.map((result) => result.stdout)).toEqual(Array.from({ length: 30 }, (_, i) => `${i}\n`));
    // The queue group spreads requests over both replicas; b sent its share on to the owner.
    expect(forwarded).toBeGreaterThan(0);
    for (let i = 0; i < 6; i++) expect(await h.ensure({ sessionId: "s1", workspace })).toMatchObject({ containerId: ensured.containerId, created: false });

    // Process listings are forwarded the same way: whichever replica takes the request, a's agent lists.
    let listingsForwarded = 0;
    const watchListings = h.bus.nc.subscribe(replicaSubject(namespace, "a", "processes"), { callback: () => void (listingsForwarded += 1) });
    await h.bus.nc.flush();
    await h.exec("s1", ["bash", "-c", "sleep 61 >/dev/null 2>&1 &"]);
    // bash returns once it has forked: the child may not have exec'd sleep yet.
    await waitFor("the background sleep to be listed", async () => (await h.processes("s1")).processes.some((p) => p.command === "sleep 61"));
    const listings = await Promise.all(Array.from({ length: 12 }, () => h.processes("s1")));
    watchListings.unsubscribe();
    for (const listing of listings) expect(listing.processes.map((p) => p.command)).toContain("sleep 61");
    expect(listingsForwarded).toBeGreaterThan(0);
    await h.exec("s1", ["pkill", "-x", "sleep"]);
  });

  it("placement - a dead replica's containers, pool slots and records are removed by a live one, and its sessions start again there", async () => {
    // s1, and the pool container a started after the claim.
    await waitFor("a's pool to refill", async () => (await h.containerIds()).length === 2);
    replicaA.kill("SIGKILL");
    await waitFor("a's containers to be removed", async () => (await h.containerIds()).length === 0);
    const mounts = async () => (await readFile("/proc/self/mountinfo", "utf8")).split("\n").filter((line) => line.split(" ")[4]?.startsWith(poolDir));
    // Its slots (the claimed one with s1's workspace on it) and its replica directory are unmounted.
    await waitFor("a's mounts to be gone", async () => {
      const left = await mounts();
      if (left.length === 0) return true;
      throw new Error(`still mounted: ${left.join("; ")}`);
    }, { timeoutMs: 5_000 });
    const kv = await new Kvm(h.bus.nc).open(placementBucket(namespace));
    expect((await kv.get("s1.workspace-write"))?.operation ?? "gone").not.toBe("PUT");
    expect((await rejection(h.exec("s1", ["true"]))).code).toBe("sandbox.not_found");
    const again = await h.ensure({ sessionId: "s1", workspace });
    expect(again.created).toBe(true);
    expect((await kv.get("s1.workspace-write"))?.json<Placement>()).toMatchObject({ replica: "b", container_id: again.containerId });
    expect((await h.exec("s1", ["echo", "back"])).stdout).toBe("back\n");
  });
});
