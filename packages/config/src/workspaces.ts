// Which host directories a tenant may use as a workspace: one rule, checked where a request
// enters (gateway) and again where the effect happens (sandbox service).
import { realpathSync, statSync } from "node:fs";
import { isAbsolute, join } from "node:path";
import { isInside, type OperatorConfig } from "./operator.js";

/** Where a session's workspace is mounted inside its sandbox, and where its commands start: the one spelling every service uses. */
export const WORKSPACE = "/workspace";

/** Why a workspace was refused: `forbidden` (outside the tenant's roots or overlapping Tack's own files), `missing`, `not_directory`, `bad_path`. */
export type WorkspaceRefusal = "forbidden" | "missing" | "not_directory" | "bad_path";

/** A refused workspace; the message names what was wrong and what is allowed. */
export class WorkspaceAccessError extends Error {
  readonly reason: WorkspaceRefusal;
  readonly details: Record<string, string>;
  constructor(reason: WorkspaceRefusal, message: string, details: Record<string, string>) {
    super(message);
    this.name = "WorkspaceAccessError";
    this.reason = reason;
    this.details = details;
  }
}

/** A workspace a tenant may use. */
export interface AuthorizedWorkspace {
  /** Canonical path (symlinks resolved). */
  readonly path: string;
  /** True for a Tack-managed workspace (created over the API). */
  readonly managed: boolean;
  /** Owner of the directory on the host (mapped to the sandbox user inside the container). */
  readonly owner: { readonly uid: number; readonly gid: number };
}

/** Directory holding a tenant's managed workspaces. */
export function managedWorkspacesDir(config: OperatorConfig, tenant: string): string {
  return join(config.workspaces.dir, tenant);
}

/** The host directory of managed workspace `id` of `tenant`. */
export function managedWorkspacePath(config: OperatorConfig, tenant: string, id: string): string {
  return join(managedWorkspacesDir(config, tenant), id);
}

/**
 * Checks that `tenant` may use the host directory `path` as a workspace: after resolving
 * symlinks it must be one of the tenant's managed workspaces, or inside one of the tenant's
 * configured roots without being, containing or lying inside Tack's own install and state.
 * Throws `WorkspaceAccessError` naming the allowed roots otherwise.
 */
export function authorizeWorkspace(config: OperatorConfig, tenant: string, path: string): AuthorizedWorkspace {
  if (!path || !isAbsolute(path)) {
    throw new WorkspaceAccessError("bad_path", `workspace ${JSON.stringify(path)} is not an absolute path; pass the project directory as an absolute path`, { workspace: path });
  }
  let canonical: string;
  try {
    canonical = realpathSync(path);
  } catch {
    throw new WorkspaceAccessError("missing", `workspace ${path} does not exist; create it or pass an existing directory under ${rootsText(config, tenant)}`, { workspace: path });
  }
  const info = statSync(canonical);
  if (!info.isDirectory()) throw new WorkspaceAccessError("not_directory", `workspace ${path} is not a directory; pass the project directory`, { workspace: path });
  const owner = { uid: info.uid, gid: info.gid };
  const managedDir = realpathOrSelf(managedWorkspacesDir(config, tenant));
  // A managed workspace is exactly one level below the tenant's directory, never the directory itself.
  if (isInside(canonical, managedDir) && canonical !== managedDir && !canonical.slice(managedDir.length + 1).includes("/")) {
    return { path: canonical, managed: true, owner };
  }
  const roots = config.tenants[tenant]?.workspace_roots ?? [];
  const details = { workspace: canonical, allowed_roots: roots.join(",") };
  if (!roots.some((root) => isInside(canonical, root))) {
    throw new WorkspaceAccessError("forbidden", `workspace ${canonical} is outside the directories tenant ${tenant} may use (${rootsText(config, tenant)}); pass a directory under one of them or create a managed workspace with POST /v1/workspaces`, details);
  }
  const managedRoot = realpathOrSelf(config.workspaces.dir);
  for (const own of [...config.protectedPaths, managedRoot]) {
    if (isInside(canonical, own) || isInside(own, canonical)) {
      throw new WorkspaceAccessError("forbidden", `workspace ${canonical} overlaps ${own}, which holds Tack's own install, state or managed workspaces; pass a project directory that neither contains nor lies inside it`, details);
    }
  }
  return { path: canonical, managed: false, owner };
}

function rootsText(config: OperatorConfig, tenant: string): string {
  const roots = config.tenants[tenant]?.workspace_roots ?? [];
  return roots.length > 0 ? `allowed roots: ${roots.join(", ")}` : `tenant ${tenant} has no workspace roots configured, only managed workspaces`;
}

function realpathOrSelf(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    return path;
  }
}
