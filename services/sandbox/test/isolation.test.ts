import { readFile, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Harness } from "./helpers.js";

const CONNECT = "import socket; socket.create_connection(('1.1.1.1', 53), timeout=3); print('connected')";

describe("sandbox isolation", () => {
  let h: Harness;
  let workspace: string;
  beforeAll(async () => {
    // A variable the service process has and a sandbox must never see.
    process.env.TACK_TEST_SECRET = "do-not-leak-4f2a";
    h = await Harness.start();
    workspace = await h.workspace();
    await h.ensure({ sessionId: "rw", workspace, mode: "workspace-write" });
    await h.ensure({ sessionId: "ro", workspace, mode: "read-only" });
  });
  afterAll(async () => {
    delete process.env.TACK_TEST_SECRET;
    await h.cleanup();
  });

  it("isolation - commands run as the unprivileged workspace owner", async () => {
    expect((await h.exec("rw", ["id", "-u"])).stdout).toBe("1000\n");
    expect((await h.exec("rw", ["id", "-g"])).stdout).toBe("1000\n");
  });

  it("isolation - a workspace owned by another user runs commands as the configured user, writing as the owner through an ID mapping", async () => {
    const workspace = await h.workspace(1234, 1234);
    await h.ensure({ sessionId: "other-owner", workspace });
    expect((await h.exec("other-owner", ["id", "-u"])).stdout).toBe("1000\n");
    expect((await h.exec("other-owner", ["touch", "/workspace/mine"])).exitCode).toBe(0);
    expect((await stat(join(workspace, "mine"))).uid).toBe(1234);
  });

  it("isolation - no capabilities and no-new-privileges", async () => {
    const status = (await h.exec("rw", ["cat", "/proc/self/status"])).stdout;
    expect(status).toMatch(/^CapEff:\s+0000000000000000$/m);
    expect(status).toMatch(/^CapBnd:\s+0000000000000000$/m);
    expect(status).toMatch(/^NoNewPrivs:\s+1$/m);
  });

  it("isolation - workspace-write and read-only have no network", async () => {
    for (const session of ["rw", "ro"]) {
      expect((await h.exec(session, ["ls", "/sys/class/net"])).stdout).toBe("lo\n");
      const connect = await h.exec(session, ["python3", "-c", CONNECT]);
      expect(connect.exitCode).not.toBe(0);
      expect(connect.stdout).toBe("");
    }
  });

  it("isolation - danger-full-access has a network interface", async () => {
    await h.ensure({ sessionId: "full", workspace: await h.workspace(), mode: "danger-full-access" });
    expect((await h.exec("full", ["ls", "/sys/class/net"])).stdout.split("\n")).toContain("eth0");
  });

  it("isolation - workspace-write writes land in the host workspace", async () => {
    const result = await h.exec("rw", ["bash", "-c", "echo from-sandbox > /workspace/out.txt"]);
    expect(result.exitCode).toBe(0);
    expect(await readFile(join(workspace, "out.txt"), "utf8")).toBe("from-sandbox\n");
    expect((await stat(join(workspace, "out.txt"))).uid).toBe(1000);
  });

  it("isolation - read-only mode cannot write the workspace but reads it", async () => {
    await writeFile(join(workspace, "seen.txt"), "host file\n");
    const write = await h.exec("ro", ["touch", "/workspace/nope"]);
    expect(write.exitCode).not.toBe(0);
    expect(write.stderr).toContain("Read-only file system");
    expect((await h.exec("ro", ["cat", "/workspace/seen.txt"])).stdout).toBe("host file\n");
  });

  it("isolation - the root filesystem is read-only, /tmp and HOME are writable scratch", async () => {
    const write = await h.exec("rw", ["touch", "/etc/tack-was-here"]);
    expect(write.exitCode).not.toBe(0);
    expect(write.stderr).toMatch(/Read-only file system|Permission denied/);
    expect((await h.exec("rw", ["bash", "-c", "echo x > /tmp/scratch && echo y > \"$HOME/scratch\" && cat /tmp/scratch \"$HOME/scratch\""])).stdout).toBe("x\ny\n");
  });

  it("isolation - the environment carries nothing from the service's host", async () => {
    expect(process.env.TACK_TEST_SECRET).toBeDefined();
    const env = (await h.exec("rw", ["env"])).stdout;
    expect(env).not.toContain("TACK_TEST_SECRET");
    expect(env).not.toContain("do-not-leak");
    const names = env.trim().split("\n").map((line) => line.split("=")[0]).sort();
    expect(names).toEqual(["HOME", "HOSTNAME", "LANG", "PATH"]);
  });
});
