import { realpath, stat } from "node:fs/promises";
import { isAbsolute } from "node:path";
import type { ContainerCreateOptions } from "dockerode";
import { TackError } from "@tack/bus";

/** The sandbox modes, narrowest first. */
export const MODES = ["read-only", "workspace-write", "danger-full-access"] as const;
/** One of {@link MODES}. */
export type SandboxMode = (typeof MODES)[number];

/** Container labels that identify a session's sandbox (so a restarted service finds its containers). */
export const LABELS = {
  namespace: "tack.namespace",
  session: "tack.session",
  tenant: "tack.tenant",
  mode: "tack.mode",
  workspace: "tack.workspace",
} as const;

/** Where the session's workspace is mounted inside the container, and the default cwd of commands. */
export const WORKSPACE_MOUNT = "/workspace";

const FALLBACK_USER = { uid: 1000, gid: 1000 };
const GIB = 1024 ** 3;

/** Checks that `mode` is a sandbox mode, failing with `sandbox.bad_mode` that lists the valid ones. */
export function parseMode(mode: string): SandboxMode {
  if ((MODES as readonly string[]).includes(mode)) return mode as SandboxMode;
  throw new TackError("sandbox.bad_mode", `unknown sandbox mode ${JSON.stringify(mode)}; use one of ${MODES.join(", ")}`);
}

/** A host workspace directory and the unprivileged user that commands run as. */
export interface Workspace {
  /** Canonical host path (symlinks resolved), bind-mounted at /workspace. */
  readonly path: string;
  readonly uid: number;
  readonly gid: number;
}

/**
 * Resolves the workspace directory and picks the user: its owner, so files written in the
 * sandbox belong to whoever owns the workspace, or uid 1000 when root owns it. Commands
 * never run as root, so a root-owned workspace cannot be written and is refused in the
 * writable modes instead of failing on the first write.
 */
export async function resolveWorkspace(path: string, mode: SandboxMode): Promise<Workspace> {
  if (!path || !isAbsolute(path)) {
    throw new TackError("sandbox.bad_workspace", `workspace ${JSON.stringify(path)} is not an absolute host path; pass the project directory as an absolute path`);
  }
  let canonical: string;
  try {
    canonical = await realpath(path);
  } catch {
    throw new TackError("sandbox.workspace_missing", `workspace directory ${path} does not exist on the sandbox host; create it or pass an existing directory`);
  }
  const info = await stat(canonical);
  if (!info.isDirectory()) {
    throw new TackError("sandbox.bad_workspace", `workspace ${path} is not a directory; pass the project directory`);
  }
  if (info.uid !== 0) return { path: canonical, uid: info.uid, gid: info.gid };
  if (mode !== "read-only") {
    throw new TackError(
      "sandbox.workspace_owned_by_root",
      `workspace ${path} is owned by root and sandboxes never run as root, so mode ${mode} could not write to it; run \`chown -R 1000:1000 ${path}\``,
    );
  }
  return { path: canonical, ...FALLBACK_USER };
}

/** Everything that decides how one session's container is created. */
export interface SandboxSpec {
  readonly name: string;
  readonly image: string;
  readonly runtime: string;
  readonly namespace: string;
  readonly sessionId: string;
  readonly tenant: string;
  readonly mode: SandboxMode;
  readonly workspace: Workspace;
}

/**
 * The Docker create options of a sandbox. The same hardening applies in every mode (non-root
 * user, no capabilities, no-new-privileges, read-only root with size-limited tmpfs scratch,
 * pid/memory/CPU limits, an environment that never includes the service's own); modes only
 * choose the workspace mount and whether there is a network.
 */
export function containerOptions(spec: SandboxSpec): ContainerCreateOptions {
  const { uid, gid } = spec.workspace;
  return {
    name: spec.name,
    Image: spec.image,
    // `sleep infinity` only keeps the container up; commands arrive as execs.
    Cmd: ["sleep", "infinity"],
    User: `${uid}:${gid}`,
    WorkingDir: WORKSPACE_MOUNT,
    Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/home/tack", "LANG=C.UTF-8"],
    Labels: {
      [LABELS.namespace]: spec.namespace,
      [LABELS.session]: spec.sessionId,
      [LABELS.tenant]: spec.tenant,
      [LABELS.mode]: spec.mode,
      [LABELS.workspace]: spec.workspace.path,
    },
    HostConfig: {
      Runtime: spec.runtime,
      // An init as PID 1 reaps the orphans of finished commands, which would otherwise pile up against the pid limit.
      Init: true,
      CapDrop: ["ALL"],
      SecurityOpt: ["no-new-privileges"],
      ReadonlyRootfs: true,
      Tmpfs: {
        "/tmp": "rw,nosuid,nodev,size=256m,mode=1777",
        "/home/tack": `rw,nosuid,nodev,size=64m,uid=${uid},gid=${gid},mode=0755`,
      },
      Mounts: [{ Type: "bind", Source: spec.workspace.path, Target: WORKSPACE_MOUNT, ReadOnly: spec.mode === "read-only" }],
      NetworkMode: spec.mode === "danger-full-access" ? "bridge" : "none",
      PidsLimit: 256,
      Memory: GIB,
      // Equal to Memory: no swap on top of the memory limit.
      MemorySwap: GIB,
      NanoCpus: 1e9,
    },
  };
}
