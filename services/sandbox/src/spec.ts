import { dirname } from "node:path";
import { TackError } from "@tack/bus";
import type { RuntimeTraits, SandboxSpec, WorkspaceMount } from "./backend.js";

import { authorizeWorkspace, isInside, isSandboxMode, SANDBOX_MODES as MODES, WORKSPACE, WorkspaceAccessError, type OperatorConfig, type SandboxMode } from "@tack/config";

export { MODES, type SandboxMode };

/**
 * Container labels. Every container carries the namespace and the replica that owns it; one
 * created for a session carries the session's identity too, while one created for the warm
 * pool carries its slot (labels are fixed at creation, so a claimed pool container is named
 * after its session and the rest lives in the placement record).
 */
export const LABELS = {
  namespace: "tack.namespace",
  replica: "tack.replica",
  session: "tack.session",
  tenant: "tack.tenant",
  mode: "tack.mode",
  workspace: "tack.workspace",
  pool: "tack.pool",
  /** Host directory holding the workspace through an ID mapping, for a container created directly (removed with it). */
  mount: "tack.mount",
} as const;

const GIB = 1024 ** 3;

/** Checks that `mode` is a sandbox mode, failing with `sandbox.bad_mode` that lists the valid ones. */
export function parseMode(mode: string): SandboxMode {
  if (isSandboxMode(mode)) return mode;
  throw new TackError("sandbox.bad_mode", `unknown sandbox mode ${JSON.stringify(mode)}; use one of ${MODES.join(", ")}`);
}

/** A host workspace directory and the unprivileged user that commands run as. */
export interface Workspace {
  /** Canonical host path (symlinks resolved), mounted at /workspace. */
  readonly path: string;
  /** The allowed directory it lies under (the tenant's root, or its managed workspaces directory): the mount opens it from there without symlinks. */
  readonly root: string;
  /** The sandbox user, fixed by the operator's configuration (never the workspace owner's id). */
  readonly uid: number;
  readonly gid: number;
  /** The directory's owner on the host; when it is not the sandbox user, /workspace is an idmapped mount mapping one onto the other. */
  readonly owner: { readonly uid: number; readonly gid: number };
}

/** True when the workspace's owner differs from the sandbox user, so it is mounted through an ID mapping. */
export function needsMapping(workspace: Workspace): boolean {
  return workspace.owner.uid !== workspace.uid || workspace.owner.gid !== workspace.gid;
}

/**
 * Resolves a session's workspace under the operator's rules (`authorizeWorkspace`: inside the
 * tenant's roots or one of its managed workspaces, never overlapping Tack's own files) and
 * gives it the configured sandbox user. The check is repeated here, where the mount happens,
 * whatever the gateway checked, and once more by the mount, on the descriptor it mounts
 * (decision 0021): this check is by path, which may change before the mount. Refusals are
 * `sandbox.workspace_forbidden`, `sandbox.workspace_missing` or `sandbox.bad_workspace`.
 */
export function resolveWorkspace(path: string, tenant: string, config: OperatorConfig): Workspace {
  try {
    const { path: canonical, owner, managed } = authorizeWorkspace(config, tenant, path);
    return { path: canonical, root: allowedRoot(canonical, managed, config.tenants[tenant]?.workspace_roots ?? []), ...config.sandbox, owner };
  } catch (error) {
    if (!(error instanceof WorkspaceAccessError)) throw error;
    const code = error.reason === "forbidden" ? "sandbox.workspace_forbidden" : error.reason === "missing" ? "sandbox.workspace_missing" : "sandbox.bad_workspace";
    throw new TackError(code, error.message, { details: error.details });
  }
}

// The root `canonical` was allowed under: a managed workspace's directory (exactly one level up), else the closest tenant root holding it.
function allowedRoot(canonical: string, managed: boolean, roots: readonly string[]): string {
  if (managed) return dirname(canonical);
  const holding = roots.filter((root) => isInside(canonical, root)).sort((a, b) => b.length - a.length);
  return holding[0] ?? "/";
}

/** The name of a session's container of one mode: `.` cannot occur in ids, so the name parses back. */
export function containerName(namespace: string, sessionId: string, mode: SandboxMode): string {
  return `tack-${namespace}-${sessionId}.${mode}`;
}

/** The session and mode a container name of `namespace` stands for, if it is a session's container. */
export function parseContainerName(namespace: string, name: string): { sessionId: string; mode: SandboxMode } | undefined {
  const prefix = `/tack-${namespace}-`;
  const bare = name.startsWith("/") ? name : `/${name}`;
  if (!bare.startsWith(prefix)) return undefined;
  const rest = bare.slice(prefix.length);
  const dot = rest.lastIndexOf(".");
  const mode = rest.slice(dot + 1);
  if (dot <= 0 || !isSandboxMode(mode)) return undefined;
  return { sessionId: rest.slice(0, dot), mode: mode as SandboxMode };
}

/** The name of a warm pool container. */
export function poolContainerName(namespace: string, slotId: string): string {
  return `tack-${namespace}-pool-${slotId}`;
}

/** Where the exec agent's directory is mounted inside every container (read-only); the container runs `agent.py` from it. */
export const AGENT_MOUNT = "/opt/tack";

/** Memory of a sandbox (swap included), CPUs, and its two writable tmpfs. */
export const LIMITS = { memoryBytes: GIB, cpus: 1, tmpBytes: 256 * 1024 ** 2, homeBytes: 64 * 1024 ** 2 } as const;

/** The sandbox user's HOME: a tmpfs of its own, the root being read-only. */
export const SANDBOX_HOME = "/home/tack";

/**
 * The pids limit for a runtime. Under gVisor the cgroup counts the sandbox kernel's host
 * threads (about six per process in the sandbox) and reaching it stops the whole sandbox
 * instead of failing a fork, so it gets room for about 300 processes; elsewhere 256 processes.
 */
export function pidsLimit(runtime: Pick<RuntimeTraits, "userspaceKernel">): number {
  return runtime.userspaceKernel ? 2048 : 256;
}

/** What differs between sandboxes; `sandboxSpec` adds what is the same for all. */
export interface SpecInput {
  readonly name: string;
  readonly image: string;
  readonly runtime: string;
  readonly labels: Record<string, string>;
  readonly user: { readonly uid: number; readonly gid: number };
  readonly workspace: WorkspaceMount;
  /** The network of a networked sandbox (from the backend's `grantNetwork`), or false for none. */
  readonly network: string | false;
  /** The configured runtime's traits (they choose the pids limit). */
  readonly traits: RuntimeTraits;
  /** The host directory holding the exec agent: the root-owned, content-addressed copy from `installAgent`, never the checkout. */
  readonly agentDir: string;
}

/**
 * The spec of a sandbox. The same hardening applies in every mode (the backend adds non-root
 * user, no capabilities, no-new-privileges and a read-only root; the spec sets size-limited
 * tmpfs scratch, pid/memory/CPU limits and an environment that never includes the service's
 * own); modes only choose the workspace mount and whether there is a network. The main process
 * is the exec agent, talking to the service over its stdin/stdout.
 */
export function sandboxSpec(input: SpecInput): SandboxSpec {
  return {
    name: input.name,
    image: input.image,
    runtime: input.runtime,
    labels: input.labels,
    user: input.user,
    // -I: ignore PYTHON* variables and user site; -S: no site import (faster start); -B: the root is read-only anyway.
    command: ["python3", "-I", "-S", "-B", `${AGENT_MOUNT}/agent.py`],
    env: { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", HOME: SANDBOX_HOME, LANG: "C.UTF-8" },
    workingDir: WORKSPACE,
    home: SANDBOX_HOME,
    workspace: input.workspace,
    agentDir: input.agentDir,
    network: input.network,
    limits: { ...LIMITS, pids: pidsLimit(input.traits) },
  };
}
