import { randomBytes } from "node:crypto";
import { Readable, Transform } from "node:stream";
import type { ReadableStream as WebReadableStream } from "node:stream/web";
import { Objm, StorageType, type ObjectStore } from "@nats-io/obj";
import type { Kysely, Selectable } from "kysely";
import { TackError } from "@tack/bus";
import { authorizeWorkspace, WorkspaceAccessError } from "@tack/config";
import {
  CreateWorkspaceRequest,
  CreateWorkspaceResponse,
  DeleteWorkspaceRequest,
  DeleteWorkspaceResponse,
  ExportWorkspaceRequest,
  ExportWorkspaceResponse,
} from "@tack/proto";
import { timestamp, type Database, type WorkspacesTable } from "./db.js";
import { GatewayError } from "./errors.js";
import { sendJson, type Exchange, type Handler } from "./http.js";
import type { GatewayContext } from "./sessions.js";

/** A managed workspace as the index stores it. */
export type WorkspaceRow = Selectable<WorkspacesTable>;

/** What a session may name as its workspace: a host path under the tenant's roots, or a managed workspace's id. */
export interface WorkspaceChoice {
  readonly workspace?: string | undefined;
  readonly workspace_id?: string | undefined;
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
export async function sessionWorkspace(context: GatewayContext, workspaces: WorkspaceIndex, tenant: string, choice: WorkspaceChoice): Promise<string> {
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

/** The managed workspace routes: create (empty or from a tar upload), list, download as tar, delete with its sessions. */
export class WorkspaceRoutes {
  readonly #context: GatewayContext;
  readonly #index: WorkspaceIndex;
  readonly #deleteSession: (exchange: Exchange, sessionId: string) => Promise<void>;
  #store: Promise<ObjectStore> | undefined;

  constructor(context: GatewayContext, index: WorkspaceIndex, deleteSession: (exchange: Exchange, sessionId: string) => Promise<void>) {
    this.#context = context;
    this.#index = index;
    this.#deleteSession = deleteSession;
  }

  /**
   * `POST /v1/workspaces[?title=...]`: an empty workspace, or (body `application/x-tar` or
   * `application/gzip`) one unpacked from the uploaded archive on the sandbox host.
   */
  create(): Handler {
    return async (exchange) => {
      const tenant = exchange.tenant!;
      const title = exchange.url.searchParams.get("title") ?? "";
      if (title.length > 200) throw new GatewayError(400, "gateway.invalid_query", "title must be at most 200 characters");
      const max = this.#context.options.operator.workspaces.maxUploadBytes;
      const declared = Number(exchange.req.headers["content-length"] ?? "0");
      const chunked = exchange.req.headers["transfer-encoding"] !== undefined;
      if (declared > max) throw tooLarge(declared, max);
      const hasBody = declared > 0 || chunked;
      const type = (exchange.req.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase();
      if (hasBody && !["application/x-tar", "application/tar", "application/gzip", "application/x-gzip", "application/octet-stream"].includes(type)) {
        throw new GatewayError(415, "gateway.unsupported_media_type", `a workspace upload must be a tar archive (content-type application/x-tar, or application/gzip for .tar.gz), got ${JSON.stringify(type || "none")}; send no body for an empty workspace`);
      }
      const id = `ws_${randomBytes(10).toString("hex")}`;
      const { bus } = this.#context;
      let archiveObject = "";
      if (hasBody) {
        archiveObject = `${tenant}.${id}.upload`;
        await (await this.#objects()).put({ name: archiveObject }, Readable.toWeb(exchange.req.pipe(limit(max))) as unknown as ReadableStream<Uint8Array>).catch((error: unknown) => {
          // The object store wraps the stream's own failure (the 413 of `limit`): answer with that one.
          const cause = (error as { cause?: unknown }).cause;
          throw cause instanceof GatewayError ? cause : error;
        });
      }
      try {
        const created = await bus.request(bus.names.workspaceCreate, CreateWorkspaceRequest, { tenant, workspaceId: id, archiveObject }, CreateWorkspaceResponse, { timeoutMs: SANDBOX_TIMEOUT_MS })
          .catch((error: unknown) => {
            const e = TackError.from(error);
            // The archive is the caller's to fix: say what tar refused (a member with `..`, one through a link, not a tar at all).
            if (e.code === "sandbox.archive_failed") throw new GatewayError(400, "gateway.bad_archive", `${e.message.replace(/^could not /, "the archive was refused: could not ")}; nothing was created`, { cause: e });
            if (e.code === "sandbox.archive_too_large") throw new GatewayError(413, "gateway.upload_too_large", `${e.message}; nothing was created`, { cause: e });
            throw e;
          });
        const row: WorkspaceRow = { id, tenant, title, path: created.path, created_at: timestamp() };
        await this.#index.insert(row);
        sendJson(exchange.res, 201, { ...workspaceJson(row), bytes: Number(created.bytes) }, { location: `/v1/workspaces/${id}` });
      } finally {
        if (archiveObject) await (await this.#objects()).delete(archiveObject).catch(() => undefined);
      }
    };
  }

  /** `GET /v1/workspaces`: the caller's managed workspaces. */
  list(): Handler {
    return async (exchange) => {
      sendJson(exchange.res, 200, { workspaces: (await this.#index.list(exchange.tenant!)).map(workspaceJson) });
    };
  }

  /** `GET /v1/workspaces/:id/archive`: the workspace's files as a tar archive. */
  archive(): Handler {
    return async (exchange) => {
      const row = await this.#require(exchange);
      const { bus } = this.#context;
      const archiveObject = `${row.tenant}.${row.id}.export.${randomBytes(4).toString("hex")}`;
      const store = await this.#objects();
      try {
        await bus.request(bus.names.workspaceExport, ExportWorkspaceRequest, { tenant: row.tenant, workspaceId: row.id, archiveObject }, ExportWorkspaceResponse, { timeoutMs: SANDBOX_TIMEOUT_MS });
        const result = await store.get(archiveObject);
        if (!result) throw new GatewayError(502, "gateway.archive_missing", "the workspace archive vanished before it could be sent; retry");
        exchange.res.writeHead(200, { "content-type": "application/x-tar", "content-disposition": `attachment; filename="${row.id}.tar"`, "content-length": String(result.info.size) });
        await new Promise<void>((resolve, reject) => {
          Readable.fromWeb(result.data as unknown as WebReadableStream<Uint8Array>).on("error", reject).pipe(exchange.res).on("finish", resolve).on("error", reject);
        });
      } finally {
        await store.delete(archiveObject).catch(() => undefined);
      }
    };
  }

  /** `DELETE /v1/workspaces/:id`: deletes every session working in it (as `DELETE /v1/sessions/:id` would), then its files and row. */
  delete(): Handler {
    return async (exchange) => {
      const row = await this.#require(exchange);
      const sessions = await this.#index.sessionsOn(row.tenant, row.path);
      for (const sessionId of sessions) await this.#deleteSession(exchange, sessionId);
      const { bus } = this.#context;
      await bus.request(bus.names.workspaceDelete, DeleteWorkspaceRequest, { tenant: row.tenant, workspaceId: row.id }, DeleteWorkspaceResponse, { timeoutMs: SANDBOX_TIMEOUT_MS });
      await this.#index.remove(row.tenant, row.id);
      sendJson(exchange.res, 200, { id: row.id, deleted: true, sessions_deleted: sessions });
    };
  }

  async #require(exchange: Exchange): Promise<WorkspaceRow> {
    const row = await this.#index.get(exchange.tenant!, exchange.params.id!);
    if (!row) throw workspaceNotFound(exchange.params.id!);
    return row;
  }

  #objects(): Promise<ObjectStore> {
    this.#store ??= new Objm(this.#context.bus.nc).create(this.#context.bus.names.workspacesBucket, { storage: StorageType.File });
    return this.#store;
  }
}

function workspaceJson(row: WorkspaceRow) {
  return { id: row.id, tenant: row.tenant, title: row.title, created_at: row.created_at };
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
