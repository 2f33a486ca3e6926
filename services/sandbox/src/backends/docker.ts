// The Docker backend: sandboxes are containers of a Docker engine (dockerode, honouring
// DOCKER_HOST), under runc or gVisor's runsc; networked ones join the namespace's egress-guarded
// bridge (docker-egress.ts). The only place in the service that talks to Docker.
import type { Socket } from "node:net";
import Docker from "dockerode";
import type { ContainerCreateOptions } from "dockerode";
import { TackError } from "@tack/bus";
import { WORKSPACE } from "@tack/config";
import type {
  AgentReceiver,
  AgentStreams,
  BackendHealth,
  BackendOptions,
  LabelSelector,
  NetworkGrant,
  RuntimeTraits,
  SandboxBackend,
  SandboxInfo,
  SandboxSpec,
  SandboxState,
} from "../backend.js";
import { AGENT_MOUNT } from "../spec.js";
import { Egress } from "./docker-egress.js";
import { dockerFailure, engineRuntimes, statusOf, type RuntimeInfo } from "./docker-engine.js";
import { servedIdentity } from "./docker-served.js";

// The engine's runtimes change only when dockerd restarts; re-read them this often.
const RUNTIMES_FRESH_MS = 10_000;
// Docker's multiplexed attach stream: 8-byte header (stream type, 3 zero bytes, u32 length).
const DOCKER_HEADER = 8;

/**
 * The Docker create options of a sandbox: the spec plus what every sandbox gets (non-root user,
 * all capabilities dropped, no-new-privileges, read-only root, Docker's default seccomp profile,
 * no init in front of the agent, no log driver).
 */
export function containerOptions(spec: SandboxSpec): ContainerCreateOptions {
  const { uid, gid } = spec.user;
  const workspace = spec.workspace.kind === "direct"
    ? { Type: "bind" as const, Source: spec.workspace.path, Target: WORKSPACE, ReadOnly: spec.workspace.readOnly }
    // rslave: the workspace the service later binds onto the slot on the host appears here; nothing propagates back.
    : { Type: "bind" as const, Source: spec.workspace.path, Target: WORKSPACE, ReadOnly: false, BindOptions: { Propagation: "rslave" as const } };
  const mib = (bytes: number) => `${Math.floor(bytes / 1024 ** 2)}m`;
  return {
    name: spec.name,
    Image: spec.image,
    Cmd: [...spec.command],
    User: `${uid}:${gid}`,
    WorkingDir: spec.workingDir,
    Env: Object.entries(spec.env).map(([name, value]) => `${name}=${value}`),
    Labels: { ...spec.labels },
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
        "/tmp": `rw,nosuid,nodev,size=${mib(spec.limits.tmpBytes)},mode=1777`,
        [spec.home]: `rw,nosuid,nodev,size=${mib(spec.limits.homeBytes)},uid=${uid},gid=${gid},mode=0755`,
      },
      Mounts: [workspace, { Type: "bind", Source: spec.agentDir, Target: AGENT_MOUNT, ReadOnly: true }],
      NetworkMode: spec.network || "none",
      PidsLimit: spec.limits.pids,
      Memory: spec.limits.memoryBytes,
      // Equal to Memory: no swap on top of the memory limit.
      MemorySwap: spec.limits.memoryBytes,
      NanoCpus: Math.round(spec.limits.cpus * 1e9),
      // The agent's frames go to the service only; logging them would fill the disk with command output.
      LogConfig: { Type: "none", Config: {} },
    },
  };
}

/** A runtime's traits from its binary: gVisor's runsc has a kernel of its own, runc and crun share the host's mounts. */
export function runtimeTraits(name: string, info: RuntimeInfo): RuntimeTraits {
  const gvisor = /(^|\/)runsc$/.test(info.path ?? "");
  return {
    name,
    ...(info.path ? { path: info.path } : {}),
    userspaceKernel: gvisor,
    // gVisor and VM runtimes serve the workspace from a snapshot of the host's mounts taken at start.
    seesLaterHostMounts: /(^|\/)(runc|crun)$/.test(info.path ?? ""),
    // gVisor's gofer (the 2022 build) cannot serve files through an idmapped mount (decision 0008).
    idmappedMounts: !gvisor,
  };
}

/**
 * Sandboxes as containers of the Docker engine that `DOCKER_HOST` names (default: the local
 * socket). The runtime is never replaced: one the engine lacks fails (`sandbox.runtime_missing`).
 */
export class DockerBackend implements SandboxBackend {
  readonly kind = "docker";
  readonly #docker: Docker;
  readonly #runtime: string;
  readonly #egress: Egress;
  #runtimes: { at: number; read: Promise<Record<string, RuntimeInfo>> } | undefined;

  /** Fails with `sandbox.egress_bad_policy` when the egress policy holds something that is not an IPv4 CIDR. */
  constructor(options: BackendOptions, docker: Docker = new Docker()) {
    this.#docker = docker;
    this.#runtime = options.runtime;
    this.#egress = new Egress(docker, { namespace: options.namespace, runtime: options.runtime, policy: options.egress, warn: options.warn });
  }

  async health(): Promise<BackendHealth> {
    try {
      await this.#docker.ping();
    } catch (error) {
      throw dockerFailure(error, "reach the Docker engine");
    }
    const info = (await this.#docker.info().catch((error: unknown) => Promise.reject(dockerFailure(error, "read the engine's information")))) as { ServerVersion?: string; Runtimes?: Record<string, unknown> };
    return { backend: this.kind, version: info.ServerVersion ?? "unknown", runtimes: Object.keys(info.Runtimes ?? {}) };
  }

  async checkImage(image: string): Promise<void> {
    try {
      await this.#docker.getImage(image).inspect();
    } catch (error) {
      if (statusOf(error) === 404) throw imageMissing(image, error);
      throw dockerFailure(error, `look up sandbox image ${image}`);
    }
  }

  async open(): Promise<void> {
    await this.#egress.start();
  }

  async close(removeShared: boolean): Promise<void> {
    await this.#egress.stop(removeShared);
  }

  // The engine's runtimes, read again when older than RUNTIMES_FRESH_MS.
  #engineRuntimes(): Promise<Record<string, RuntimeInfo>> {
    if (!this.#runtimes || Date.now() - this.#runtimes.at > RUNTIMES_FRESH_MS) {
      const read = engineRuntimes(this.#docker);
      this.#runtimes = { at: Date.now(), read };
      // A failed read is not kept.
      read.catch(() => {
        if (this.#runtimes?.read === read) this.#runtimes = undefined;
      });
    }
    return this.#runtimes.read;
  }

  async runtime(): Promise<RuntimeTraits> {
    const runtimes = await this.#engineRuntimes();
    const found = runtimes[this.#runtime];
    if (!found) {
      throw new TackError(
        "sandbox.runtime_missing",
        `Docker runtime ${this.#runtime} is not configured in the engine (it has ${Object.keys(runtimes).join(", ") || "none"}); ` +
          `declare it in /etc/docker/daemon.json and restart dockerd, or set TACK_SANDBOX_RUNTIME to one it has`,
      );
    }
    return runtimeTraits(this.#runtime, found);
  }

  async grantNetwork(): Promise<NetworkGrant> {
    const grant = await this.#egress.grant();
    return { network: grant.network, runtime: grant.runtime };
  }

  async create(spec: SandboxSpec, label: string): Promise<string> {
    const create = containerOptions(spec);
    try {
      const container = await this.#docker.createContainer(create).catch(async (error: unknown) => {
        if (statusOf(error) !== 409) throw error;
        // The caller owns the name through its placement record: whatever holds it was left by a crash.
        await this.remove(spec.name);
        return this.#docker.createContainer(create);
      });
      return container.id;
    } catch (error) {
      if (statusOf(error) === 404) throw imageMissing(spec.image, error);
      throw dockerFailure(error, `create the sandbox container of ${label}`);
    }
  }

  async attach(id: string, label: string): Promise<AgentStreams> {
    let socket: Socket;
    try {
      socket = (await this.#docker.getContainer(id).attach({ stream: true, stdin: true, stdout: true, stderr: true, hijack: true })) as unknown as Socket;
    } catch (error) {
      throw dockerFailure(error, `attach to the exec agent of ${label}`);
    }
    socket.setNoDelay?.(true);
    return new AttachedStreams(socket);
  }

  async start(id: string, label: string): Promise<void> {
    try {
      await this.#docker.getContainer(id).start();
    } catch (error) {
      // 304: it runs already, which is what was asked.
      if (statusOf(error) !== 304) throw dockerFailure(error, `start the sandbox container of ${label}`);
    }
  }

  async stop(id: string, label: string): Promise<void> {
    try {
      // t=0: SIGKILL at once; the call returns once it stopped.
      await this.#docker.getContainer(id).stop({ t: 0 });
    } catch (error) {
      // 304: stopped already; 404: gone already. Either is what was asked.
      const status = statusOf(error);
      if (status !== 304 && status !== 404) throw dockerFailure(error, `stop the sandbox container of ${label}`);
    }
  }

  async state(id: string, label: string): Promise<SandboxState | undefined> {
    try {
      const { State } = await this.#docker.getContainer(id).inspect();
      return { running: State.Running, oomKilled: State.OOMKilled, exitCode: State.ExitCode };
    } catch (error) {
      if (statusOf(error) === 404) return undefined;
      throw dockerFailure(error, `inspect the sandbox container of ${label}`);
    }
  }

  async killRequested(id: string, sinceMs: number): Promise<boolean | undefined> {
    try {
      // Past events only (`until` now): the stream ends by itself. Docker records `kill` for its kill and stop calls, never for the kernel's.
      const stream = await this.#docker.getEvents({
        since: Math.floor(sinceMs / 1000), until: Math.ceil(Date.now() / 1000),
        filters: { type: ["container"], container: [id], event: ["kill"] },
      });
      let text = "";
      for await (const chunk of stream as unknown as AsyncIterable<Buffer>) text += chunk.toString("utf8");
      return text.trim().length > 0;
    } catch {
      return undefined;
    }
  }

  async workspaceIdentity(id: string, label: string): Promise<{ dev: string; ino: string } | undefined> {
    let inspected: { Id: string; State: { Running: boolean; Pid: number }; HostConfig: { Runtime?: string } };
    try {
      inspected = await this.#docker.getContainer(id).inspect();
    } catch (error) {
      if (statusOf(error) === 404) return undefined;
      throw dockerFailure(error, `inspect the sandbox container of ${label}`);
    }
    if (!inspected.State.Running || !inspected.State.Pid) return undefined;
    // Its own runtime: a networked sandbox runs under the configured one's twin.
    const runtime = inspected.HostConfig.Runtime || this.#runtime;
    const gvisor = runtimeTraits(runtime, (await this.#engineRuntimes())[runtime] ?? {}).userspaceKernel;
    return servedIdentity(inspected.State.Pid, inspected.Id, gvisor, WORKSPACE);
  }

  async rename(id: string, name: string): Promise<void> {
    const container = this.#docker.getContainer(id);
    try {
      await container.rename({ name });
    } catch (error) {
      if (statusOf(error) !== 409) throw dockerFailure(error, `name pool container ${id} ${name}`);
      await this.remove(name);
      await container.rename({ name }).catch((again: unknown) => Promise.reject(dockerFailure(again, `name pool container ${id} ${name}`)));
    }
  }

  async remove(idOrName: string): Promise<boolean> {
    try {
      await this.#docker.getContainer(idOrName).remove({ force: true });
      return true;
    } catch (error) {
      if (statusOf(error) === 404) return false;
      // 409: a removal is already under way (a concurrent release); the container is going either way.
      if (statusOf(error) === 409) return true;
      throw dockerFailure(error, `remove sandbox container ${idOrName}`);
    }
  }

  async list(selector: LabelSelector): Promise<SandboxInfo[]> {
    const label = Object.entries(selector).map(([name, value]) => (value === true ? name : `${name}=${value}`));
    try {
      const containers = await this.#docker.listContainers({ all: true, filters: { label } });
      return containers.map((info) => ({ id: info.Id, name: (info.Names[0] ?? "").replace(/^\//, ""), labels: info.Labels ?? {} }));
    } catch (error) {
      throw dockerFailure(error, `list the sandbox containers labelled ${label.join(", ")}`);
    }
  }
}

function imageMissing(image: string, cause: unknown): TackError {
  return new TackError("sandbox.image_missing", `sandbox image ${image} is not in the local Docker engine; build it with \`make sandbox-image\``, { cause });
}

// A hijacked attach: Docker multiplexes stdout and stderr on the socket as frames with an 8-byte header.
class AttachedStreams implements AgentStreams {
  readonly #socket: Socket;
  #buffer: Buffer = Buffer.alloc(0);
  #destroyed = false;

  constructor(socket: Socket) {
    this.#socket = socket;
  }

  listen(receiver: AgentReceiver): void {
    const socket = this.#socket;
    socket.on("data", (chunk: Buffer) => this.#demultiplex(chunk, receiver));
    socket.on("end", () => receiver.ended("its output ended (the agent or its container stopped)"));
    socket.on("close", () => receiver.ended("the attach connection closed"));
    socket.on("error", (error) => receiver.ended(`the attach connection failed: ${error.message}`));
  }

  write(bytes: Uint8Array): void {
    this.#socket.write(bytes);
  }

  destroy(): void {
    this.#destroyed = true;
    this.#socket.destroy();
  }

  #demultiplex(chunk: Buffer, receiver: AgentReceiver): void {
    this.#buffer = this.#buffer.length ? Buffer.concat([this.#buffer, chunk]) : chunk;
    while (!this.#destroyed && this.#buffer.length >= DOCKER_HEADER) {
      const length = this.#buffer.readUInt32BE(4);
      if (this.#buffer.length < DOCKER_HEADER + length) break;
      const stream = this.#buffer[0];
      const payload = this.#buffer.subarray(DOCKER_HEADER, DOCKER_HEADER + length);
      this.#buffer = this.#buffer.subarray(DOCKER_HEADER + length);
      if (stream === 2) receiver.stderr(payload);
      else receiver.stdout(payload);
    }
  }
}
