// The exec agent containers run is the service's own copy, taken at start: root's, read-only,
// content-addressed, and never the checkout's file.
import { createHash } from "node:crypto";
import { chmod, copyFile, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AGENT_SOURCE, defaultAgentDir, installAgent } from "../src/agent-copy.js";
import { docker, Harness, rejection } from "./helpers.js";

const sha256 = (content: Buffer | string) => createHash("sha256").update(content).digest("hex");
const checkout = join(import.meta.dirname, "../../..");

describe("sandbox exec agent copy", () => {
  let h: Harness;
  let scratch: string;
  let source: string;
  let started: string;

  beforeAll(async () => {
    scratch = await mkdtemp(join(tmpdir(), "tack-agent-copy-"));
    // A stand-in for services/sandbox/agent/agent.py, so that changing it disturbs no other test using the checkout.
    source = join(scratch, "agent.py");
    await copyFile(AGENT_SOURCE, source);
    started = sha256(await readFile(source));
    h = await Harness.start({ agentSource: source });
  });
  afterAll(async () => {
    await h.cleanup();
    await rm(scratch, { recursive: true, force: true });
  });

  it("agent - a container started after the source changed runs the copy taken at start: root's, read-only, outside the checkout", async () => {
    // A change that would stop any agent that ran it.
    await writeFile(source, "import sys\nsys.exit(3)\n");
    await h.ensure({ sessionId: "after-change", workspace: await h.workspace() });
    expect((await h.exec("after-change", ["sha256sum", "/opt/tack/agent.py"])).stdout).toBe(`${started}  /opt/tack/agent.py\n`);
    expect((await h.exec("after-change", ["stat", "-c", "%u:%g %a %n", "/opt/tack", "/opt/tack/agent.py"])).stdout).toBe("0:0 755 /opt/tack\n0:0 444 /opt/tack/agent.py\n");
    const write = await h.exec("after-change", ["bash", "-c", "echo 'print(1)' > /opt/tack/agent.py"]);
    expect(write.stderr).toMatch(/Read-only file system|Permission denied/);

    // On the host: the content-addressed directory under the service's agent directory, root's, mounted read-only.
    const [id] = await h.containerIds("after-change");
    const mount = (await docker.getContainer(id!).inspect()).Mounts.find((m) => m.Destination === "/opt/tack");
    expect(mount).toMatchObject({ Source: join(defaultAgentDir(), started), RW: false });
    expect(mount!.Source.startsWith(`${checkout}/`)).toBe(false);
    const [dir, file] = await Promise.all([stat(mount!.Source), stat(join(mount!.Source, "agent.py"))]);
    expect([dir.uid, dir.gid, dir.mode & 0o7777, file.uid, file.gid, file.mode & 0o7777]).toEqual([0, 0, 0o755, 0, 0, 0o444]);
    expect(sha256(await readFile(join(mount!.Source, "agent.py")))).toBe(started);

    // Restarted (its agent killed from outside), the container still runs that copy.
    await docker.getContainer(id!).kill();
    await expect.poll(async () => (await rejection(h.exec("after-change", ["true"]))).code, { timeout: 10_000 }).toBe("sandbox.not_found");
    expect(await h.ensure({ sessionId: "after-change", workspace: (await docker.getContainer(id!).inspect()).Config.Labels["tack.workspace"]! })).toMatchObject({ created: false });
    expect((await h.exec("after-change", ["sha256sum", "/opt/tack/agent.py"])).stdout).toBe(`${started}  /opt/tack/agent.py\n`);
  });

  it("agent - the copy is checked at every start: a tampered one is replaced, a directory others may write is refused", async () => {
    const stateDir = join(scratch, "state");
    await copyFile(AGENT_SOURCE, source);
    const installed = await installAgent(source, stateDir);
    expect(installed).toEqual({ dir: join(stateDir, started), sha256: started });
    const copy = join(installed.dir, "agent.py");
    await chmod(copy, 0o644);
    await writeFile(copy, "import sys\nsys.exit(3)\n");
    expect(await installAgent(source, stateDir)).toEqual(installed);
    expect(sha256(await readFile(copy))).toBe(started);
    expect((await stat(copy)).mode & 0o7777).toBe(0o444);

    // Anybody who may write the directory, or one above it, could swap the copy: refused.
    for (const dir of [stateDir, scratch]) {
      const mode = (await stat(dir)).mode & 0o7777;
      await chmod(dir, 0o777);
      const refused = await rejection(installAgent(source, stateDir));
      await chmod(dir, mode);
      expect(refused.code).toBe("sandbox.agent_install_failed");
      expect(refused.message).toContain(`${dir} is writable by every user (mode 777)`);
    }
    expect(await installAgent(source, stateDir)).toEqual(installed);

    const missing = await rejection(installAgent(join(scratch, "nothing.py"), stateDir));
    expect(missing.code).toBe("sandbox.agent_install_failed");
    expect(missing.message).toContain("ENOENT");
  });
});
