// Where a running Docker container's files are served from, seen from the host: the directory
// through which the service reads the device and inode of what the container has at
// /workspace (decision 0021). Under runc that is the container's own mount namespace; under
// gVisor the sandbox kernel sees nothing of the host and its file proxy (the gofer) holds the
// container's mounts instead.
import { readdir, readFile, stat } from "node:fs/promises";
import { TackError } from "@tack/bus";

/**
 * The device and inode (decimal strings) of `path` inside the container whose main process
 * is `pid` (Docker's State.Pid), read through `/proc/<pid>/root`, or, with `gvisor`, through
 * the root of the gofer that serves container `containerId`. Needs root on the Docker host
 * (the container's processes are not dumpable); fails with `sandbox.workspace_mount_failed`.
 */
export async function servedIdentity(pid: number, containerId: string, gvisor: boolean, path: string): Promise<{ dev: string; ino: string }> {
  try {
    const root = gvisor ? await goferRoot(pid, containerId) : `/proc/${pid}/root`;
    const info = await stat(`${root}${path}`, { bigint: true });
    return { dev: String(info.dev), ino: String(info.ino) };
  } catch (error) {
    if (error instanceof TackError) throw error;
    throw new TackError(
      "sandbox.workspace_mount_failed",
      `cannot read which directory container ${containerId.slice(0, 12)} is served at ${path} (${(error as Error).message}); the sandbox service checks it on the host, which needs root on the Docker host`,
      { cause: error },
    );
  }
}

// gVisor starts the gofer beside the sandbox process (same parent); it is named runsc-gofer and its arguments carry the container's id.
async function goferRoot(sandboxPid: number, containerId: string): Promise<string> {
  const parent = parentOf(await readFile(`/proc/${sandboxPid}/stat`, "utf8"));
  for (const entry of await readdir("/proc")) {
    if (!/^\d+$/.test(entry) || Number(entry) === sandboxPid) continue;
    const [status, cmdline] = await Promise.all([readFile(`/proc/${entry}/stat`, "utf8"), readFile(`/proc/${entry}/cmdline`, "utf8")]).catch(() => ["", ""]);
    if (!status || parentOf(status) !== parent) continue;
    const argv = cmdline.split("\0");
    if (argv[0] === "runsc-gofer" && argv.some((arg) => arg.includes(containerId))) return `/proc/${entry}/root`;
  }
  throw new TackError(
    "sandbox.workspace_mount_failed",
    `cannot find the gVisor file proxy (runsc-gofer) of container ${containerId.slice(0, 12)} beside its sandbox process ${sandboxPid}, so what it serves at /workspace cannot be checked; this runsc version is not supported by the sandbox service`,
  );
}

// The parent pid from a /proc/<pid>/stat line: the fields after the command name, which is in parentheses and may hold anything.
function parentOf(status: string): number {
  return Number(status.slice(status.lastIndexOf(")") + 2).split(" ")[1]);
}
