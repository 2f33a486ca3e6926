import { spawn } from "node:child_process";
import { chmod, chown, lstat, mkdir, rm } from "node:fs/promises";
import { dirname } from "node:path";
import { Readable } from "node:stream";
import type { ReadableStream as WebReadableStream } from "node:stream/web";
import { Objm, StorageType, type ObjectStore } from "@nats-io/obj";
import { TackError, type Bus } from "@tack/bus";
import { managedWorkspacePath, managedWorkspacesDir, tenantPolicy, type OperatorConfig } from "@tack/config";
import type {
  CreateWorkspaceRequest,
  CreateWorkspaceResponse,
  DeleteWorkspaceRequest,
  DeleteWorkspaceResponse,
  ExportWorkspaceRequest,
  ExportWorkspaceResponse,
} from "@tack/proto";
import { assertId } from "./sandboxes.js";
import { unpackBounded } from "./unpack.js";

// An archive may unpack to at most this many times its own size (a compression bomb stops there).
const MAX_EXPANSION = 8;

/**
 * Tack-managed workspaces on this sandbox host: directories `<dir>/<tenant>/<id>` owned by the
 * sandbox user, made empty or from a tar archive, packed back into one, and deleted. Archives
 * come and go through the workspaces object store, so the gateway needs no shared filesystem.
 * An archive is checked entry by entry as it streams (TarGuard: no sparse files, hard links,
 * devices, absolute or `..` names, nothing through a link) and stops at its limits and the
 * tenant's max_workspace_bytes before anything past them is written; tar, which writes the
 * files, runs as the sandbox user, never as root. A refused upload leaves no directory behind.
 */
export class ManagedWorkspaces {
  readonly #store: ObjectStore;
  readonly #operator: OperatorConfig;
  // Bytes set aside per tenant for archives being unpacked right now.
  readonly #reserved = new Map<string, number>();

  private constructor(store: ObjectStore, operator: OperatorConfig) {
    this.#store = store;
    this.#operator = operator;
  }

  /** Opens (creating when missing) the workspaces object store of the bus's namespace. */
  static async open(bus: Bus, operator: OperatorConfig): Promise<ManagedWorkspaces> {
    const store = await new Objm(bus.nc).create(bus.names.workspacesBucket, { storage: StorageType.File });
    return new ManagedWorkspaces(store, operator);
  }

  /** `workspace.create`: a new empty workspace, or one unpacked from `archive_object`; `sandbox.workspace_exists` when the id is taken. */
  async create(request: CreateWorkspaceRequest): Promise<CreateWorkspaceResponse> {
    const path = this.#path(request.tenant, request.workspaceId);
    const { uid, gid } = this.#operator.sandbox;
    // The tenant's directory only needs to be passed through, by root (the service) and by the mount.
    await mkdir(dirname(path), { recursive: true, mode: 0o711 });
    try {
      await mkdir(path, { mode: 0o700 });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "EEXIST") {
        throw new TackError("sandbox.workspace_exists", `managed workspace ${request.workspaceId} of tenant ${request.tenant} already exists; pick another id`);
      }
      throw error;
    }
    await chown(path, uid, gid);
    await chmod(path, 0o700);
    try {
      const quota = await this.#quota(request.tenant);
      if (quota.left === 0) throw quota.refusal(0);
      if (!request.archiveObject) return { path, bytes: 0 };
      const archive = await this.#store.get(request.archiveObject);
      if (!archive) throw new TackError("sandbox.archive_missing", `archive ${request.archiveObject} is not in the workspaces store; upload it again`);
      const bytes = await this.#unpack(request.tenant, Readable.fromWeb(archive.data as unknown as WebReadableStream<Uint8Array>), path, archive.info.size, quota);
      return { path, bytes };
    } catch (error) {
      await rm(path, { recursive: true, force: true });
      throw error;
    }
  }

  #reserve(tenant: string, bytes: number): void {
    const total = (this.#reserved.get(tenant) ?? 0) + bytes;
    if (total > 0) this.#reserved.set(tenant, total);
    else this.#reserved.delete(tenant);
  }

  /** `workspace.export`: the workspace as a tar archive written to `archive_object`. */
  async export(request: ExportWorkspaceRequest): Promise<ExportWorkspaceResponse> {
    const path = await this.#existing(request.tenant, request.workspaceId);
    const tar = this.#tar(path, ["-c", "."]);
    const failed = exitOf(tar.process, tar.stderr);
    const info = await this.#store.put({ name: request.archiveObject }, Readable.toWeb(tar.process.stdout!) as unknown as ReadableStream<Uint8Array>);
    await failed;
    return { bytes: info.size };
  }

  /** `workspace.delete`: removes the directory and everything in it; `deleted` is false when it was already gone. */
  async delete(request: DeleteWorkspaceRequest): Promise<DeleteWorkspaceResponse> {
    const path = this.#path(request.tenant, request.workspaceId);
    const found = await lstat(path).catch(() => undefined);
    if (!found) return { deleted: false };
    await rm(path, { recursive: true, force: true });
    return { deleted: true };
  }

  #path(tenant: string, id: string): string {
    assertId("tenant", tenant);
    assertId("workspace id", id);
    return managedWorkspacePath(this.#operator, tenant, id);
  }

  async #existing(tenant: string, id: string): Promise<string> {
    const path = this.#path(tenant, id);
    const found = await lstat(path).catch(() => undefined);
    if (!found?.isDirectory()) throw new TackError("sandbox.workspace_not_found", `managed workspace ${id} of tenant ${tenant} does not exist on this sandbox host`);
    return path;
  }

  // Unpacks as the sandbox user within the smallest of: 8 times the archive's size,
  // workspaces.max_unpacked_bytes, and what the tenant's max_workspace_bytes leaves.
  async #unpack(tenant: string, archive: Readable, path: string, archiveBytes: number, quota: Quota): Promise<number> {
    const { maxUnpackedBytes, maxEntries, unpackTimeoutMs } = this.#operator.workspaces;
    const ratio = Math.max(archiveBytes, 1 << 20) * MAX_EXPANSION;
    const maxBytes = Math.min(ratio, maxUnpackedBytes, quota.left);
    const bytesRefusal = (would: number): TackError => {
      if (maxBytes === quota.left && quota.left < Math.min(ratio, maxUnpackedBytes)) return quota.refusal(would);
      const which = maxBytes === maxUnpackedBytes ? `${maxUnpackedBytes} bytes (workspaces.max_unpacked_bytes)` : `${ratio} bytes, ${MAX_EXPANSION} times its own size`;
      return new TackError("sandbox.archive_too_large", `the archive unpacks to more than ${which}; unpacking stopped there and nothing was kept: upload it uncompressed or smaller`);
    };
    const { uid, gid } = this.#operator.sandbox;
    // Held for the tenant while it unpacks, so that uploads at the same time cannot pass the quota together.
    this.#reserve(tenant, maxBytes);
    try {
      const unpacked = await unpackBounded(archive, path, { maxBytes, maxEntries, timeoutMs: unpackTimeoutMs, uid, gid, bytesRefusal });
      return unpacked.bytes;
    } finally {
      this.#reserve(tenant, -maxBytes);
    }
  }

  // What the tenant's managed workspaces may still take (max_workspace_bytes less what they hold and what is being unpacked for it).
  async #quota(tenant: string): Promise<Quota> {
    const max = tenantPolicy(this.#operator, tenant).max_workspace_bytes;
    const held = await usage(managedWorkspacesDir(this.#operator, tenant));
    const used = held + (this.#reserved.get(tenant) ?? 0);
    return {
      left: Math.max(0, max - used),
      refusal: (would) => new TackError("sandbox.workspace_quota",
        `tenant ${tenant}'s managed workspaces may hold at most ${max} bytes (max_workspace_bytes); they hold ${used}${would > 0 ? ` and this archive would add more than ${would - 1}` : ""}; delete a workspace (DELETE /v1/workspaces/<id>) or ask the operator to raise the quota`),
    };
  }

  // tar in `cwd`, entered before the switch to the sandbox user (the directories above it may be closed to that user).
  #tar(cwd: string, args: string[]): { process: ReturnType<typeof spawn>; stderr: () => string } {
    const { uid, gid } = this.#operator.sandbox;
    const child = spawn("tar", args, { cwd, uid, gid, stdio: ["pipe", "pipe", "pipe"], env: { PATH: "/usr/bin:/bin", LC_ALL: "C" } });
    let stderr = "";
    child.stderr!.on("data", (chunk: Buffer) => {
      if (stderr.length < 4096) stderr += chunk.toString("utf8");
    });
    return { process: child, stderr: () => stderr };
  }
}

// Resolves when the child exits 0; rejects with its stderr otherwise.
function exitOf(child: ReturnType<typeof spawn>, stderr: () => string, what = "pack the workspace"): Promise<void> {
  return new Promise((resolve, reject) => {
    child.once("error", (error) => reject(new TackError("sandbox.archive_failed", `could not ${what}: ${error.message}`)));
    child.once("close", (code) => {
      if (code === 0) resolve();
      else reject(new TackError("sandbox.archive_failed", `could not ${what}: tar exited ${code}: ${stderr().trim().split("\n").slice(-3).join("; ")}`));
    });
  });
}

/** What a tenant's managed workspaces may still take, and the refusal naming the quota. */
interface Quota {
  readonly left: number;
  readonly refusal: (would: number) => TackError;
}

// Bytes of the files under `path` (du, apparent sizes, not crossing into other file systems); 0 when it does not exist.
async function usage(path: string): Promise<number> {
  const child = spawn("du", ["-s", "-b", "-x", path], { stdio: ["ignore", "pipe", "ignore"] });
  let out = "";
  child.stdout!.on("data", (chunk: Buffer) => (out += chunk.toString("utf8")));
  await new Promise((resolve) => child.once("close", resolve));
  return Number(out.split("\t")[0]) || 0;
}
