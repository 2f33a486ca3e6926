// No set-id file reaches the host through a sandbox (decision 0021): what a sandbox writes in a
// workspace owned by someone else is stored as that owner's (root's here, through the ID
// mapping), so a set-uid bit set inside would make a root shell for every local user outside.
import { execFile } from "node:child_process";
import { chmod, readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Harness } from "./helpers.js";

const run = promisify(execFile);
const NOBODY = 65534;

// What a command in the sandbox tries, each in its own way of setting a set-id bit on a new file.
const ATTEMPTS = [
  "cp /bin/bash rs && chmod 4755 rs",
  "cp /bin/bash rg && chmod 2755 rg",
  "cp /bin/bash rf && chmod u+s,g+s rf",
  "install -m 4755 /bin/bash ri",
  `python3 -c "import os, shutil; fd = os.open('ro', os.O_CREAT | os.O_WRONLY, 0o4755); os.write(fd, open('/bin/bash', 'rb').read()); os.close(fd)"`,
  `python3 -c "import os; os.mknod('rm', 0o100000 | 0o6755)"`,
  `python3 -c "import os; fd = os.open('rx', os.O_CREAT | os.O_WRONLY, 0o755); os.write(fd, open('/bin/bash', 'rb').read()); os.fchmod(fd, 0o4755)"`,
];
const FILES = ["rs", "rg", "rf", "ri", "ro", "rm", "rx"];

describe.each([
  // runc: a root-owned workspace, ID-mapped (files the sandbox makes are root's on the host).
  { runtime: "runc", owner: 0 },
  // gVisor cannot map owners: a workspace of the sandbox user's own (a set-uid file would be uid 1000's).
  { runtime: "runsc", owner: 1000 },
] as const)("sandbox set-id files under $runtime", ({ runtime, owner }) => {
  let h: Harness;
  let workspace: string;

  beforeAll(async () => {
    h = await Harness.start({ runtime });
    workspace = await h.workspace(owner, owner);
    // Open to every local user, like a checkout under a home directory others may enter.
    await chmod(workspace, 0o755);
    await h.ensure({ sessionId: "setid", workspace });
  });
  afterAll(async () => {
    await h?.cleanup();
  });

  it("set-id - the host-side mount the container's /workspace comes from is nosuid and nodev", async () => {
    const table = await readFile("/proc/self/mountinfo", "utf8");
    // Field 4 is the mount's root inside its file system: the workspace's path (on the file system holding /tmp).
    const mounts = table.split("\n").filter((line) => line.split(" ")[3] === workspace);
    expect(mounts.length).toBeGreaterThan(0);
    for (const line of mounts) expect(line.split(" ")[5]?.split(",")).toEqual(expect.arrayContaining(["nosuid", "nodev"]));
  });

  it("set-id - bits set in the sandbox never land on the host, and a copied shell runs as the unprivileged user who starts it", async () => {
    for (const attempt of ATTEMPTS) {
      const result = await h.exec("setid", ["bash", "-c", attempt]);
      expect(result.exitCode, attempt).not.toBe(0);
      expect(result.stderr, attempt).toMatch(/Operation not permitted/);
    }
    // From the host: whatever exists is the workspace owner's and carries no set-id bit.
    for (const name of FILES) {
      const info = await stat(join(workspace, name)).catch(() => undefined);
      if (!info) continue;
      expect(info.uid, name).toBe(owner);
      expect(info.mode & 0o6000, `${name} mode ${info.mode.toString(8)}`).toBe(0);
    }
    // Ordinary modes still work. (Python's stat: gVisor 2022 fails coreutils' statx with EINVAL.)
    const ordinary = await h.exec("setid", ["bash", "-c", `cp /bin/true t && chmod 755 t && ./t && python3 -c "import os; print(oct(os.stat('t').st_mode & 0o7777))"`]);
    expect(ordinary.stdout).toBe("0o755\n");
    // The shells that were copied run as the local user who starts them (after the sandbox is gone: gVisor's file proxy holds them open).
    await h.release("setid");
    const runnable = [];
    for (const name of FILES) if (((await stat(join(workspace, name)).catch(() => undefined))?.mode ?? 0) & 0o001) runnable.push(name);
    expect(runnable).toEqual(expect.arrayContaining(["rs", "rg", "rf", "rx"]));
    for (const name of runnable) {
      const { stdout } = await run("setpriv", [`--reuid=${NOBODY}`, `--regid=${NOBODY}`, "--clear-groups", join(workspace, name), "-p", "-c", "id -u; id -g"]);
      expect(stdout, name).toBe(`${NOBODY}\n${NOBODY}\n`);
    }
  });

});
