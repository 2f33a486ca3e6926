// The escape and abuse suite: every case asserts containment, under both runtimes. Where gVisor
// (an old 2022 build here) behaves differently, the case says how and asserts what it does.
import { randomBytes } from "node:crypto";
import { access, chown, readFile, rm, stat, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Harness, rejection, type ExecResult } from "./helpers.js";

const SECRET = `tack-secret-${randomBytes(4).toString("hex")}`;
const exists = (path: string) => access(path).then(() => true, () => false);
const py = (code: string) => ["python3", "-c", code];

describe.each(["runc", "runsc"] as const)("sandbox escape suite under %s", (runtime) => {
  const gvisor = runtime === "runsc";
  let h: Harness;
  let workspace: string;
  let readOnlyWorkspace: string;
  let victimWorkspace: string;
  let hostSecretFile: string;
  const id = randomBytes(4).toString("hex");
  const sh = (script: string, options: { session?: string; timeoutMs?: number; maxOutputBytes?: number } = {}): Promise<ExecResult> =>
    h.exec(options.session ?? "rw", ["bash", "-c", script], { timeoutMs: options.timeoutMs, maxOutputBytes: options.maxOutputBytes });

  beforeAll(async () => {
    // A variable of the service's process, and a file on the host outside every workspace, that no sandbox may see.
    process.env.TACK_TEST_SECRET = SECRET;
    hostSecretFile = `/tmp/tack-host-secret-${id}`;
    await writeFile(hostSecretFile, SECRET, { mode: 0o644 });
    h = await Harness.start({ runtime });
    workspace = await h.workspace();
    readOnlyWorkspace = await h.workspace();
    // Owned by the sandbox's user: only the read-only mount stands in the way of changing it.
    await writeFile(join(readOnlyWorkspace, "kept.txt"), "original\n");
    await chown(join(readOnlyWorkspace, "kept.txt"), 1000, 1000);
    victimWorkspace = await h.workspace();
    await Promise.all([
      h.ensure({ sessionId: "rw", workspace }),
      h.ensure({ sessionId: "ro", workspace: readOnlyWorkspace, mode: "read-only" }),
      h.ensure({ sessionId: "other", workspace: await h.workspace() }),
      h.ensure({ sessionId: "victim", workspace: victimWorkspace }),
    ]);
  });
  afterAll(async () => {
    delete process.env.TACK_TEST_SECRET;
    await rm(hostSecretFile, { force: true });
    await h.cleanup();
  });

  it("escape - writes outside the workspace fail, and none reaches the host", async () => {
    for (const path of ["/etc/tack-x", "/usr/local/bin/tack-x", "/tack-x", "/var/tack-x", "/opt/tack/tack-x"]) {
      const result = await sh(`echo x > ${path}`);
      expect(result.exitCode, path).not.toBe(0);
      expect(result.stderr).toMatch(/Read-only file system|Permission denied/);
      expect(await exists(path), path).toBe(false);
    }
    // The host path of the workspace's parent exists inside only as scratch space on the container's own /tmp.
    const hostPath = join(dirname(workspace), `escape-abs-${id}`);
    await sh(`mkdir -p ${dirname(hostPath)} && echo x > ${hostPath}`);
    expect(await exists(hostPath)).toBe(false);
  });

  it("escape - `..` out of the workspace stays inside the container", async () => {
    expect((await sh("cd /workspace/../../..; pwd")).stdout).toBe("/\n");
    expect((await sh(`echo x > /workspace/../../tmp/dotdot-${id} && cat /tmp/dotdot-${id}`)).stdout).toBe("x\n");
    expect(await exists(`/tmp/dotdot-${id}`)).toBe(false);
    expect(await exists(join(dirname(workspace), `dotdot-${id}`))).toBe(false);
    expect((await sh("echo x > /workspace/../escaped")).exitCode).not.toBe(0);
    expect(await exists(join(dirname(workspace), "escaped"))).toBe(false);
  });

  it("escape - a symlink to / in the workspace resolves inside the container, never on the host", async () => {
    expect((await sh("ln -s / /workspace/rootlink")).exitCode).toBe(0);
    const through = await sh(`echo x > /workspace/rootlink/tmp/via-link-${id} && cat /tmp/via-link-${id}`);
    // runc resolves the link in the container's root (its own /tmp); gVisor's file proxy refuses to follow it out of the mount at all.
    if (!gvisor) expect(through.stdout).toBe("x\n");
    else expect(through.exitCode).not.toBe(0);
    expect(await exists(`/tmp/via-link-${id}`)).toBe(false);
    expect((await sh("echo x > /workspace/rootlink/etc/via-link")).exitCode).not.toBe(0);
    expect(await exists("/etc/via-link")).toBe(false);
    // The host's files are not behind it either.
    expect((await sh(`cat /workspace/rootlink${hostSecretFile}`)).stdout).not.toContain(SECRET);
  });

  it("escape - a symlink to a host directory outside the workspace does not lead there", async () => {
    const outside = dirname(workspace);
    expect((await sh(`ln -s ${outside} /workspace/up && mkdir -p ${outside} && echo x > /workspace/up/via-up-${id}`)).exitCode).toBe(0);
    expect(await exists(join(outside, `via-up-${id}`))).toBe(false);
    expect((await sh(`cat /workspace/up/${hostSecretFile.split("/").at(-1)}`)).stdout).not.toContain(SECRET);
  });

  it("escape - hard links to files outside the workspace are refused", async () => {
    const result = await sh("ln /etc/passwd /workspace/passwd-link");
    expect(result.exitCode).not.toBe(0);
    expect(result.stderr).toMatch(/Invalid cross-device link|Operation not permitted|Permission denied/);
  });

  it("escape - /proc/self/root and /proc/1/root lead to the container's root, not the host's", async () => {
    const hostname = (await sh("echo $HOSTNAME")).stdout.trim();
    expect((await sh("cat /proc/self/root/etc/hostname")).stdout.trim()).toBe(hostname);
    for (const path of [hostSecretFile, `/proc/self/root${hostSecretFile}`, `/proc/1/root${hostSecretFile}`]) {
      const result = await sh(`cat ${path}`);
      expect(result.exitCode, path).not.toBe(0);
      expect(result.stdout, path).not.toContain(SECRET);
    }
    expect((await sh("echo x > /proc/self/root/etc/tack-x")).exitCode).not.toBe(0);
    expect((await sh("echo x > /proc/1/root/etc/tack-x")).exitCode).not.toBe(0);
  });

  it("escape - /proc/1 is the container's init and carries no harness environment", async () => {
    const cmdline = (await sh("tr '\\0' ' ' < /proc/1/cmdline")).stdout;
    expect(cmdline).toMatch(/init/);
    const environ = (await sh("tr '\\0' '\\n' < /proc/1/environ")).stdout;
    expect(environ).not.toContain(SECRET);
    expect(environ).not.toMatch(/NATS|TACK_|DOCKER/);
  });

  it("escape - only the sandbox's own processes are visible", async () => {
    const processes = (await sh("ps -e -o comm=")).stdout.trim().split("\n");
    expect(processes.length).toBeLessThan(10);
    expect(processes.join(" ")).not.toMatch(/dockerd|containerd|nats-server|node|vitest|systemd/);
  });

  it("escape - the exec agent's memory is out of the commands' reach, and under runc its channel and environment too", async () => {
    // The agent (every command's parent) is not dumpable, so its /proc entries belong to root.
    expect((await sh("head -c 1 /proc/$PPID/mem")).stderr).toContain("Permission denied");
    const environ = await sh("tr '\\0' '\\n' < /proc/$PPID/environ");
    if (!gvisor) {
      expect(environ.stderr).toContain("Permission denied");
      expect((await sh("ls /proc/$PPID/fd")).stderr).toContain("Permission denied");
      expect((await sh("echo x > /proc/$PPID/fd/1")).stderr).toContain("Permission denied");
    } else {
      // gVisor (2022) does not apply dumpable to environ and fd: the agent's environment is the container's, nothing more.
      expect(environ.stdout.trim().split("\n").map((line) => line.split("=")[0]).sort()).toEqual(["HOME", "HOSTNAME", "LANG", "PATH"]);
    }
  });

  it("escape - a command writing into the agent's channel cannot forge results: it is refused, or it ends the channel", async () => {
    const forged = h.exec("victim", ["bash", "-c", "printf '\\377\\377\\377\\377\\0\\0\\0\\0{}' > /proc/$PPID/fd/1"]);
    if (!gvisor) {
      expect((await forged).stderr).toContain("Permission denied");
    } else {
      // gVisor lets the command reach the channel; the service takes the malformed frame as the end of it.
      const error = await rejection(forged);
      expect(error.code).toBe("sandbox.agent_lost");
      expect(error.message).toContain("announced a 4294967295-byte frame");
      await h.ensure({ sessionId: "victim", workspace: victimWorkspace });
    }
    expect((await h.exec("victim", ["echo", "fine"])).stdout).toBe("fine\n");
  });

  it("escape - ptrace of the exec agent is denied", async () => {
    const attach = await h.exec("rw", py("import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); print(libc.ptrace(16, os.getppid(), 0, 0), ctypes.get_errno())"));
    expect(attach.stdout).toBe("-1 1\n"); // EPERM
  });

  it("escape - no network in a no-network mode: the host's NATS on loopback is not reachable", async () => {
    for (const session of ["rw", "ro"]) {
      for (const [host, port] of [["127.0.0.1", 4222], ["172.17.0.1", 4222]] as const) {
        const result = await h.exec(session, py(`import socket; socket.create_connection(("${host}", ${port}), timeout=3); print("connected")`));
        expect(result.exitCode, `${session} ${host}`).not.toBe(0);
        expect(result.stdout).toBe("");
        expect(result.stderr).toMatch(/Connection refused|Network is unreachable|No route to host/);
      }
    }
  });

  it("escape - no network in a no-network mode: the metadata address is not reachable", async () => {
    const result = await sh("python3 -c \"import urllib.request; urllib.request.urlopen('http://169.254.169.254/latest/meta-data/', timeout=3)\"");
    expect(result.exitCode).not.toBe(0);
    expect(result.stderr).toMatch(/Network is unreachable|No route to host/);
  });

  it("escape - no network in a no-network mode: DNS does not resolve", async () => {
    const result = await h.exec("rw", py("import socket; print(socket.getaddrinfo('example.com', 443))"));
    expect(result.exitCode).not.toBe(0);
    expect(result.stderr).toContain("gaierror");
    expect((await h.exec("rw", ["getent", "hosts", "example.com"])).exitCode).not.toBe(0);
  });

  it("escape - no network in a no-network mode: loopback is the only interface and raw sockets are denied", async () => {
    expect((await h.exec("rw", py("import socket; print([name for _, name in socket.if_nameindex()])"))).stdout).toBe("['lo']\n");
    const raw = await h.exec("rw", py("import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)"));
    expect(raw.exitCode).not.toBe(0);
    expect(raw.stderr).toContain("Operation not permitted");
  });

  it("abuse - a fork bomb is bounded by the pids limit", async () => {
    // The limit is in force in the host's pids cgroup of the container.
    const [victim] = await h.containerIds("victim");
    expect(Number(await readFile(`/sys/fs/cgroup/pids/docker/${victim}/pids.max`, "utf8"))).toBe(gvisor ? 2048 : 256);
    const bomb = sh("for i in $(seq 600); do sleep 30 & done; wait", { session: "victim", timeoutMs: 5000 });
    if (!gvisor) {
      // runc: forks fail once 256 processes run; the timeout kills the whole group and the sandbox carries on.
      const result = await bomb;
      expect(result.stderr).toMatch(/fork: (retry: )?Resource temporarily unavailable/);
      expect(result.timedOut).toBe(true);
      expect((await h.exec("victim", ["ps", "-e", "-o", "pid="])).stdout.trim().split("\n").length).toBeLessThan(10);
    } else {
      // gVisor: the cgroup counts the sandbox kernel's host threads (about six per process) and reaching it stops the
      // whole sandbox instead of failing a fork. So the bomb ends at its timeout, or with the sandbox (the command then
      // fails with sandbox.agent_lost); either way the next ensure gives a working sandbox.
      const outcome = await bomb.then((result) => result, (error: { code: string }) => error);
      if ("code" in outcome) expect(outcome.code).toBe("sandbox.agent_lost");
      else expect(outcome.timedOut).toBe(true);
      await h.ensure({ sessionId: "victim", workspace: victimWorkspace });
    }
    expect((await h.exec("victim", ["echo", "alive"])).stdout).toBe("alive\n");
  });

  it("abuse - a memory bomb ends with a clear out-of-memory result", async () => {
    const bomb = h.exec("victim", py("chunks = []\nwhile True: chunks.append(bytearray(64 * 1024 * 1024))"), { timeoutMs: 60_000 });
    if (!gvisor) {
      // runc: the kernel kills the command at the 1 GiB limit (137) and the agent says so; the sandbox carries on.
      const result = await bomb;
      expect(result).toMatchObject({ exitCode: 137, timedOut: false });
      expect(result.stderr).toContain("out-of-memory killer");
    } else {
      // gVisor: the memory cgroup holds the whole sandbox kernel, which the host kills; the error says why.
      const error = await rejection(bomb);
      expect(error.code).toBe("sandbox.agent_lost");
      expect(error.message).toContain("memory limit");
      await h.ensure({ sessionId: "victim", workspace: victimWorkspace });
    }
    expect((await h.exec("victim", ["echo", "alive"])).stdout).toBe("alive\n");
  });

  it("abuse - filling the scratch tmpfs stops at its size with an error", async () => {
    // HOME is the smaller tmpfs (64 MiB), so filling it is quick even under gVisor; /tmp has the same kind of limit.
    const result = await sh("head -c 100M /dev/zero > $HOME/fill; echo rc=$?; wc -c < $HOME/fill; rm -f $HOME/fill");
    expect(result.stderr).toContain("No space left on device");
    const [rc, size] = result.stdout.trim().split("\n");
    expect(rc).toBe("rc=1");
    expect(Number(size)).toBeLessThanOrEqual(64 * 1024 * 1024);
    const sizes = await h.exec("rw", py("import os\nfor path in ('/tmp', '/home/tack'):\n    s = os.statvfs(path)\n    print(path, s.f_blocks * s.f_frsize // 2**20)"));
    expect(sizes.stdout).toBe("/tmp 256\n/home/tack 64\n");
  });

  it("abuse - an output flood is cut at the cap and ended at the timeout", async () => {
    const result = await h.exec("rw", ["yes"], { timeoutMs: 1500, maxOutputBytes: 10_000 });
    expect(result).toMatchObject({ timedOut: true, truncated: true });
    expect(result.stdout.length).toBe(10_000);
  });

  it("escape - setuid binaries do not elevate: even setuid-root su runs as uid 1000", async () => {
    // (Python's stat: gVisor 2022 fails coreutils' statx with EINVAL.)
    expect((await h.exec("rw", py("import os; s = os.stat('/usr/bin/su'); print(s.st_uid, oct(s.st_mode))"))).stdout).toBe("0 0o104755\n");
    // su waits for a password on a pipe that stays open; its /proc status shows the ids it really runs with.
    const uids = await sh("su root -c id < <(sleep 3) >/dev/null 2>&1 & sleep 1; grep -E '^(Uid|Gid):' /proc/$!/status; kill $! 2>/dev/null; true");
    expect(uids.stdout).toMatch(/^Uid:\s+1000\s+1000\s+1000\s+1000$/m);
    expect((await sh("su root -c id < /dev/null")).exitCode).not.toBe(0);
    expect((await sh("command -v sudo")).exitCode).not.toBe(0);
    // A copy with the bit set belongs to uid 1000, and /tmp ignores the bit anyway (nosuid).
    expect((await sh("cp /usr/bin/su /tmp/su && chmod 4755 /tmp/su && python3 -c \"import os; print(os.stat('/tmp/su').st_uid)\"")).stdout).toBe("1000\n");
  });

  it("escape - no capabilities and no-new-privileges", async () => {
    const status = (await sh("cat /proc/self/status")).stdout;
    for (const set of ["CapInh", "CapPrm", "CapEff", "CapBnd"]) expect(status).toMatch(new RegExp(`^${set}:\\s+0{16}$`, "m"));
    // gVisor's /proc/self/status has no NoNewPrivs line; the flag itself is read with prctl under both runtimes.
    if (!gvisor) expect(status).toMatch(/^NoNewPrivs:\s+1$/m);
    expect((await h.exec("rw", py("import ctypes; print(ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))"))).stdout).toBe("1\n");
  });

  it("escape - no Docker or containerd socket inside", async () => {
    const result = await sh("for s in /var/run/docker.sock /run/docker.sock /run/containerd/containerd.sock /var/run/containerd/containerd.sock; do test -e $s && echo found $s; done; true");
    expect(result.stdout).toBe("");
    const connect = await h.exec("rw", py("import socket; s = socket.socket(socket.AF_UNIX); s.connect('/var/run/docker.sock'); print('connected')"));
    expect(connect.exitCode).not.toBe(0);
    expect(connect.stdout).toBe("");
  });

  it("escape - the environment carries nothing of the harness", async () => {
    const env = (await h.exec("rw", ["env"])).stdout;
    expect(env).not.toContain(SECRET);
    expect(env.trim().split("\n").map((line) => line.split("=")[0]).sort()).toEqual(["HOME", "HOSTNAME", "LANG", "PATH"]);
  });

  it("abuse - killing the exec agent ends the session's commands cleanly, and ensure brings the sandbox back", async () => {
    const running = h.exec("victim", ["sleep", "30"]);
    await new Promise((resolve) => setTimeout(resolve, 300));
    const killer = rejection(h.exec("victim", ["bash", "-c", "kill -9 $PPID"]));
    const [sleeper, killed] = await Promise.all([rejection(running), killer]);
    for (const error of [sleeper, killed]) {
      expect(error.code).toBe("sandbox.agent_lost");
      expect(error.message).toContain("the command's result is lost");
    }
    const after = await rejection(h.exec("victim", ["true"]));
    expect(after.code).toBe("sandbox.not_found");
    expect(after.message).toContain("exec agent stopped");
    expect(await h.ensure({ sessionId: "victim", workspace: victimWorkspace })).toMatchObject({ created: false });
    expect((await h.exec("victim", ["ps", "-e", "-o", "args="])).stdout).not.toContain("sleep 30");
  });

  it("escape - read-only mode cannot change the workspace in any way", async () => {
    for (const script of ["touch /workspace/new", "echo y >> /workspace/kept.txt", "rm /workspace/kept.txt", "mkdir /workspace/d", "chmod 777 /workspace/kept.txt", "ln -s / /workspace/link", "mv /workspace/kept.txt /workspace/moved"]) {
      const result = await sh(script, { session: "ro" });
      expect(result.exitCode, script).not.toBe(0);
      expect(result.stderr, script).toContain("Read-only file system");
    }
    expect(await readFile(join(readOnlyWorkspace, "kept.txt"), "utf8")).toBe("original\n");
    expect((await stat(join(readOnlyWorkspace, "kept.txt"))).mode & 0o777).toBe(0o644);
  });

  it("escape - the root filesystem is read-only; only /tmp and HOME are writable", async () => {
    for (const script of ["touch /usr/bin/tack-x", "echo x >> /etc/passwd", "rm -f /bin/ls", "mkdir /root/x"]) {
      expect((await sh(script)).exitCode, script).not.toBe(0);
    }
    expect((await sh("grep -c . /etc/passwd >/dev/null && test -x /bin/ls && echo intact")).stdout).toBe("intact\n");
    expect((await sh("echo x > /tmp/ok && echo y > $HOME/ok && cat /tmp/ok $HOME/ok")).stdout).toBe("x\ny\n");
  });

  it("escape - the agent's code cannot be replaced", async () => {
    const result = await sh("echo 'print(1)' > /opt/tack/agent.py");
    expect(result.exitCode).not.toBe(0);
    expect(result.stderr).toMatch(/Read-only file system|Permission denied/);
  });

  it("escape - mount and umount are denied", async () => {
    for (const script of ["mount -t tmpfs none /tmp", "umount /workspace", "mount --bind / /tmp", "mount -o remount,rw /"]) {
      const result = await sh(script);
      expect(result.exitCode, script).not.toBe(0);
      expect(result.stderr, script).toMatch(/must be superuser|Operation not permitted|Permission denied/);
    }
    expect((await sh("echo x > /workspace/still-mounted && cat /workspace/still-mounted")).stdout).toBe("x\n");
  });

  it("escape - new namespaces give nothing: no user namespace under runc, a powerless one under gVisor", async () => {
    const script = "id -u; touch /etc/x || echo no-etc; mount -t tmpfs none /tmp || echo no-mount; echo u > /workspace/from-userns";
    const unshare = await sh(`unshare -Ur bash -c '${script}'`);
    if (!gvisor) {
      // Docker's seccomp profile refuses new namespaces without CAP_SYS_ADMIN.
      expect(unshare.exitCode).not.toBe(0);
      expect(unshare.stderr).toContain("Operation not permitted");
      expect(await exists(join(workspace, "from-userns"))).toBe(false);
    } else {
      // gVisor's own kernel implements user namespaces: "root" in one still cannot write the root filesystem or
      // mount, and what it writes to the workspace belongs to uid 1000 on the host.
      expect(unshare.stdout).toBe("0\nno-etc\nno-mount\n");
      expect((await stat(join(workspace, "from-userns"))).uid).toBe(1000);
    }
    expect((await sh("unshare -m true")).exitCode).not.toBe(0);
    expect(await exists("/etc/x")).toBe(false);
  });

  it("escape - /sys and kernel knobs are not writable", async () => {
    for (const path of ["/proc/sys/kernel/hostname", "/proc/sys/vm/drop_caches", "/proc/sysrq-trigger", "/sys/kernel/mm/transparent_hugepage/enabled", "/sys/fs/cgroup/tack-x"]) {
      const result = await sh(`echo 1 > ${path}`);
      expect(result.exitCode, path).not.toBe(0);
    }
  });

  it("escape - creating device nodes is denied, and /dev holds no disks or kernel memory", async () => {
    const mknod = await sh("mknod /tmp/sda b 8 0 && head -c 1 /tmp/sda");
    expect(mknod.exitCode).not.toBe(0);
    // runc: no CAP_MKNOD. gVisor makes the node in its own in-memory /tmp, but no device is behind it.
    expect(mknod.stderr).toContain(gvisor ? "No such device or address" : "Operation not permitted");
    expect((await sh("for d in /dev/mem /dev/kmem /dev/port /dev/sda /dev/vda /dev/nvme0 /dev/kmsg; do test -e $d && echo found $d; done; true")).stdout).toBe("");
  });

  it("escape - changing user or root directory is denied", async () => {
    for (const code of ["import os; os.setuid(0)", "import os; os.setgid(0)", "import os; os.chroot('/tmp')", "import os; os.setgroups([0])"]) {
      const result = await h.exec("rw", py(code));
      expect(result.exitCode, code).not.toBe(0);
      expect(result.stderr, code).toContain("PermissionError");
    }
  });

  it("escape - one session sees neither the processes nor the scratch files of another", async () => {
    await sh(`echo mine > /tmp/other-${id}; sleep 20 >/dev/null 2>&1 & echo started`, { session: "other" });
    expect((await sh(`cat /tmp/other-${id}`)).exitCode).not.toBe(0);
    expect((await h.exec("rw", ["ps", "-e", "-o", "args="])).stdout).not.toContain("sleep 20");
  });
});
