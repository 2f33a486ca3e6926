import type Docker from "dockerode";
import type { ContainerInspectInfo } from "dockerode";
import { assertToken, TackError } from "@tack/bus";
import { dockerFailure, statusOf } from "./docker.js";
import type { CompiledOptions } from "./options.js";
import { containerOptions, LABELS, parseMode, resolveWorkspace, type SandboxMode } from "./spec.js";

/** What `ensure` asks for: the session's container with this workspace and mode. */
export interface EnsureInput {
  readonly sessionId: string;
  readonly tenant: string;
  readonly workspace: string;
  readonly mode: string;
}

/** The session's container after `ensure`. */
export interface EnsureResult {
  readonly containerId: string;
  /** True when this call created the container. */
  readonly created: boolean;
  readonly runtime: string;
}

/** A running container lent to one exec; `done` must be called when the exec is over. */
export interface Lease {
  readonly container: Docker.Container;
  done(): void;
}

interface Entry {
  readonly id: string;
  lastUsedAt: number;
  activeExecs: number;
}

/** Fails with a TackError when `value` cannot be a session or tenant id. */
export function assertId(kind: string, value: string): void {
  try {
    assertToken(kind, value);
  } catch (error) {
    throw new TackError("sandbox.bad_request", (error as Error).message);
  }
}

/** The error for a session that has no running sandbox. */
export function notFound(sessionId: string): TackError {
  return new TackError("sandbox.not_found", `session ${sessionId} has no running sandbox; call sandbox.ensure for it first`, {
    details: { session_id: sessionId },
  });
}

/**
 * The containers of one namespace, one per session. Ensure, release and reaping of a session
 * are serialised by a per-session lock, so concurrent ensures create one container; containers
 * are found by name, so a restarted service reuses what its predecessor created.
 */
export class Sandboxes {
  readonly #docker: Docker;
  readonly #options: CompiledOptions;
  readonly #entries = new Map<string, Entry>();
  readonly #locks = new Map<string, Promise<void>>();

  constructor(docker: Docker, options: CompiledOptions) {
    this.#docker = docker;
    this.#options = options;
  }

  /** Records the containers already in this namespace so that idle ones are reaped after a restart too. */
  async adopt(): Promise<void> {
    for (const info of await this.#list()) {
      const sessionId = info.Labels[LABELS.session];
      if (sessionId && !this.#entries.has(sessionId)) this.#entries.set(sessionId, { id: info.Id, lastUsedAt: Date.now(), activeExecs: 0 });
    }
  }

  /** Returns the session's running container, creating or starting it when needed. */
  async ensure(input: EnsureInput): Promise<EnsureResult> {
    assertId("session id", input.sessionId);
    assertId("tenant", input.tenant);
    const mode = parseMode(input.mode);
    const workspace = await resolveWorkspace(input.workspace, mode);
    return this.#withLock(input.sessionId, async () => {
      const existing = await this.#inspect(input.sessionId);
      if (existing) return this.#reuse(existing, input, mode, workspace.path);
      await this.#checkRuntime(mode);
      let container: Docker.Container;
      try {
        container = await this.#docker.createContainer(containerOptions({
          name: this.#name(input.sessionId),
          image: this.#options.image,
          runtime: this.#options.runtime,
          namespace: this.#options.namespace,
          sessionId: input.sessionId,
          tenant: input.tenant,
          mode,
          workspace,
        }));
      } catch (error) {
        // Another process (a second replica, or a predecessor still shutting down) created it first.
        const raced = statusOf(error) === 409 ? await this.#inspect(input.sessionId) : undefined;
        if (raced) return this.#reuse(raced, input, mode, workspace.path);
        if (statusOf(error) === 404) {
          throw new TackError("sandbox.image_missing", `sandbox image ${this.#options.image} is not in the local Docker engine; build it with \`make sandbox-image\``, { cause: error });
        }
        throw dockerFailure(error, `create the sandbox container of session ${input.sessionId}`);
      }
      try {
        await container.start();
      } catch (error) {
        await container.remove({ force: true }).catch(() => undefined);
        throw dockerFailure(error, `start the sandbox container of session ${input.sessionId} (runtime ${this.#options.runtime})`);
      }
      this.#entries.set(input.sessionId, { id: container.id, lastUsedAt: Date.now(), activeExecs: 0 });
      return { containerId: container.id, created: true, runtime: this.#options.runtime };
    });
  }

  /** Lends the session's running container to one exec, failing with `sandbox.not_found` when there is none. */
  async acquire(sessionId: string): Promise<Lease> {
    assertId("session id", sessionId);
    let entry = this.#entries.get(sessionId);
    if (!entry) {
      const info = await this.#inspect(sessionId);
      if (!info?.State.Running) throw notFound(sessionId);
      entry = { id: info.Id, lastUsedAt: Date.now(), activeExecs: 0 };
      this.#entries.set(sessionId, entry);
    }
    const lent = entry;
    lent.activeExecs += 1;
    lent.lastUsedAt = Date.now();
    return {
      container: this.#docker.getContainer(lent.id),
      done: () => {
        lent.activeExecs -= 1;
        lent.lastUsedAt = Date.now();
      },
    };
  }

  /** Drops what is known about a session whose container turned out to be gone. */
  forget(sessionId: string): void {
    this.#entries.delete(sessionId);
  }

  /** Removes the session's container (killing whatever runs in it); false when it had none. */
  async release(sessionId: string): Promise<boolean> {
    assertId("session id", sessionId);
    return this.#withLock(sessionId, async () => {
      this.#entries.delete(sessionId);
      return this.#remove(this.#name(sessionId));
    });
  }

  /** Removes every container of this namespace, known or not; returns how many were removed. */
  async removeAll(): Promise<number> {
    const containers = await this.#list();
    this.#entries.clear();
    const removed = await Promise.all(containers.map((info) => this.#remove(info.Id)));
    return removed.filter(Boolean).length;
  }

  /** Removes the containers that ran no command for the idle timeout. */
  async reapIdle(): Promise<void> {
    const idle = (entry: Entry) => entry.activeExecs === 0 && Date.now() - entry.lastUsedAt >= this.#options.idleTimeoutMs;
    for (const [sessionId, entry] of [...this.#entries]) {
      if (!idle(entry)) continue;
      await this.#withLock(sessionId, async () => {
        // Re-checked under the lock: an ensure or exec may have used it meanwhile.
        if (this.#entries.get(sessionId) !== entry || !idle(entry)) return;
        this.#entries.delete(sessionId);
        await this.#remove(entry.id);
      });
    }
  }

  #name(sessionId: string): string {
    return `tack-${this.#options.namespace}-${sessionId}`;
  }

  async #reuse(info: ContainerInspectInfo, input: EnsureInput, mode: SandboxMode, workspace: string): Promise<EnsureResult> {
    const labels = info.Config.Labels ?? {};
    if (labels[LABELS.tenant] !== input.tenant) {
      throw new TackError("sandbox.conflict", `session ${input.sessionId} already has a sandbox that belongs to another tenant; use a new session id`);
    }
    const runtime = info.HostConfig.Runtime ?? "runc";
    if (labels[LABELS.mode] !== mode || labels[LABELS.workspace] !== workspace || runtime !== this.#options.runtime) {
      throw new TackError(
        "sandbox.conflict",
        `session ${input.sessionId} already has a sandbox in mode ${labels[LABELS.mode]} on ${labels[LABELS.workspace]} under runtime ${runtime}; ` +
          `release it first to get mode ${mode} on ${workspace} under runtime ${this.#options.runtime}`,
      );
    }
    if (!info.State.Running) {
      try {
        await this.#docker.getContainer(info.Id).start();
      } catch (error) {
        // 304: started meanwhile by someone else, which is what we wanted.
        if (statusOf(error) !== 304) throw dockerFailure(error, `restart the stopped sandbox container of session ${input.sessionId}`);
      }
    }
    const entry = this.#entries.get(input.sessionId);
    if (entry?.id === info.Id) entry.lastUsedAt = Date.now();
    else this.#entries.set(input.sessionId, { id: info.Id, lastUsedAt: Date.now(), activeExecs: 0 });
    return { containerId: info.Id, created: false, runtime };
  }

  /** Refuses to create a container under a runtime the engine does not have; there is no fallback to another one. */
  async #checkRuntime(mode: SandboxMode): Promise<void> {
    let info: { Runtimes?: Record<string, { runtimeArgs?: string[] }> };
    try {
      info = await this.#docker.info();
    } catch (error) {
      throw dockerFailure(error, "read the engine's runtimes");
    }
    const runtimes = info.Runtimes ?? {};
    const runtime = runtimes[this.#options.runtime];
    if (!runtime) {
      throw new TackError(
        "sandbox.runtime_missing",
        `Docker runtime ${this.#options.runtime} is not configured in the engine (it has ${Object.keys(runtimes).join(", ") || "none"}); ` +
          `declare it in /etc/docker/daemon.json and restart dockerd, or set TACK_SANDBOX_RUNTIME to one it has`,
      );
    }
    // gVisor declared with --network=none would start a danger-full-access sandbox silently offline.
    if (mode === "danger-full-access" && runtime.runtimeArgs?.includes("--network=none")) {
      throw new TackError(
        "sandbox.runtime_without_network",
        `Docker runtime ${this.#options.runtime} is declared with --network=none, so mode danger-full-access would have no network; ` +
          `use runtime runc for it or remove --network=none from /etc/docker/daemon.json`,
      );
    }
  }

  async #inspect(sessionId: string): Promise<ContainerInspectInfo | undefined> {
    try {
      return await this.#docker.getContainer(this.#name(sessionId)).inspect();
    } catch (error) {
      if (statusOf(error) === 404) return undefined;
      throw dockerFailure(error, `inspect the sandbox container of session ${sessionId}`);
    }
  }

  async #list(): Promise<Docker.ContainerInfo[]> {
    try {
      return await this.#docker.listContainers({ all: true, filters: { label: [`${LABELS.namespace}=${this.#options.namespace}`] } });
    } catch (error) {
      throw dockerFailure(error, `list the sandbox containers of namespace ${this.#options.namespace}`);
    }
  }

  async #remove(idOrName: string): Promise<boolean> {
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

  async #withLock<T>(sessionId: string, fn: () => Promise<T>): Promise<T> {
    const previous = this.#locks.get(sessionId) ?? Promise.resolve();
    const run = previous.then(fn);
    const tail = run.then(
      () => undefined,
      () => undefined,
    );
    this.#locks.set(sessionId, tail);
    void tail.then(() => {
      if (this.#locks.get(sessionId) === tail) this.#locks.delete(sessionId);
    });
    return run;
  }
}
