import { spawn } from "node:child_process";
import { chmod, chown, lstat, mkdir, rm } from "node:fs/promises";
import { dirname } from "node:path";
import { Readable } from "node:stream";
import type { ReadableStream as WebReadableStream } from "node:stream/web";
import { Objm, StorageType, type ObjectStore } from "@nats-io/obj";
import { TackError, type Bus } from "@tack/bus";
import { managedWorkspacePath, type OperatorConfig } from "@tack/config";
import type {
  CreateWorkspaceRequest,
  CreateWorkspaceResponse,
  DeleteWorkspaceRequest,
  DeleteWorkspaceResponse,
  ExportWorkspaceRequest,
  ExportWorkspaceResponse,
} from "@tack/proto";
import { assertId } from "./sandboxes.js";

// An archive may unpack to at most this many times its own size (a compression bomb stops there).
const MAX_EXPANSION = 8;

/**
 * Tack-managed workspaces on this sandbox host: directories `<dir>/<tenant>/<id>` owned by the
 * sandbox user, made empty or from a tar archive, packed back into one, and deleted. Archives
 * come and go through the workspaces object store, so the gateway needs no shared filesystem.
 * tar always runs as the sandbox user, never as root: whatever an archive holds (absolute names,
 * `..`, links out of the tree), it can write nothing that user could not write anyway.
 */
export class ManagedWorkspaces {
  readonly #store: ObjectStore;
  readonly #operator: OperatorConfig;

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
    if (!request.archiveObject) return { path, bytes: 0 };
    try {
      const archive = await this.#store.get(request.archiveObject);
      if (!archive) throw new TackError("sandbox.archive_missing", `archive ${request.archiveObject} is not in the workspaces store; upload it again`);
      const bytes = await this.#unpack(Readable.fromWeb(archive.data as unknown as WebReadableStream<Uint8Array>), path, archive.info.size);
      return { path, bytes };
    } catch (error) {
      await rm(path, { recursive: true, force: true });
      throw error;
    }
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

  // Unpacks as the sandbox user; refuses archives that expand beyond MAX_EXPANSION times their size.
  async #unpack(archive: Readable, path: string, archiveBytes: number): Promise<number> {
    const head = await peek(archive, 2);
    const gzip = head[0] === 0x1f && head[1] === 0x8b;
    const limit = Math.max(archiveBytes, 1 << 20) * MAX_EXPANSION;
    const tar = this.#tar(path, ["-x", ...(gzip ? ["-z"] : []), "--no-same-owner", "--no-same-permissions", "--no-overwrite-dir", "--totals"]);
    archive.on("error", () => tar.process.kill("SIGKILL"));
    archive.pipe(tar.process.stdin!);
    tar.process.stdin!.on("error", () => undefined);
    await exitOf(tar.process, tar.stderr, "unpack the archive (is it a tar or tar.gz file?)");
    const bytes = await usage(path);
    if (bytes > limit) {
      throw new TackError("sandbox.archive_too_large", `the archive unpacks to ${bytes} bytes, more than ${MAX_EXPANSION} times its own size; upload it uncompressed or smaller`);
    }
    return bytes;
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

// Reads the first `n` bytes and puts them back, so the stream is still whole.
async function peek(stream: Readable, n: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const onReadable = () => {
      const chunk = stream.read() as Buffer | null;
      if (chunk === null) return;
      stream.off("readable", onReadable);
      stream.off("end", onEnd);
      stream.unshift(chunk);
      resolve(chunk.subarray(0, n));
    };
    const onEnd = () => resolve(Buffer.alloc(0));
    stream.on("readable", onReadable);
    stream.once("end", onEnd);
    stream.once("error", reject);
  });
}

// Bytes of the files under `path` (du, apparent sizes).
async function usage(path: string): Promise<number> {
  const child = spawn("du", ["-s", "-b", path], { stdio: ["ignore", "pipe", "ignore"] });
  let out = "";
  child.stdout!.on("data", (chunk: Buffer) => (out += chunk.toString("utf8")));
  await new Promise((resolve) => child.once("close", resolve));
  return Number(out.split("\t")[0]) || 0;
}
