// The seam between the sandbox service and a container runtime. Everything the service does to
// a container goes through a SandboxBackend; only `src/backends/` knows how an engine does it
// (today Docker: src/backends/docker.ts). The exec agent's protocol, the warm pool's host mounts,
// placements and the service's rules stay on this side: a backend creates, starts, attaches to,
// lists and removes sandboxes, and tells what its runtime can do. How to add one: the README's
// "Add a backend" and test/backend-conformance.test.ts.

/** How the workspace reaches /workspace: bound directly, or through a pool slot that the workspace is mounted onto later. */
export type WorkspaceMount =
  | { readonly kind: "direct"; readonly path: string; readonly readOnly: boolean }
  | { readonly kind: "slot"; readonly path: string };

/** The resource limits of one sandbox; every backend enforces all of them. */
export interface SandboxLimits {
  /** Memory in bytes, swap included (no swap on top of it). */
  readonly memoryBytes: number;
  /** CPUs (1 = one core's worth of time). */
  readonly cpus: number;
  /** Most tasks (pids) the sandbox's cgroup may hold. */
  readonly pids: number;
  /** Size of the writable scratch tmpfs at /tmp. */
  readonly tmpBytes: number;
  /** Size of the writable tmpfs HOME. */
  readonly homeBytes: number;
}

/**
 * Everything that decides how one sandbox is created; built by `sandboxSpec` (src/spec.ts).
 * A backend must apply every field, and besides them, always: the given non-root user, no
 * capabilities, no-new-privileges, a read-only root filesystem, the runtime's default seccomp
 * profile, no environment but `env`, stdin held open for the agent's channel, no log of the
 * sandbox's output on the host.
 */
export interface SandboxSpec {
  /** Unique name of the sandbox on the backend (`tack-<ns>-<session>.<mode>` or a pool name). */
  readonly name: string;
  /** The sandbox image (a root filesystem with python3 for the agent). */
  readonly image: string;
  /** The runtime to run it under (e.g. runc, runsc, runsc-net); never replaced by another. */
  readonly runtime: string;
  /** Labels the sandbox carries, listed back by `list`; fixed at creation. */
  readonly labels: Readonly<Record<string, string>>;
  /** The user every process runs as: never 0. */
  readonly user: { readonly uid: number; readonly gid: number };
  /** The main process: the exec agent, which holds the channel on its stdin/stdout. */
  readonly command: readonly string[];
  /** The whole environment of the main process. */
  readonly env: Readonly<Record<string, string>>;
  /** Working directory of the main process. */
  readonly workingDir: string;
  /** The writable tmpfs HOME (the other writable places are /tmp and the workspace). */
  readonly home: string;
  /** The workspace at /workspace (a host directory, possibly an idmapped mount the service prepared). */
  readonly workspace: WorkspaceMount;
  /** Host directory of the exec agent, mounted read-only at /opt/tack. */
  readonly agentDir: string;
  /** The network from `grantNetwork` for a networked sandbox, or false for none at all (loopback only). */
  readonly network: string | false;
  readonly limits: SandboxLimits;
}

/** What the configured runtime is and can do, as far as the service must know. */
export interface RuntimeTraits {
  /** The runtime's name (the configured one). */
  readonly name: string;
  /** Where its binary is, when the backend knows (for messages). */
  readonly path?: string;
  /**
   * True when the sandbox runs on a kernel of its own in user space (gVisor): its pids cgroup
   * counts that kernel's threads, so the pids limit is larger (see `pidsLimit`).
   */
  readonly userspaceKernel: boolean;
  /** True when mounts made on the host after the sandbox started appear in it (runc, crun): needed by the warm pool. */
  readonly seesLaterHostMounts: boolean;
  /** True when it can serve a workspace through an idmapped mount (decision 0008). */
  readonly idmappedMounts: boolean;
}

/** Where a networked sandbox goes: the egress-guarded network and the runtime to run it under. */
export interface NetworkGrant {
  readonly network: string;
  readonly runtime: string;
}

/** A sandbox as `list` reports it. */
export interface SandboxInfo {
  readonly id: string;
  /** Its current name, without a leading slash. */
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
}

/** Whether a sandbox runs, and why it stopped when it does not. */
export interface SandboxState {
  readonly running: boolean;
  /** True when it was killed for going over its memory limit. */
  readonly oomKilled: boolean;
  /** The main process's exit code once it stopped. */
  readonly exitCode: number;
}

/** What the backend's engine is, for health reports. */
export interface BackendHealth {
  /** The backend's kind, e.g. `docker`. */
  readonly backend: string;
  /** The engine's version. */
  readonly version: string;
  /** The runtimes the engine offers, by name. */
  readonly runtimes: readonly string[];
}

/** Where the agent's channel delivers what arrives from the sandbox. */
export interface AgentReceiver {
  /** Bytes the agent wrote to its stdout (the channel's frames), in order. */
  stdout(chunk: Buffer): void;
  /** Bytes the agent wrote to its stderr (kept to explain a death). */
  stderr(chunk: Buffer): void;
  /** The connection ended or broke; may be called more than once (the first reason counts). */
  ended(reason: string): void;
}

/**
 * The service's connection to a sandbox's main process: its stdin one way, its stdout and
 * stderr kept apart the other way. Closing it leaves the process running; a later `attach`
 * takes it over.
 */
export interface AgentStreams {
  /** Sets where incoming bytes go; called once, right after `attach`, before anything is written. */
  listen(receiver: AgentReceiver): void;
  /** Writes bytes to the main process's stdin. */
  write(bytes: Uint8Array): void;
  /** Ends the connection; no more bytes are delivered. */
  destroy(): void;
}

/** Which sandboxes `list` returns: each entry a label that must be present (`true`) or have that value. */
export type LabelSelector = Readonly<Record<string, string | true>>;

/**
 * A container runtime the sandbox service runs sandboxes on. Errors are TackErrors that name
 * what failed and how to fix it; an engine that cannot be reached fails every call (fail
 * closed), never degrades to something weaker.
 */
export interface SandboxBackend {
  /** Short name, e.g. `docker`. */
  readonly kind: string;

  /** Checks that the engine answers; fails naming how to start it. Called first at service start. */
  health(): Promise<BackendHealth>;
  /** Fails with `sandbox.image_missing` (naming the image and `make sandbox-image`) when the engine does not hold `image`. */
  checkImage(image: string): Promise<void>;
  /** Prepares what the backend shares between sandboxes (e.g. the egress guard), after `health`. */
  open(): Promise<void>;
  /** Stops background work; with `removeShared`, also removes what `open` made unless other replicas still use it. */
  close(removeShared: boolean): Promise<void>;

  /** The configured runtime's traits; fails with `sandbox.runtime_missing` when the engine lacks it (no fallback). */
  runtime(): Promise<RuntimeTraits>;
  /**
   * Makes sure a networked sandbox can start under the egress policy right now (network and
   * firewall in place and read back) and says where it goes; fails with
   * `sandbox.egress_unavailable` or `sandbox.runtime_without_network` otherwise (fail closed).
   */
  grantNetwork(): Promise<NetworkGrant>;

  /**
   * Creates a sandbox from `spec` without starting it; returns its id. A sandbox already holding
   * the name is removed first (the caller owns the name). Fails with `sandbox.image_missing`
   * when the image is absent. `label` names it in messages.
   */
  create(spec: SandboxSpec, label: string): Promise<string>;
  /** Opens the streams of its main process (created, running or stopped); `listen` must follow at once. */
  attach(id: string, label: string): Promise<AgentStreams>;
  /** Starts it; one that already runs is fine. */
  start(id: string, label: string): Promise<void>;
  /** Kills its main process and returns once it stopped; one that is stopped or gone already is fine. */
  stop(id: string, label: string): Promise<void>;
  /** Its state, or undefined when it does not exist. */
  state(id: string, label: string): Promise<SandboxState | undefined>;
  /**
   * Whether the engine was asked to kill or stop it since `sinceMs` (ms since the epoch): tells a
   * kill by someone from one by the kernel, whose OOM killer the engine does not always report
   * (gVisor). Undefined when the backend cannot say; optional.
   */
  killRequested?(id: string, sinceMs: number): Promise<boolean | undefined>;
  /**
   * The host device and inode (decimal strings) of the directory the running sandbox is served
   * at /workspace, read on the host where its runtime takes its files from (the container's own
   * mount namespace; gVisor's file proxy); undefined when it does not run. The service compares
   * it with the directory it mounted (decision 0021), so a backend that cannot tell must fail.
   */
  workspaceIdentity(id: string, label: string): Promise<{ readonly dev: string; readonly ino: string } | undefined>;
  /** Gives it `name`, removing a sandbox that holds the name. */
  rename(id: string, name: string): Promise<void>;
  /** Removes it, killing what runs in it; false when it was already gone. */
  remove(idOrName: string): Promise<boolean>;
  /** The sandboxes (running or not) whose labels match `selector`. */
  list(selector: LabelSelector): Promise<SandboxInfo[]>;
}

/** Makes the backend of a service from its validated options (namespace, runtime, egress policy). */
export type BackendFactory = (options: BackendOptions) => SandboxBackend;

/** What a backend is configured with. */
export interface BackendOptions {
  /** The service's namespace: shared things the backend makes (networks) carry it. */
  readonly namespace: string;
  /** The runtime sandboxes run under (networked ones under its networked twin where there is one). */
  readonly runtime: string;
  /** What networked sandboxes may reach beyond the public internet (operator configuration). */
  readonly egress: { readonly allowCidrs: readonly string[]; readonly allowDns: boolean };
  readonly warn: (message: string) => void;
}
