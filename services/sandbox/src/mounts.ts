import { execFile } from "node:child_process";
import { mkdir, readdir, readFile, rmdir, stat } from "node:fs/promises";
import { basename, dirname, isAbsolute, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { TackError } from "@tack/bus";

const run = promisify(execFile);

/**
 * The host side of the warm pool: one directory per pool container ("slot"), made a shared
 * mount before the container is created so that the container's /workspace (bound with
 * rslave propagation) shows whatever is later mounted onto the slot. Claiming a container
 * binds the session's workspace onto its slot; releasing it unmounts it. Needs root in the
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
      await mkdir(join(root, "stage"), { recursive: true, mode: 0o700 });
      if (!(await isMountPoint(root))) await mounts(`mount --bind "$1" "$1" && mount --make-private "$1"`, root);
    } catch (error) {
      throw new TackError(
        "sandbox.pool_unavailable",
        `the warm pool cannot mount under ${root} (${(error as Error).message.trim().split("\n").at(-1)}); run the sandbox service as root on the Docker host, or set the pool size to 0`,
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
   * Mounts `workspace` onto the slot, where the slot's container sees it at /workspace. A
   * read-only one is bound and remounted read-only in the private staging directory first and
   * then moved onto the slot, because a remount does not propagate: the container must never
   * see it writable, not even for a moment.
   */
  async bind(slotId: string, workspace: string, readOnly: boolean): Promise<void> {
    const slot = this.path(slotId);
    try {
      if (!readOnly) {
        await mount("--bind", workspace, slot);
        return;
      }
      const stage = join(this.#root, "stage", slotId);
      await mkdir(stage, { recursive: true });
      // One shell for the three steps (spawning a process is the slow part); paths go in as arguments, never as script text.
      await mounts(`mount --bind "$1" "$2" && { mount -o remount,bind,ro,nosuid,nodev "$2" && mount --move "$2" "$3" || { umount "$2"; exit 1; }; }`, workspace, stage, slot);
      await rmdir(stage);
    } catch (error) {
      throw new TackError("sandbox.pool_mount_failed", `could not mount workspace ${workspace} into pool slot ${slot}: ${(error as Error).message.trim()}`, { cause: error });
    }
  }

  /**
   * Mounts `workspace` onto the slot through an ID mapping (see `idmappedMount`): for a
   * workspace whose owner is not the sandbox user.
   */
  async bindMapped(slotId: string, workspace: string, readOnly: boolean, owner: Ids, user: Ids): Promise<void> {
    await idmappedMount(workspace, this.path(slotId), readOnly, owner, user);
  }

  /**
   * A new directory (not a shared mount: nothing is mounted onto it later) holding `workspace`
   * through an ID mapping, for a container created directly; removed like a slot.
   */
  async createMapped(id: string, workspace: string, readOnly: boolean, owner: Ids, user: Ids): Promise<string> {
    if (!(await isMountPoint(this.#root))) await SlotMounts.prepare(this.#root);
    const path = this.path(id);
    await mkdir(path, { mode: 0o755 });
    try {
      await idmappedMount(workspace, path, readOnly, owner, user);
    } catch (error) {
      await rmdir(path).catch(() => undefined);
      throw error;
    }
    return path;
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

const IDMAP_HELPER = fileURLToPath(new URL("./idmap.py", import.meta.url));
// The system's Python, never one found on PATH: the helper runs as root (and a version manager's shim adds ~250 ms).
const SYSTEM_PYTHON = "/usr/bin/python3";

/**
 * Mounts `source` onto `target` so that files `owner` owns on disk appear owned by `user` (and
 * files `user` creates are stored as `owner`'s): an idmapped mount, decision 0008. Attributes
 * are set before the mount is attached, so a read-only one is never visible writable.
 */
export async function idmappedMount(source: string, target: string, readOnly: boolean, owner: Ids, user: Ids): Promise<void> {
  try {
    await run(SYSTEM_PYTHON, ["-I", "-S", IDMAP_HELPER, source, target, String(owner.uid), String(owner.gid), String(user.uid), String(user.gid), readOnly ? "1" : "0"]);
  } catch (error) {
    const said = ((error as { stdout?: string }).stdout ?? "").trim() || (error as Error).message.trim();
    throw new TackError(
      "sandbox.ownership_mapping_failed",
      `could not mount workspace ${source} with its owner ${owner.uid}:${owner.gid} mapped to the sandbox user ${user.uid}:${user.gid} (${said}); run the sandbox service as root on a Linux >= 5.12 host with ${SYSTEM_PYTHON} (Debian package python3), or \`chown -R ${user.uid}:${user.gid} ${source}\``,
      { cause: error },
    );
  }
}

async function mount(...args: string[]): Promise<void> {
  await run("mount", args);
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
  const table = await readFile("/proc/self/mountinfo", "utf8");
  // Field 5 is the mount point, with space, tab, newline and backslash escaped as octal.
  const escaped = path.replace(/[\\ \t\n]/g, (c) => `\\${c.charCodeAt(0).toString(8).padStart(3, "0")}`);
  return table.split("\n").some((line) => line.split(" ")[4] === escaped);
}
