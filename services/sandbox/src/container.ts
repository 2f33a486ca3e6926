import type Docker from "dockerode";
import type { ContainerCreateOptions } from "dockerode";
import { TackError } from "@tack/bus";
import { AgentChannel } from "./agent.js";
import { dockerFailure, statusOf } from "./docker.js";

// Python starts in well under a second even under gVisor; this only bounds a wedged start on a loaded host.
const HANDSHAKE_TIMEOUT_MS = 30_000;

/** A running container with its agent's channel open. */
export interface Started {
  readonly id: string;
  readonly channel: AgentChannel;
}

/**
 * Creates and starts a container from `create` and opens its agent's channel (attached before
 * the start, greeted after it). A container that already holds the name is removed first: the
 * caller owns the name through its placement record, so it was left by a crash. A container
 * that fails on the way is removed again. Fails with `sandbox.image_missing` when the image is
 * not in the engine.
 */
export async function startNew(docker: Docker, create: ContainerCreateOptions, label: string): Promise<Started> {
  let container: Docker.Container;
  try {
    container = await docker.createContainer(create).catch(async (error: unknown) => {
      if (statusOf(error) !== 409 || !create.name) throw error;
      await removeContainer(docker, create.name);
      return docker.createContainer(create);
    });
  } catch (error) {
    if (statusOf(error) === 404) {
      throw new TackError("sandbox.image_missing", `sandbox image ${create.Image} is not in the local Docker engine; build it with \`make sandbox-image\``, { cause: error });
    }
    throw dockerFailure(error, `create the sandbox container of ${label}`);
  }
  let channel: AgentChannel | undefined;
  try {
    channel = await AgentChannel.attach(container, label);
    try {
      await container.start();
    } catch (error) {
      throw dockerFailure(error, `start the sandbox container of ${label} (runtime ${create.HostConfig?.Runtime})`);
    }
    await channel.handshake(HANDSHAKE_TIMEOUT_MS);
    return { id: container.id, channel };
  } catch (error) {
    channel?.close();
    await container.remove({ force: true }).catch(() => undefined);
    throw error;
  }
}

/**
 * Opens the agent channel of an existing container, starting it first when it is stopped (its
 * agent died, or the host restarted). Returns undefined when the container no longer exists.
 */
export async function reopen(docker: Docker, containerId: string, label: string): Promise<AgentChannel | undefined> {
  const container = docker.getContainer(containerId);
  // Twice: a container whose agent just died may still count as running for a moment.
  for (let attempt = 0; ; attempt++) {
    let running: boolean;
    try {
      running = (await container.inspect()).State.Running;
    } catch (error) {
      if (statusOf(error) === 404) return undefined;
      throw dockerFailure(error, `inspect the sandbox container of ${label}`);
    }
    const channel = await AgentChannel.attach(container, label);
    try {
      if (!running) {
        try {
          await container.start();
        } catch (error) {
          // 304: started meanwhile, which is what we wanted.
          if (statusOf(error) !== 304) throw dockerFailure(error, `restart the sandbox container of ${label}`);
        }
      }
      await channel.handshake(HANDSHAKE_TIMEOUT_MS);
      return channel;
    } catch (error) {
      channel.close();
      if (attempt > 0 || !(error instanceof TackError) || error.code !== "sandbox.agent_failed") throw error;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
}

/** Removes a container; false when it was already gone. */
export async function removeContainer(docker: Docker, idOrName: string): Promise<boolean> {
  try {
    await docker.getContainer(idOrName).remove({ force: true });
    return true;
  } catch (error) {
    if (statusOf(error) === 404) return false;
    // 409: a removal is already under way (a concurrent release); the container is going either way.
    if (statusOf(error) === 409) return true;
    throw dockerFailure(error, `remove sandbox container ${idOrName}`);
  }
}

/** A runtime as the engine declares it. */
export interface RuntimeInfo {
  readonly path?: string;
  readonly runtimeArgs?: string[];
}

/** The runtimes the engine has, by name. */
export async function engineRuntimes(docker: Docker): Promise<Record<string, RuntimeInfo>> {
  try {
    return ((await docker.info()) as { Runtimes?: Record<string, RuntimeInfo> }).Runtimes ?? {};
  } catch (error) {
    throw dockerFailure(error, "read the engine's runtimes");
  }
}

// The engine's runtimes change only when dockerd restarts; re-read them this often.
const RUNTIMES_FRESH_MS = 10_000;

/**
 * Refuses to create a container under a runtime the engine does not have (there is no
 * fallback to another one), and a network under a runtime declared without one. The engine's
 * answer is kept for a few seconds, since reading it costs as much as creating a container.
 */
export class RuntimeCheck {
  readonly #docker: Docker;
  readonly #runtime: string;
  #read: { at: number; runtimes: Promise<Record<string, RuntimeInfo>> } | undefined;

  constructor(docker: Docker, runtime: string) {
    this.#docker = docker;
    this.#runtime = runtime;
  }

  /** The configured runtime as the engine declares it; fails with `sandbox.runtime_missing` or `sandbox.runtime_without_network`. */
  async check(network: boolean): Promise<RuntimeInfo> {
    if (!this.#read || Date.now() - this.#read.at > RUNTIMES_FRESH_MS) {
      const runtimes = engineRuntimes(this.#docker);
      this.#read = { at: Date.now(), runtimes };
      // A failed read is not kept.
      runtimes.catch(() => {
        if (this.#read?.runtimes === runtimes) this.#read = undefined;
      });
    }
    return checkRuntime(await this.#read.runtimes, this.#runtime, network);
  }
}

function checkRuntime(runtimes: Record<string, RuntimeInfo>, runtime: string, network: boolean): RuntimeInfo {
  const found = runtimes[runtime];
  if (!found) {
    throw new TackError(
      "sandbox.runtime_missing",
      `Docker runtime ${runtime} is not configured in the engine (it has ${Object.keys(runtimes).join(", ") || "none"}); ` +
        `declare it in /etc/docker/daemon.json and restart dockerd, or set TACK_SANDBOX_RUNTIME to one it has`,
    );
  }
  // gVisor declared with --network=none would start a danger-full-access sandbox silently offline.
  if (network && found.runtimeArgs?.includes("--network=none")) {
    throw new TackError(
      "sandbox.runtime_without_network",
      `Docker runtime ${runtime} is declared with --network=none, so mode danger-full-access would have no network; ` +
        `use runtime runc for it or remove --network=none from /etc/docker/daemon.json`,
    );
  }
  return found;
}
