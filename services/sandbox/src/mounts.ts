import { execFile } from "node:child_process";
import { mkdir, readdir, readFile, rmdir, stat } from "node:fs/promises";
import { basename, dirname, isAbsolute, join } from "node:path";
import { promisify } from "node:util";
import { TackError } from "@tack/bus";
import { isInside } from "@tack/config";
import { askMountHelper, SYSTEM_PYTHON, warmMountHelper, type HelperAnswer } from "./mount-helper.js";

const run = promisify(execFile);

/**
 * The host side of the warm pool: one directory per pool container ("slot"), made a shared
 * mount before the container is created so that the container's /workspace (bound with
 * rslave propagation) shows whatever is later mounted onto the slot. Claiming a container
 * mounts the session's workspace onto its slot; releasing it unmounts it. A container created
 * directly gets a directory here too, holding its workspace, so that no container ever binds a
 * workspace by its own path (decision 0021). Needs root in the
 * host's mount namespace. Everything lives under one replica directory, itself a private
 * mount so that none of this propagates elsewhere on the host. Nothing here ever deletes a
 * file: directories are removed with rmdir only, so a workspace still mounted is never touched.
 */
export class SlotMounts {
  readonly #root: string;

  private constructor(root: string) {
    this.#root = root;
  }

  /** Prepares the replica directory `root`; fails with `sandbox.pool_unavailable` when this process cannot mount. */
  static async prepare(root: string): Promise<SlotMounts> {
    try {
      await mkdir(join(root, "slots"), { recursive: true, mode: 0o700 });
      // Private, so that nothing mounted here propagates elsewhere on the host. A sandbox service in a container
      // (deploy/compose sets TACK_SANDBOX_SHARED_MOUNTS=1) mounts in its own namespace and must reach the engine on
      // the host through the pool directory's shared mount: there the replica directory joins that peer group.
      // Never on the host itself: shared slots under a shared replica directory propagate into each other.
      const propagation = process.env.TACK_SANDBOX_SHARED_MOUNTS === "1" ? "--make-shared" : "--make-private";
      if (!(await isMountPoint(root))) await mounts(`mount --bind "$1" "$1" && mount ${propagation} "$1"`, root);
      warmMountHelper();
    } catch (error) {
      throw new TackError(
        "sandbox.pool_unavailable",
        `the sandbox service cannot mount under ${root} (${(error as Error).message.trim().split("\n").at(-1)}), where it mounts every workspace and the warm pool's slots; run it as root on the Docker host`,
        { cause: error },
      );
    }
    return new SlotMounts(root);
  }

  /** Host path of a slot. */
  path(slotId: string): string {
    return join(this.#root, "slots", slotId);
  }

  /** The slot ids that have a directory (some may be left from a process that died). */
  async slots(): Promise<string[]> {
    return readdir(join(this.#root, "slots"));
  }

  /** Creates a slot: an empty directory that is its own shared mount. */
  async create(slotId: string): Promise<string> {
    const path = this.path(slotId);
    // Prepared again when another process collected the directory as abandoned while this pool had no slot.
    if (!(await isMountPoint(this.#root))) await SlotMounts.prepare(this.#root);
    await mkdir(path, { mode: 0o755 });
    await mounts(`mount --bind "$1" "$1" && mount --make-shared "$1"`, path);
    return path;
  }

  /**
   * Mounts the workspace `source` onto the slot, where the slot's container sees it at
   * /workspace (see `mountWorkspace`: from a descriptor opened without symlinks, nosuid and
   * nodev, read-only and ID-mapped as asked, attributes set before it is attached, so the
   * container never sees it writable, not even for a moment). Returns what was mounted.
   */
  async bind(slotId: string, source: WorkspaceSource, readOnly: boolean, owner: Ids, user: Ids): Promise<DirIdentity> {
    return mountWorkspace(source, this.path(slotId), readOnly, owner, user);
  }

  /**
   * A new directory (not a shared mount: nothing is mounted onto it later) holding the
   * workspace `source` as `bind` mounts it, for a container created directly, which binds this
   * directory (root's, under the replica's private directory) and never the workspace's own
   * path; removed like a slot.
   */
  async createDirect(id: string, source: WorkspaceSource, readOnly: boolean, owner: Ids, user: Ids): Promise<{ path: string; identity: DirIdentity }> {
    if (!(await isMountPoint(this.#root))) await SlotMounts.prepare(this.#root);
    const path = this.path(id);
    await mkdir(path, { mode: 0o755 });
    try {
      return { path, identity: await mountWorkspace(source, path, readOnly, owner, user) };
    } catch (error) {
      await rmdir(path).catch(() => undefined);
      throw error;
    }
  }

  /** Unmounts everything on the slot and removes its (then empty) directory; a slot that is gone is fine. */
  async remove(slotId: string): Promise<void> {
    await removeSlotAt(this.path(slotId));
  }

  /** Removes every slot and then the replica directory itself; only for when none of its containers is left. */
  async dispose(): Promise<void> {
    await disposeReplicaDir(this.#root);
  }
}

/**
 * Unmounts everything on a slot (its own bind and, when claimed, the workspace on top) and
 * removes its directories. `path` comes from a container label or a placement record, so it
 * is only acted on when it has the shape of a slot.
 */
export async function removeSlotAt(path: string): Promise<void> {
  if (!isAbsolute(path) || basename(dirname(path)) !== "slots") return;
  // A staging directory of the same name is what versions before decision 0021 may have left.
  const stage = join(dirname(dirname(path)), "stage", basename(path));
  for (const dir of [path, stage]) {
    await unmountAll(dir);
    await rmdir(dir).catch(() => undefined);
  }
}

/** Removes the slots left in a replica directory (of this process or of a dead replica), then the directory. */
export async function disposeReplicaDir(root: string): Promise<void> {
  for (const slotId of await readdir(join(root, "slots")).catch(() => [])) await removeSlotAt(join(root, "slots", slotId));
  for (const dir of ["slots", "stage"]) await rmdir(join(root, dir)).catch(() => undefined);
  await unmountAll(root);
  await rmdir(root).catch(() => undefined);
  // The namespace directory above it goes with its last replica.
  await rmdir(dirname(root)).catch(() => undefined);
}

/**
 * Collects what dead processes left under `poolDir` (every namespace and replica): slots no
 * container mounts (`inUse` holds the slot paths the engine's containers carry) and then replica
 * directories left without slots, except `own`. Only things older than `minAgeMs` are touched,
 * so a slot being created right now by another process survives.
 */
export async function collectAbandoned(poolDir: string, inUse: ReadonlySet<string>, own: string, minAgeMs: number): Promise<void> {
  const old = async (path: string) => Date.now() - (await stat(path)).mtimeMs >= minAgeMs;
  for (const namespace of await readdir(poolDir).catch(() => [])) {
    for (const replica of await readdir(join(poolDir, namespace)).catch(() => [])) {
      const root = join(poolDir, namespace, replica);
      if (root === own) continue;
      const slots = await readdir(join(root, "slots")).catch(() => []);
      let left = slots.length;
      for (const slotId of slots) {
        const path = join(root, "slots", slotId);
        if (inUse.has(path) || !(await old(path).catch(() => false))) continue;
        await removeSlotAt(path);
        left -= 1;
      }
      if (left === 0 && (await old(root).catch(() => false))) await disposeReplicaDir(root);
    }
  }
}

/** A user and group id pair. */
export interface Ids {
  readonly uid: number;
  readonly gid: number;
}

/** A workspace as the mount helper opens it: the allowed root it must lie under, and its canonical path (the root or inside it). */
export interface WorkspaceSource {
  readonly root: string;
  readonly path: string;
}

/** The device and inode of a directory, as decimal strings (inode numbers may pass 2^53). */
export interface DirIdentity {
  readonly dev: string;
  readonly ino: string;
}

// The helper's code when the workspace is not the directory that was checked.
const CHANGED = 3;

/**
 * Mounts the workspace `source` onto `target` from a descriptor, never by name (decision
 * 0021): the helper opens it from its root without following symlinks, checks that it is a
 * directory with the owner the service saw, clones the mount from that descriptor and sets
 * nosuid, nodev, read-only as asked and, when `owner` is not `user`, an ID mapping (files
 * `owner` owns on disk appear owned by `user` and what `user` creates is stored as `owner`'s,
 * decision 0008), all before attaching it. Returns the device and inode it mounted. Fails with
 * `sandbox.workspace_changed` when the path no longer leads to the directory that was checked,
 * else with `sandbox.ownership_mapping_failed` (mapped) or `sandbox.workspace_mount_failed`.
 */
export async function mountWorkspace(source: WorkspaceSource, target: string, readOnly: boolean, owner: Ids, user: Ids): Promise<DirIdentity> {
  const relative = source.path === source.root ? "" : source.path.slice(source.root.endsWith("/") ? source.root.length : source.root.length + 1);
  if (!isInside(source.path, source.root)) throw new TackError("sandbox.bad_workspace", `workspace ${source.path} does not lie under ${source.root}; this is a bug in the sandbox service`);
  let answer: HelperAnswer;
  try {
    answer = await askMountHelper([source.root, relative, target, String(owner.uid), String(owner.gid), String(user.uid), String(user.gid), readOnly ? "1" : "0"]);
  } catch (error) {
    answer = { code: 1, message: (error as Error).message };
  }
  if ("dev" in answer) return { dev: answer.dev, ino: answer.ino };
  const said = answer.message;
  if (answer.code === CHANGED) {
    throw new TackError(
      "sandbox.workspace_changed",
      `workspace ${source.path} changed while its sandbox was being made (${said}); a sandbox mounts only the directory that was checked, reached from ${source.root} without symlinks (decision 0021). Stop whatever renames or replaces it and retry`,
      { details: { workspace: source.path } },
    );
  }
  if (owner.uid !== user.uid || owner.gid !== user.gid) {
    throw new TackError(
      "sandbox.ownership_mapping_failed",
      `could not mount workspace ${source.path} with its owner ${owner.uid}:${owner.gid} mapped to the sandbox user ${user.uid}:${user.gid} (${said}); run the sandbox service as root on a Linux >= 5.12 host with ${SYSTEM_PYTHON} (Debian package python3), or \`chown -R ${user.uid}:${user.gid} ${source.path}\``,
    );
  }
  throw new TackError(
    "sandbox.workspace_mount_failed",
    `could not mount workspace ${source.path} for its sandbox (${said}); the sandbox service mounts every workspace itself from a descriptor it checked (decision 0021): run it as root on the Docker host, Linux >= 5.12, with ${SYSTEM_PYTHON} (Debian package python3)`,
  );
}

// Runs a fixed script of mount commands with `args` as its positional parameters ($1, $2, ...).
async function mounts(script: string, ...args: string[]): Promise<void> {
  await run("sh", ["-c", script, "sh", ...args]);
}

// Unmounts every mount stacked on `path` (a slot has its own bind and, when claimed, a workspace on top).
async function unmountAll(path: string): Promise<void> {
  for (let attempt = 0; attempt < 8 && (await isMountPoint(path)); attempt++) {
    // Lazy: a container that is still being torn down may hold it for a moment.
    await run("umount", ["-l", path]).catch(() => undefined);
  }
}

async function isMountPoint(path: string): Promise<boolean> {
  return (await mountInfo(path)) !== undefined;
}

// The /proc/self/mountinfo fields of the mount at `path` (the last one mounted there), or undefined.
async function mountInfo(path: string): Promise<string[] | undefined> {
  const table = await readFile("/proc/self/mountinfo", "utf8");
  // Field 5 is the mount point, with space, tab, newline and backslash escaped as octal.
  const escaped = path.replace(/[\\ \t\n]/g, (c) => `\\${c.charCodeAt(0).toString(8).padStart(3, "0")}`);
  return table.split("\n").map((line) => line.split(" ")).findLast((fields) => fields[4] === escaped);
}
