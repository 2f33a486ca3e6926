import type { ContainerCreateOptions } from "dockerode";
import { TackError } from "@tack/bus";

import { authorizeWorkspace, isSandboxMode, SANDBOX_MODES as MODES, WorkspaceAccessError, type OperatorConfig, type SandboxMode } from "@tack/config";

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

/** Where the session's workspace is mounted inside the container, and the default cwd of commands. */
export const WORKSPACE_MOUNT = "/workspace";

const GIB = 1024 ** 3;

/** Checks that `mode` is a sandbox mode, failing with `sandbox.bad_mode` that lists the valid ones. */
export function parseMode(mode: string): SandboxMode {
  if (isSandboxMode(mode)) return mode;
  throw new TackError("sandbox.bad_mode", `unknown sandbox mode ${JSON.stringify(mode)}; use one of ${MODES.join(", ")}`);
}

/** A host workspace directory and the unprivileged user that commands run as. */
export interface Workspace {
  /** Canonical host path (symlinks resolved), bind-mounted at /workspace. */
  readonly path: string;
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
 * whatever the gateway checked. Refusals are `sandbox.workspace_forbidden`,
 * `sandbox.workspace_missing` or `sandbox.bad_workspace`.
 */
export function resolveWorkspace(path: string, tenant: string, config: OperatorConfig): Workspace {
  try {
    const { path: canonical, owner } = authorizeWorkspace(config, tenant, path);
    return { path: canonical, ...config.sandbox, owner };
  } catch (error) {
    if (!(error instanceof WorkspaceAccessError)) throw error;
    const code = error.reason === "forbidden" ? "sandbox.workspace_forbidden" : error.reason === "missing" ? "sandbox.workspace_missing" : "sandbox.bad_workspace";
    throw new TackError(code, error.message, { details: error.details });
  }
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

/** How the workspace reaches /workspace: bound directly, or through a pool slot that the workspace is mounted onto later. */
export type WorkspaceMount =
  | { readonly kind: "direct"; readonly path: string; readonly readOnly: boolean }
  | { readonly kind: "slot"; readonly path: string };

/** Everything that decides how one container is created. */
export interface SandboxSpec {
  readonly name: string;
  readonly image: string;
  readonly runtime: string;
  readonly labels: Record<string, string>;
  readonly user: { readonly uid: number; readonly gid: number };
  readonly workspace: WorkspaceMount;
  /** The Docker network of a networked sandbox (its namespace's egress-guarded one, see egress.ts), or false for none. */
  readonly network: string | false;
  /** From {@link pidsLimit}. */
  readonly pidsLimit: number;
  /** The host directory holding the exec agent: the root-owned, content-addressed copy from `installAgent`, never the checkout. */
  readonly agentDir: string;
}

/**
 * The pids limit for a runtime. Under gVisor the cgroup counts the sandbox kernel's host
 * threads (about six per process in the sandbox) and reaching it stops the whole sandbox
 * instead of failing a fork, so it gets room for about 300 processes; elsewhere 256 processes.
 */
export function pidsLimit(runtimePath: string | undefined): number {
  return /(^|\/)runsc$/.test(runtimePath ?? "") ? 2048 : 256;
}

/**
 * The Docker create options of a sandbox. The same hardening applies in every mode (non-root
 * user, no capabilities, no-new-privileges, read-only root with size-limited tmpfs scratch,
 * pid/memory/CPU limits, an environment that never includes the service's own); modes only
 * choose the workspace mount and whether there is a network. The main process is the exec
 * agent, talking to the service over its stdin/stdout (held open by an attach).
 */
export function containerOptions(spec: SandboxSpec): ContainerCreateOptions {
  const { uid, gid } = spec.user;
  const workspace = spec.workspace.kind === "direct"
    ? { Type: "bind" as const, Source: spec.workspace.path, Target: WORKSPACE_MOUNT, ReadOnly: spec.workspace.readOnly }
    // rslave: the workspace the service later binds onto the slot on the host appears here; nothing propagates back.
    : { Type: "bind" as const, Source: spec.workspace.path, Target: WORKSPACE_MOUNT, ReadOnly: false, BindOptions: { Propagation: "rslave" as const } };
  return {
    name: spec.name,
    Image: spec.image,
    // -I: ignore PYTHON* variables and user site; -S: no site import (faster start); -B: the root is read-only anyway.
    Cmd: ["python3", "-I", "-S", "-B", `${AGENT_MOUNT}/agent.py`],
    User: `${uid}:${gid}`,
    WorkingDir: WORKSPACE_MOUNT,
    Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/home/tack", "LANG=C.UTF-8"],
    Labels: spec.labels,
    // The agent's channel: stdin stays open across attaches so that a restarted service can attach again.
    OpenStdin: true,
    StdinOnce: false,
    AttachStdin: true,
    AttachStdout: true,
    AttachStderr: true,
    Tty: false,
    HostConfig: {
      Runtime: spec.runtime,
      // No init: the agent is PID 1 itself and reaps the orphans of finished commands. An init in front of it would hold the
      // agent's channel in a process commands could ptrace and whose /proc/1/fd they could open (decision 0010).
      Init: false,
      CapDrop: ["ALL"],
      SecurityOpt: ["no-new-privileges"],
      ReadonlyRootfs: true,
      Tmpfs: {
        "/tmp": "rw,nosuid,nodev,size=256m,mode=1777",
        "/home/tack": `rw,nosuid,nodev,size=64m,uid=${uid},gid=${gid},mode=0755`,
      },
      Mounts: [workspace, { Type: "bind", Source: spec.agentDir, Target: AGENT_MOUNT, ReadOnly: true }],
      NetworkMode: spec.network || "none",
      PidsLimit: spec.pidsLimit,
      Memory: GIB,
      // Equal to Memory: no swap on top of the memory limit.
      MemorySwap: GIB,
      NanoCpus: 1e9,
      // The agent's frames go to the service only; logging them would fill the disk with command output.
      LogConfig: { Type: "none", Config: {} },
    },
  };
}
