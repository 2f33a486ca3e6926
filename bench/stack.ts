// A Tack deployment for the bench: every service (or the ones named) as its own process through
// the launcher `tack up` uses (packages/cli launch()), on NATS_URL under a fresh namespace, with
// the bench's operator configuration, plus what the bench needs to drive it: workspaces, scripts,
// the gateway's HTTP API, and the log watch and bus tap (bench/lib.ts).
import { randomBytes } from "node:crypto";
import { chownSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { Bus } from "@tack/bus";
import { launch, SERVICES, type Launched, type LaunchOptions, type ServiceName } from "@tack/cli";
import { removeNamespace } from "@tack/testkit";
import { BusTap, LogWatch, nowMs } from "./lib.js";

export const BENCH_DIR = import.meta.dirname;
export const ROOT = resolve(BENCH_DIR, "..");
/** The operator configuration every bench service runs under (workspaces under /tmp, limits for 100 sessions at once). */
export const OPERATOR_CONFIG = join(BENCH_DIR, "operator.yaml");

export interface StackOptions {
  natsUrl: string;
  /** Which services run as processes (default all). */
  services?: readonly ServiceName[];
  /** Extra environment for every service. */
  env?: Record<string, string>;
  /** Processes per service, for a launcher that runs replicas (`LaunchOptions.replicas`); ignored by one that does not. */
  replicas?: Partial<Record<ServiceName, number>>;
  /** Short label for the namespace and scratch directory. */
  label: string;
}

export class Stack {
  readonly watch: LogWatch;
  readonly tap: BusTap;
  #workspaces = 0;

  private constructor(readonly tack: Launched, readonly bus: Bus, readonly work: string, readonly launchMs: number) {
    this.watch = new LogWatch(bus.nc, bus.names);
    this.tap = new BusTap(bus.nc, bus.names);
  }

  /** Starts the services and resolves once each answers (launch() waits for that). */
  static async launch(options: StackOptions): Promise<Stack> {
    const namespace = `bench${options.label}${randomBytes(3).toString("hex")}`;
    const work = mkdtempSync(join(tmpdir(), `tack-bench-${options.label}-`));
    // The services' state directory: the gateway database, logs/, and scripts/ (one of the llm service's script directories).
    const dataDir = join(work, "data");
    mkdirSync(join(dataDir, "scripts"), { recursive: true });
    const started = performance.now();
    const launchOptions: LaunchOptions = {
      dataDir, natsUrl: options.natsUrl, namespace, services: options.services,
      env: { TACK_CONFIG: OPERATOR_CONFIG, TACK_STATE_DIR: dataDir, ...options.env },
      readyTimeoutMs: 120_000,
    };
    // Passed untyped, so the bench works with a launcher with or without replicas.
    if (options.replicas) Object.assign(launchOptions, { replicas: options.replicas });
    const tack = await launch(launchOptions);
    const launchMs = performance.now() - started;
    try {
      const bus = await Bus.connect({ url: options.natsUrl, namespace, name: `bench-${options.label}` });
      // Subscriptions of the watch and tap must be known to the server before anything is driven.
      const stack = new Stack(tack, bus, work, launchMs);
      await bus.nc.flush();
      return stack;
    } catch (error) {
      await tack.stop();
      throw error;
    }
  }

  get namespace(): string {
    return this.tack.namespace;
  }

  /** How each running service process was started: `compiled` (dist/ from `make build`) or `tsx` (the TypeScript sources). */
  runners(): Record<string, string> {
    const runners: Record<string, string> = {};
    for (const service of SERVICES) {
      const pid = this.tack.pid(service);
      if (pid === undefined) continue;
      try {
        const argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
        runners[service] = argv.some((arg) => arg.endsWith(".js") && arg.includes("/dist/")) ? "compiled" : argv.includes("tsx") ? "tsx" : argv.slice(1).join(" ");
      } catch {
        // Gone meanwhile.
      }
    }
    return runners;
  }

  /** A new workspace directory under /tmp owned by the sandbox user (so a warm-pool container can serve it), with `files`. */
  workspace(files: Record<string, string> = {}): string {
    const dir = join(this.work, "ws", `w${++this.#workspaces}`);
    mkdirSync(dir, { recursive: true });
    for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
    if (process.getuid?.() === 0) {
      chownSync(dir, 1000, 1000);
      for (const name of Object.keys(files)) chownSync(join(dir, name), 1000, 1000);
    }
    return dir;
  }

  /** Writes a scripted model's replies into the llm service's script directory; returns the `scripted:` model reference. */
  script(name: string, replies: unknown[]): string {
    const file = join(this.tack.dataDir, "scripts", `${name}.json`);
    writeFileSync(file, JSON.stringify({ replies }));
    return `scripted:${file}`;
  }

  /** One gateway API call; fails on a status other than `expect`. */
  async api<T = Record<string, unknown>>(method: string, path: string, body?: unknown, expect = 200): Promise<T> {
    const response = await fetch(`${this.tack.gatewayUrl}${path}`, {
      method,
      headers: { authorization: `Bearer ${this.tack.apiKey}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    if (response.status !== expect) throw new Error(`${method} ${path}: ${response.status} ${text.slice(0, 500)}`);
    return (text ? JSON.parse(text) : {}) as T;
  }

  /** `POST /v1/sessions`; resolves with the session id. */
  async createSession(model: string, workspace: string): Promise<string> {
    return (await this.api<{ id: string }>("POST", "/v1/sessions", { workspace, model }, 201)).id;
  }

  /** `POST /v1/sessions/:id/messages`; resolves with the wall-clock time just before the request was sent, and the turn. */
  async submit(session: string, text: string): Promise<{ sentAt: number; turn: number }> {
    const sentAt = nowMs();
    const { turn } = await this.api<{ turn: number }>("POST", `/v1/sessions/${session}/messages`, { text }, 202);
    return { sentAt, turn };
  }

  /** Stops the services, removes the namespace (log, buckets, containers) and the scratch directory. */
  async close(): Promise<void> {
    this.watch.close();
    this.tap.close();
    await this.tack.stop().catch(() => undefined);
    await removeNamespace(this.bus.nc, this.namespace).catch(() => undefined);
    await this.bus.close().catch(() => undefined);
    rmSync(this.work, { recursive: true, force: true });
  }
}
