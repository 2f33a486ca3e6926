// A workspace path checked, then mounted: a session swaps a directory of its workspace with a
// symlink to / in a tight loop while other sessions are created on that directory. Each of them
// must get the directory that was checked or a clear refusal, never the host's root (decision 0021).
import { randomBytes } from "node:crypto";
import { chown, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DockerBackend } from "../src/backends/docker.js";
import { docker, Harness, rejection, type ExecResult } from "./helpers.js";

// Swaps `sub` (a directory) and `link` (a symlink to /) with renameat2(RENAME_EXCHANGE) until `stop`
// exists: for 1 ms as fast as it can, then 0.5 ms with the directory in place. So the symlink is there
// about a third of the time, and a check and a later mount by name disagree often (about a fifth of
// the sessions on the old code), while a session that finds the directory at both moments is common.
const SWAPPER = `
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
def exchange():
    if libc.renameat2(AT_FDCWD, b"/workspace/sub", AT_FDCWD, b"/workspace/link", RENAME_EXCHANGE) != 0:
        raise SystemExit(f"renameat2: {os.strerror(ctypes.get_errno())}")
swaps = 0
while not os.path.exists("/workspace/stop"):
    until = time.perf_counter() + 0.001
    while time.perf_counter() < until:
        exchange()
        exchange()
        swaps += 2
    until = time.perf_counter() + 0.0005
    while time.perf_counter() < until:
        pass
print(swaps)
`;

const SESSIONS = 24;
// At most this many sessions at once (the tenant may hold 10 sandboxes; the attacker holds one).
const AT_ONCE = 4;

describe("sandbox workspace mounted from what was checked", () => {
  let h: Harness;
  let workspace: string;
  const marker = `marker-${randomBytes(4).toString("hex")}`;

  beforeAll(async () => {
    // A warm pool too: its claims mount onto a slot, the rest start cold; both must hold.
    h = await Harness.start({ poolSize: 2 });
    workspace = await h.workspace();
    await mkdir(join(workspace, "sub"));
    await writeFile(join(workspace, "sub", marker), "the real directory\n");
    await symlink("/", join(workspace, "link"));
    for (const path of ["sub", join("sub", marker)]) await chown(join(workspace, path), 1000, 1000);
    await h.ensure({ sessionId: "attacker", workspace });
    await h.service.whenPoolFull();
  });
  afterAll(async () => {
    await h?.cleanup();
  });

  it("mount race - sessions created on a directory swapped with a symlink to / get the directory or a clear refusal, never the host's root", async () => {
    const swapping: Promise<ExecResult> = h.exec("attacker", ["python3", "-c", SWAPPER], { timeoutMs: 300_000 });
    const outcomes: Array<{ session: string; refused?: string; listing?: string; pooled?: boolean }> = [];
    try {
      for (let first = 0; first < SESSIONS; first += AT_ONCE) {
        await Promise.all(Array.from({ length: Math.min(AT_ONCE, SESSIONS - first) }, async (_, i) => {
          const session = `victim-${first + i}`;
          try {
            const ensured = await h.ensure({ sessionId: session, workspace: join(workspace, "sub") });
            const listing = await h.exec(session, ["bash", "-c", "ls -A /workspace; test -e /workspace/etc/passwd && echo HOST-ROOT"]);
            const pooled = Boolean((await docker.getContainer(ensured.containerId).inspect()).Config.Labels["tack.pool"]);
            outcomes.push({ session, listing: listing.stdout, pooled });
          } catch (error) {
            const { code, message } = error as { code?: string; message: string };
            outcomes.push({ session, refused: `${code}: ${message}` });
          } finally {
            await h.release(session).catch(() => undefined);
          }
        }));
      }
    } finally {
      await writeFile(join(workspace, "stop"), "");
    }
    const swapped = await swapping;
    expect(swapped.exitCode, swapped.stderr).toBe(0);
    expect(Number(swapped.stdout)).toBeGreaterThan(1000);

    const served = outcomes.filter((outcome) => outcome.listing !== undefined);
    const refused = outcomes.filter((outcome) => outcome.refused !== undefined);
    const codes = refused.map((outcome) => outcome.refused?.split(":")[0]).join(", ");
    const hostRoot = served.filter((outcome) => outcome.listing?.includes("HOST-ROOT")).length;
    console.log(`mount race: ${served.length} served (${served.filter((o) => o.pooled).length} from the pool, ${hostRoot} showing the host's root), ${refused.length} refused (${codes}), ${swapped.stdout.trim()} swaps`);
    // Every sandbox that was made sees the real directory, and nothing else.
    for (const outcome of served) expect(outcome.listing, outcome.session).toBe(`${marker}\n`);
    // Every refusal names the rule: the path led outside the roots (or nowhere, mid-swap) when checked, or changed before the mount.
    for (const outcome of refused) {
      expect(outcome.refused, outcome.session).toMatch(/^sandbox\.workspace_forbidden: workspace \/ is outside|^sandbox\.workspace_missing: workspace \S+ does not exist|^sandbox\.workspace_changed: .*decision 0021/);
    }
    // Not vacuous: about half of the attempts find the directory in place at both moments.
    expect(served.length).toBeGreaterThan(0);
    expect(outcomes).toHaveLength(SESSIONS);
    // Nothing left behind by the refusals.
    for (const outcome of refused) expect(await h.containerIds(outcome.session), outcome.session).toEqual([]);
  });
});

// A backend whose sandboxes are served another directory than the one mounted for them: what the
// check after the start exists for, whatever the cause.
class ServedElsewhere extends DockerBackend {
  override async workspaceIdentity(id: string, label: string): Promise<{ dev: string; ino: string } | undefined> {
    const seen = await super.workspaceIdentity(id, label);
    return seen && { dev: seen.dev, ino: `${seen.ino}0` };
  }
}

describe("sandbox workspace verified in the started container", () => {
  let pooled: Harness;
  let cold: Harness;
  let poolDir: string;

  beforeAll(async () => {
    poolDir = await mkdtemp(join(tmpdir(), "tack-served-pool-"));
    const backend = (options: ConstructorParameters<typeof DockerBackend>[0]) => new ServedElsewhere(options);
    [pooled, cold] = await Promise.all([Harness.start({ poolSize: 1, poolDir, backend }), Harness.start({ poolSize: 0, poolDir, backend })]);
    await pooled.service.whenPoolFull();
  });
  afterAll(async () => {
    await pooled?.cleanup();
    await cold?.cleanup();
    await rm(poolDir, { recursive: true, force: true });
  });

  it("mount race - a sandbox served another inode than the one mounted is removed with its mount, cold or from the pool, and the ensure names the rule", async () => {
    // A ready pool container serves the first (a uid-1000 workspace, no network); the second service has none.
    expect(pooled.service.pool().ready).toBe(1);
    for (const h of [pooled, cold]) {
      const workspace = await h.workspace();
      const error = await rejection(h.ensure({ sessionId: "served", workspace }));
      expect(error.code).toBe("sandbox.workspace_changed");
      expect(error.message).toMatch(new RegExp(`instead of workspace ${workspace} .*it was removed.*decision 0021`));
      expect(await h.containerIds("served")).toEqual([]);
      // Nothing stays mounted from it.
      const mounted = (await readFile("/proc/self/mountinfo", "utf8")).split("\n").filter((line) => line.split(" ")[3] === workspace);
      expect(mounted).toEqual([]);
    }
  });
});
