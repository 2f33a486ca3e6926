// Shared setup of the sandbox tests: a real service on real NATS and Docker, one namespace per test file.
import { randomBytes } from "node:crypto";
import { chown, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Docker from "dockerode";
import { Kvm } from "@nats-io/kv";
import { assertToken, Bus, DEFAULT_SILENCE_MS, SandboxRpc } from "@tack/bus";
import { draft, ensureLogStream, FORMAT_VERSION, SessionLogWriter } from "@tack/log";
import { removeNamespace } from "@tack/testkit";
import { EnsureSandboxRequest, EnsureSandboxResponse, ExecRequest, ExecResponse, ListProcessesResponse, ReleaseSandboxResponse, SessionCreated } from "@tack/proto";
import { placementBucket, startSandboxService, type SandboxService, type SandboxServiceOptions } from "../src/index.js";

export const NATS_URL = "nats://127.0.0.1:4222";
export const docker = new Docker();

/** A namespace no other test run uses. */
export function uniqueNamespace(): string {
  return `t${randomBytes(5).toString("hex")}`;
}

/** A decoded exec result, stdout and stderr as text. */
export interface ExecResult extends Omit<ExecResponse, "stdout" | "stderr"> {
  stdout: string;
  stderr: string;
}

/** A running service plus a client bus in its namespace, and the temp workspaces to clean up. */
export class Harness {
  readonly namespace: string;
  service: SandboxService;
  readonly bus: Bus;
  readonly #workspaces: string[] = [];

  private constructor(namespace: string, service: SandboxService, bus: Bus) {
    this.namespace = namespace;
    this.service = service;
    this.bus = bus;
  }

  /** Starts a service in a fresh namespace (or `namespace`), without a warm pool unless asked, with a client connected to it. */
  static async start(options: Partial<SandboxServiceOptions> = {}): Promise<Harness> {
    const namespace = options.namespace ?? uniqueNamespace();
    const service = await startSandboxService({ natsUrl: NATS_URL, poolSize: 0, ...options, namespace });
    const bus = await Bus.connect({ url: NATS_URL, namespace, name: "sandbox-test" });
    return new Harness(namespace, service, bus);
  }

  /** A fresh host directory owned by `uid:gid` (tests run as root, sandboxes never do). */
  async workspace(uid = 1000, gid = 1000): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), "tack-sandbox-test-"));
    await chown(dir, uid, gid);
    this.#workspaces.push(dir);
    return dir;
  }

  /** The container name the service gives a session's sandbox of `mode`. */
  containerName(sessionId: string, mode = "workspace-write"): string {
    return `tack-${this.namespace}-${sessionId}.${mode}`;
  }

  /**
   * Asks for the session's sandbox. Like the loop, first logs the session's `session/created`
   * (tenant and workspace), which the service checks the request against; `log: false` sends
   * the request alone, as a forger would.
   */
  async ensure(request: Partial<EnsureSandboxRequest> & { sessionId: string; workspace: string }, options: { log?: boolean } = {}): Promise<EnsureSandboxResponse> {
    const full = { tenant: "acme", mode: "workspace-write", ...request };
    if (options.log !== false) await this.logSession(full.sessionId, full.tenant, full.workspace);
    // As long as the tools service waits (a cold start on a loaded host), while the service's heartbeats say it works on it.
    return this.bus.request(SandboxRpc.EnsureSandbox, full, { timeoutMs: 60_000, silenceMs: DEFAULT_SILENCE_MS });
  }

  readonly #logged = new Map<string, Promise<void>>();

  /** Writes a session's opening event as the loop would (once per session; ids that are not valid tokens are left to the service to refuse). */
  logSession(sessionId: string, tenant: string, workspace: string): Promise<void> {
    try {
      assertToken("session", sessionId);
      assertToken("tenant", tenant);
    } catch {
      return Promise.resolve();
    }
    let logged = this.#logged.get(sessionId);
    if (!logged) {
      logged = (async () => {
        await ensureLogStream(this.bus.nc, this.bus.names);
        const writer = await SessionLogWriter.open(this.bus.nc, this.bus.names, { tenant, sessionId });
        if (writer.lastSeq === 0) await writer.append(draft("sessionCreated", SessionCreated.fromPartial({ sessionId, tenant, workspace, formatVersion: FORMAT_VERSION, mode: "standard" }), "test"));
      })();
      this.#logged.set(sessionId, logged);
    }
    return logged;
  }

  async exec(sessionId: string, argv: string[], options: Partial<Omit<ExecRequest, "stdin">> & { stdin?: string } = {}): Promise<ExecResult> {
    const request: ExecRequest = {
      execKey: options.execKey ?? "",
      attempt: options.attempt ?? 0,
      firstAttemptAtMs: options.firstAttemptAtMs ?? 0,
      sessionId,
      argv,
      cwd: options.cwd ?? "",
      timeoutMs: options.timeoutMs ?? 0,
      maxOutputBytes: options.maxOutputBytes ?? 0,
      stdin: Buffer.from(options.stdin ?? ""),
      mode: options.mode ?? "",
    };
    const response = await this.bus.request(SandboxRpc.Exec, request, { timeoutMs: 120_000 });
    return { ...response, stdout: Buffer.from(response.stdout).toString(), stderr: Buffer.from(response.stderr).toString() };
  }

  /** The processes the sandbox service lists for the session's container of `mode` (its first one when empty). */
  processes(sessionId: string, mode = ""): Promise<ListProcessesResponse> {
    return this.bus.request(SandboxRpc.ListProcesses, { sessionId, mode }, { timeoutMs: 30_000 });
  }

  release(sessionId: string): Promise<ReleaseSandboxResponse> {
    return this.bus.request(SandboxRpc.ReleaseSandbox, { sessionId, mode: "" });
  }

  /** The ids of the namespace's containers (running or not), optionally of one session (found by name: pool containers carry no session label). */
  async containerIds(sessionId?: string): Promise<string[]> {
    const containers = await docker.listContainers({ all: true, filters: { label: [`tack.namespace=${this.namespace}`] } });
    const prefix = `/tack-${this.namespace}-${sessionId}.`;
    return containers.filter((container) => !sessionId || container.Names.some((name) => name.startsWith(prefix))).map((container) => container.Id);
  }

  /** Removes the containers, the placement bucket and the workspaces, and stops the service and client. */
  async cleanup(): Promise<void> {
    await this.service.stop({ removeContainers: true });
    await new Kvm(this.bus.nc).open(placementBucket(this.namespace)).then((kv) => kv.destroy()).catch(() => undefined);
    await removeNamespace(this.bus.nc, this.namespace);
    await this.bus.close();
    await Promise.all(this.#workspaces.map((dir) => rm(dir, { recursive: true, force: true })));
  }
}

/** Resolves with what `promise` rejected with, failing when it resolves. */
export async function rejection(promise: Promise<unknown>): Promise<{ code: string; message: string }> {
  try {
    await promise;
  } catch (error) {
    return error as { code: string; message: string };
  }
  throw new Error("expected the promise to reject");
}
