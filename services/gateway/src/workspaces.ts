import { randomBytes } from "node:crypto";
import { Readable, Transform } from "node:stream";
import type { ReadableStream as WebReadableStream } from "node:stream/web";
import { Objm, StorageType, type ObjectStore } from "@nats-io/obj";
import type { Kysely, Selectable } from "kysely";
import { TackError, WorkspacesRpc, type Bus } from "@tack/bus";
import { authorizeWorkspace, tenantPolicy, WorkspaceAccessError } from "@tack/config";
import type { gatewayV1 } from "@tack/proto";
import { timestamp, type Database, type WorkspacesTable } from "./db.js";
import { GatewayError } from "./errors.js";
import type { Call, Operation, Reply } from "./call.js";
import type { CompiledOptions } from "./options.js";

/** A managed workspace as the index stores it. */
export type WorkspaceRow = Selectable<WorkspacesTable>;

/** What a session may name as its workspace: a host path under the tenant's roots, or a managed workspace's id. */
export interface WorkspaceChoice {
  readonly workspace?: string | undefined;
  readonly workspace_id?: string | undefined;
}

/** What the workspace operations use of the gateway's context. */
export interface WorkspaceContext {
  readonly bus: Bus;
  readonly options: CompiledOptions;
}

// Creating, packing or deleting a workspace may move a few hundred megabytes on the sandbox host.
const SANDBOX_TIMEOUT_MS = 300_000;

/** The index's managed workspaces, per tenant. */
export class WorkspaceIndex {
  readonly #db: Kysely<Database>;

  constructor(db: Kysely<Database>) {
    this.#db = db;
  }

  /** Adds a created workspace. */
  async insert(row: WorkspaceRow): Promise<void> {
    await this.#db.insertInto("workspaces").values(row).execute();
  }

  /** The tenant's workspace `id`, or undefined (also when it is another tenant's). */
  async get(tenant: string, id: string): Promise<WorkspaceRow | undefined> {
    return this.#db.selectFrom("workspaces").selectAll().where("tenant", "=", tenant).where("id", "=", id).executeTakeFirst();
  }

  /** The tenant's workspaces, newest first. */
  async list(tenant: string): Promise<WorkspaceRow[]> {
    return this.#db.selectFrom("workspaces").selectAll().where("tenant", "=", tenant).orderBy("created_at", "desc").orderBy("id", "desc").execute();
  }

  /** How many managed workspaces the tenant holds. */
  async count(tenant: string): Promise<number> {
    const row = await this.#db.selectFrom("workspaces").select((eb) => eb.fn.countAll<number>().as("n")).where("tenant", "=", tenant).executeTakeFirst();
    return Number(row?.n ?? 0);
  }

  /** Removes a workspace's row. */
  async remove(tenant: string, id: string): Promise<void> {
    await this.#db.deleteFrom("workspaces").where("tenant", "=", tenant).where("id", "=", id).execute();
  }

  /** Ids of the tenant's sessions working in `path`. */
  async sessionsOn(tenant: string, path: string): Promise<string[]> {
    const rows = await this.#db.selectFrom("sessions").select("id").where("tenant", "=", tenant).where("workspace", "=", path).execute();
    return rows.map((row) => row.id);
  }
}

/**
 * The host path a new session of `tenant` works in: a managed workspace named by id (looked up
 * in the index: the gateway may share no filesystem with the sandbox hosts), or a directory
 * that `authorizeWorkspace` allows (403 `gateway.workspace_forbidden` naming the roots).
 */
export async function sessionWorkspace(context: WorkspaceContext, workspaces: WorkspaceIndex, tenant: string, choice: WorkspaceChoice): Promise<string> {
  if (choice.workspace_id !== undefined) {
    const row = await workspaces.get(tenant, choice.workspace_id);
    if (!row) throw workspaceNotFound(choice.workspace_id);
    return row.path;
  }
  try {
    return authorizeWorkspace(context.options.operator, tenant, choice.workspace!).path;
  } catch (error) {
    if (!(error instanceof WorkspaceAccessError)) throw error;
    const [status, code] = error.reason === "forbidden" ? [403, "gateway.workspace_forbidden"]
      : error.reason === "missing" ? [400, "gateway.workspace_not_found"]
      : error.reason === "not_directory" ? [400, "gateway.workspace_not_directory"]
      : [400, "gateway.bad_workspace"];
    throw new GatewayError(status, code, error.message, { details: error.details });
  }
}

/** What a workspace upload brings: the archive (none for an empty workspace) and its announced size. */
export interface WorkspaceUpload {
  readonly title: string;
  /** The tar or tar.gz bytes as they arrive; undefined for an empty workspace. */
  readonly archive: Readable | undefined;
}

/** A workspace archive on its way to the caller. */
export interface WorkspaceArchive {
  readonly id: string;
  readonly size: number;
  readonly data: Readable;
  /** Removes the exported object; call once the archive was sent (or sending failed). */
  done(): Promise<void>;
}

/** The managed workspace operations: create (empty or from a tar upload), list, download as tar, delete with its sessions. */
export class WorkspaceOperations {
  readonly #context: WorkspaceContext;
  readonly #index: WorkspaceIndex;
  readonly #deleteSession: (call: Call, sessionId: string) => Promise<void>;
  #store: Promise<ObjectStore> | undefined;
  // Creations under way per tenant: they count against max_workspaces until they are in the index or failed.
  readonly #creating = new Map<string, number>();

  constructor(context: WorkspaceContext, index: WorkspaceIndex, deleteSession: (call: Call, sessionId: string) => Promise<void>) {
    this.#context = context;
    this.#index = index;
    this.#deleteSession = deleteSession;
  }

  /** The largest archive accepted (`workspaces.max_upload_bytes`). */
  get maxUploadBytes(): number {
    return this.#context.options.operator.workspaces.maxUploadBytes;
  }

  /** Refuses an archive announced larger than `workspaces.max_upload_bytes` before any of it is read (413). */
  checkDeclaredSize(bytes: number): void {
    if (bytes > this.maxUploadBytes) throw tooLarge(bytes, this.maxUploadBytes);
  }

  /**
   * `CreateWorkspace`: an empty workspace, or one unpacked from the uploaded archive on the
   * sandbox host (the archive travels through the object store; at most `maxUploadBytes`).
   */
  async create(call: Call, upload: WorkspaceUpload): Promise<Reply<gatewayV1.Workspace>> {
    const tenant = call.tenant;
    // Counted before any of the upload is read. Creations under way are counted from before the
    // index is asked, so one that lands in the index meanwhile is counted twice, never missed.
    const maxWorkspaces = tenantPolicy(this.#context.options.operator, tenant).max_workspaces;
    const creating = this.#creating.get(tenant) ?? 0;
    this.#creating.set(tenant, creating + 1);
    try {
      const held = await this.#index.count(tenant);
      if (held + creating >= maxWorkspaces) {
        throw new GatewayError(429, "gateway.limit_exceeded",
          `tenant ${tenant} may hold at most ${maxWorkspaces} managed workspaces (max_workspaces); delete one (DELETE /v1/workspaces/<id>) or ask the operator to raise the quota`,
          { details: { limit: "max_workspaces", value: String(maxWorkspaces) } });
      }
      return await this.#create(tenant, upload);
    } finally {
      const left = (this.#creating.get(tenant) ?? 1) - 1;
      if (left > 0) this.#creating.set(tenant, left);
      else this.#creating.delete(tenant);
    }
  }

  async #create(tenant: string, upload: WorkspaceUpload): Promise<Reply<gatewayV1.Workspace>> {
    const max = this.maxUploadBytes;
    const id = `ws_${randomBytes(10).toString("hex")}`;
    const { bus } = this.#context;
    let archiveObject = "";
    if (upload.archive) {
      archiveObject = `${tenant}.${id}.upload`;
      await (await this.#objects()).put({ name: archiveObject }, Readable.toWeb(upload.archive.pipe(limit(max))) as unknown as ReadableStream<Uint8Array>).catch((error: unknown) => {
        // The object store wraps the stream's own failure (the 413 of `limit`): answer with that one.
        const cause = error instanceof Error ? error.cause : undefined;
        throw cause instanceof GatewayError ? cause : error;
      });
    }
    try {
      const created = await bus.request(WorkspacesRpc.CreateWorkspace, { tenant, workspaceId: id, archiveObject }, { timeoutMs: SANDBOX_TIMEOUT_MS })
        .catch((error: unknown) => {
          const e = TackError.from(error);
          // The archive is the caller's to fix: say which entry broke which rule, or what tar refused.
          if (e.code === "sandbox.archive_refused") throw new GatewayError(400, "gateway.bad_archive", e.message, { cause: e });
          if (e.code === "sandbox.archive_failed") throw new GatewayError(400, "gateway.bad_archive", `${e.message.replace(/^could not /, "the archive was refused: could not ")}; nothing was created`, { cause: e });
          if (e.code === "sandbox.archive_too_large") throw new GatewayError(413, "gateway.upload_too_large", e.message, { cause: e });
          if (e.code === "sandbox.workspace_quota") {
            const max = tenantPolicy(this.#context.options.operator, tenant).max_workspace_bytes;
            throw new GatewayError(413, "gateway.workspace_quota_exceeded", `${e.message}; nothing was created`, { cause: e, details: { limit: "max_workspace_bytes", value: String(max) } });
          }
          throw e;
        });
      const row: WorkspaceRow = { id, tenant, title: upload.title, path: created.path, created_at: timestamp() };
      await this.#index.insert(row);
      return { message: { ...workspaceMessage(row), bytes: Number(created.bytes) }, headers: { location: `/v1/workspaces/${id}` } };
    } finally {
      if (archiveObject) await (await this.#objects()).delete(archiveObject).catch(() => undefined);
    }
  }

  /** `ListWorkspaces`: the caller's managed workspaces. */
  list(): Operation<gatewayV1.ListWorkspacesRequest, gatewayV1.ListWorkspacesResponse> {
    return async (call) => ({ message: { workspaces: (await this.#index.list(call.tenant)).map(workspaceMessage) } });
  }

  /** `ExportWorkspace`: the workspace's files as a tar archive, packed on the sandbox host. */
  async archive(call: Call, id: string): Promise<WorkspaceArchive> {
    const row = await this.#require(call, id);
    const { bus } = this.#context;
    const archiveObject = `${row.tenant}.${row.id}.export.${randomBytes(4).toString("hex")}`;
    const store = await this.#objects();
    const done = () => store.delete(archiveObject).then(() => undefined, () => undefined);
    try {
      await bus.request(WorkspacesRpc.ExportWorkspace, { tenant: row.tenant, workspaceId: row.id, archiveObject }, { timeoutMs: SANDBOX_TIMEOUT_MS });
      const result = await store.get(archiveObject);
      if (!result) throw new GatewayError(502, "gateway.archive_missing", "the workspace archive vanished before it could be sent; retry");
      return { id: row.id, size: result.info.size, data: Readable.fromWeb(result.data as unknown as WebReadableStream<Uint8Array>), done };
    } catch (error) {
      await done();
      throw error;
    }
  }

  /** `DeleteWorkspace`: deletes every session working in it (as `DeleteSession` would), then its files and row. */
  delete(): Operation<gatewayV1.DeleteWorkspaceRequest, gatewayV1.DeleteWorkspaceResponse> {
    return async (call, request) => {
      const row = await this.#require(call, request.id);
      const sessions = await this.#index.sessionsOn(row.tenant, row.path);
      for (const sessionId of sessions) await this.#deleteSession(call, sessionId);
      const { bus } = this.#context;
      await bus.request(WorkspacesRpc.DeleteWorkspace, { tenant: row.tenant, workspaceId: row.id }, { timeoutMs: SANDBOX_TIMEOUT_MS });
      await this.#index.remove(row.tenant, row.id);
      return { message: { id: row.id, deleted: true, sessionsDeleted: sessions } };
    };
  }

  async #require(call: Call, id: string): Promise<WorkspaceRow> {
    const row = id === "" ? undefined : await this.#index.get(call.tenant, id);
    if (!row) throw workspaceNotFound(id);
    return row;
  }

  #objects(): Promise<ObjectStore> {
    this.#store ??= new Objm(this.#context.bus.nc).create(this.#context.bus.names.workspacesBucket, { storage: StorageType.File });
    return this.#store;
  }
}

function workspaceMessage(row: WorkspaceRow): gatewayV1.Workspace {
  return { id: row.id, tenant: row.tenant, title: row.title, createdAt: row.created_at, bytes: undefined };
}

function workspaceNotFound(id: string): GatewayError {
  return new GatewayError(404, "gateway.workspace_not_found", `no managed workspace ${JSON.stringify(id)} for this API key; list yours with GET /v1/workspaces`);
}

function tooLarge(bytes: number, max: number): GatewayError {
  return new GatewayError(413, "gateway.upload_too_large", `the archive is ${bytes} bytes but at most ${max} are accepted (workspaces.max_upload_bytes); upload a smaller archive`, { details: { limit: "max_upload_bytes", value: String(max) } });
}

// Passes at most `max` bytes through, failing with a 413 beyond that (for uploads without a Content-Length).
function limit(max: number): Transform {
  let seen = 0;
  return new Transform({
    transform(chunk: Buffer, _encoding, done) {
      seen += chunk.length;
      done(seen > max ? tooLarge(seen, max) : null, chunk);
    },
  });
}
