// Starts every Tack service as its own process or processes (plus a local nats-server when none is
// given), waits until each answers, and supervises them: a service that dies is started again.
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { hostname } from "node:os";
import { join, resolve } from "node:path";
import { assertToken, Bus, discoverMicro, retryDelay, retryPolicy, TackError, type BusAuth, type RetryPolicy } from "@tack/bus";
import type { BusUser } from "@tack/config";
import type { LocalBusCredentials } from "./bus-credentials.js";
import { describeExit, spawnChild, type Child, type ChildExit } from "./child.js";
import { serviceCommand } from "./entry.js";
import { freePort, startNatsServer, type LocalNats } from "./nats-server.js";
import { repoRoot } from "./paths.js";
import { serviceEnvironment } from "./service-env.js";
import { MAX_REPLICAS, SERVICES, type ServiceName } from "./services.js";

export { MAX_REPLICAS, SERVICES, type ServiceName };

/** How the supervisor waits before starting a crashed process again. */
export interface RestartOptions {
  /** Wait after the first crash, doubling (with jitter) after each further one (default 250 ms). */
  readonly initialDelayMs?: number;
  /** Longest wait (default 10 s). */
  readonly maxDelayMs?: number;
  /** A process that ran this long before it crashed restarts after `initialDelayMs` again (default 30 s). */
  readonly stableAfterMs?: number;
}

/** What to start and where; only `dataDir` is required. */
export interface LaunchOptions {
  /** Holds `logs/<service>.log`, the gateway database and, without `natsUrl`, the local NATS store (`nats/`) and its users (`bus/`). */
  dataDir: string;
  /**
   * NATS to use; when absent, `nats-server -js` from PATH is started on a free port and stopped
   * by `stop()`, admitting only the per-service users whose credentials are kept in `<dataDir>/bus/`.
   */
  natsUrl?: string;
  /** How the launcher itself authenticates to a given `natsUrl` (services read theirs from `env`); ignored without `natsUrl`. */
  natsAuth?: BusAuth;
  /** Subject namespace of this deployment (default `tack`); tests use a unique one. */
  namespace?: string;
  /** The gateway's API key (default: a random one, returned in the handle). */
  apiKey?: string;
  /** The gateway's port on 127.0.0.1 (default: a free port). */
  gatewayPort?: number;
  /** Which services to start (default all of `SERVICES`). */
  services?: readonly ServiceName[];
  /**
   * Processes per service (default 1 each, at most `MAX_REPLICAS`). Each replica is its own child
   * process with its own log (`logs/<service>.log` for the first, `logs/<service>-<n>.log` for
   * replica n > 1); sandbox replica n > 1 gets its own replica id (`TACK_SANDBOX_REPLICA`, the
   * first one's with `-<n>` appended). The gateway listens on one port, so it runs once.
   */
  replicas?: Partial<Record<ServiceName, number>>;
  /** Extra environment, applied last; each service still gets only the variables it uses (SERVICE_ENV in services.ts). */
  env?: Record<string, string>;
  /** How long each service may take to answer (default 60 s). */
  readyTimeoutMs?: number;
  /** Restart backoff of supervised processes (default 250 ms doubling to 10 s, reset after 30 s of stable running). */
  restart?: RestartOptions;
  /** Called with a short line whenever start-up makes progress, e.g. for a spinner. */
  onProgress?: (message: string) => void;
  /**
   * Called when a replica that had answered ends on its own (not through `stop` or `kill`), or a
   * restarted one fails to come up; the supervisor starts it again after a backoff.
   */
  onServiceExit?: (service: ServiceName, description: string, logFile: string, replica: number) => void;
  /** Called when the supervisor restarted a replica and the new process answers. */
  onRestart?: (event: RestartEvent) => void;
}

/** One restart done by the supervisor. */
export interface RestartEvent {
  readonly service: ServiceName;
  /** 1-based replica number. */
  readonly replica: number;
  /** The new process. */
  readonly pid: number;
  /** The process that ended. */
  readonly previousPid: number | undefined;
  /** How it ended, e.g. `was killed by SIGKILL`. */
  readonly reason: string;
  /** Restarts of this replica so far, this one included. */
  readonly restarts: number;
  /** How long the supervisor waited before starting it. */
  readonly delayMs: number;
  readonly logFile: string;
}

/** Where one replica stands: `running` (answered), `starting`, `restarting` (waiting out its backoff) or `stopped`. */
export type ReplicaState = "running" | "starting" | "restarting" | "stopped";

/** One replica of a service as the supervisor sees it. */
export interface ReplicaStatus {
  readonly service: ServiceName;
  /** 1-based replica number. */
  readonly replica: number;
  readonly state: ReplicaState;
  /** The current process, if any. */
  readonly pid: number | undefined;
  /** When the current process was started (ISO 8601). */
  readonly startedAt: string | undefined;
  /** How often the supervisor has started this replica again. */
  readonly restarts: number;
  /** How its last process ended, if one did on its own. */
  readonly lastExit: string | undefined;
  readonly logFile: string;
}

/** A running Tack started by `launch`. */
export interface Launched {
  readonly gatewayUrl: string;
  readonly apiKey: string;
  readonly namespace: string;
  readonly natsUrl: string;
  /** How the launcher reaches NATS: `admin`'s credentials for a nats-server it started, else `options.natsAuth`. */
  readonly natsAuth: BusAuth;
  /** Each bus user's credentials file when the launcher started nats-server (each service gets only its own); else undefined. */
  readonly busCredentials: Readonly<Record<BusUser, string>> | undefined;
  readonly dataDir: string;
  /** The services started, in start order. */
  readonly services: readonly ServiceName[];
  /** Stops every service (SIGTERM, SIGKILL after 5 s; a sandbox replica, which removes its containers, after 60 s), then the local nats-server if one was started. Idempotent. */
  stop(): Promise<void>;
  /**
   * Sends `signal` (default SIGKILL) to every replica of a service and resolves when they have
   * exited. They stay stopped (no restart) until `start`.
   */
  kill(service: ServiceName, signal?: NodeJS.Signals): Promise<void>;
  /** Starts the replicas of a service that are not running (e.g. after `kill`) and resolves once they answer. */
  start(service: ServiceName): Promise<void>;
  /**
   * SIGKILLs one replica (default the first) as a crash would, leaving it to the supervisor to
   * restart; resolves with the killed pid once that process has exited.
   */
  crash(service: ServiceName, replica?: number): Promise<number>;
  /** Resolves once every replica of the service runs and answers (after a restart, say); fails after `timeoutMs` (default: the ready timeout plus the longest backoff). */
  whenRunning(service: ServiceName, timeoutMs?: number): Promise<void>;
  /** The pid of a running service (its first running replica), undefined when none runs. */
  pid(service: ServiceName): number | undefined;
  /** The pids of a service's running replicas, in replica order. */
  pids(service: ServiceName): number[];
  /** Every replica of one service, or of all started services. */
  replicas(service?: ServiceName): ReplicaStatus[];
  /** The log file of a service's replica (default the first; all its runs, appended). */
  logFile(service: ServiceName, replica?: number): string;
}

const STOP_GRACE_MS = 5_000;
/** A sandbox replica removes its containers as it stops (TACK_SANDBOX_REMOVE_ON_STOP); a few hundred take longer than 5 s. */
const SANDBOX_STOP_GRACE_MS = 60_000;
const PROBE_TIMEOUT_MS = 2_000;
const POLL_MS = 100;

/** One replica: its current process and its supervision. */
interface Replica {
  readonly service: ServiceName;
  readonly index: number;
  readonly logFile: string;
  child: Child | undefined;
  startedAt: number | undefined;
  readyAt: number | undefined;
  restarts: number;
  /** Crashes since it last ran stably, for the backoff. */
  failures: number;
  /** Restarted when it dies: from its first answer until `kill` or `stop`. */
  supervised: boolean;
  timer: NodeJS.Timeout | undefined;
  lastExit: string | undefined;
}

/**
 * Starts the services as child processes (`serviceCommand`: the compiled bundle when fresh, else
 * `node --import tsx services/<name>/src/main.ts`; cwd the repository root), `replicas` of each,
 * and resolves once the gateway answers `/healthz` and every replica of the other services answers
 * micro-service discovery (`$SRV.PING.tack-<service>`, found by its pid). A service that exits
 * during start-up fails the launch with its last output lines, after everything started so far is
 * stopped again. From its first answer on, a replica that ends on its own is restarted with
 * exponential backoff (`restart`), reported through `onServiceExit` and `onRestart`. Each process
 * gets only the variables its service uses (`serviceEnvironment`), not the launcher's environment.
 */
export async function launch(options: LaunchOptions): Promise<Launched> {
  const compiled = compile(options);
  const { dataDir, namespace, apiKey, services, progress, backoff } = compiled;
  const logDir = join(dataDir, "logs");
  await mkdir(logDir, { recursive: true, mode: 0o700 });

  const gatewayPort = compiled.gatewayPort ?? (await freePort());
  const gatewayUrl = `http://127.0.0.1:${gatewayPort}`;
  let nats: LocalNats | undefined;
  let natsUrl = options.natsUrl;
  let natsAuth: BusAuth = options.natsAuth ?? {};
  // Only for a nats-server started here: one user per service, so each child gets its own credentials.
  let local: LocalBusCredentials | undefined;
  if (!natsUrl) {
    progress("starting nats-server");
    // Loaded only here: `tack run` and `tack events` start faster without the configuration package.
    const { ensureBusCredentials, writeNatsServerConfig } = await import("./bus-credentials.js");
    const busDir = join(dataDir, "bus");
    local = await ensureBusCredentials(busDir);
    const configFile = await writeNatsServerConfig(busDir, join(dataDir, "nats"), namespace, local);
    nats = await startNatsServer({ dataDir, logDir, timeoutMs: compiled.readyTimeoutMs, configFile });
    natsUrl = nats.url;
    natsAuth = { credentials: local.credentials.admin };
  }
  let bus: Bus;
  try {
    bus = await Bus.connect({ url: natsUrl, namespace, name: "tack-launcher", ...natsAuth });
  } catch (error) {
    await nats?.child.stop(STOP_GRACE_MS);
    throw error;
  }
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    NATS_URL: natsUrl,
    TACK_NAMESPACE: namespace,
    TACK_API_KEY: apiKey,
    TACK_GATEWAY_HOST: "127.0.0.1",
    TACK_GATEWAY_PORT: String(gatewayPort),
    TACK_DB: join(dataDir, "tack.db"),
    // The services run from the checkout; their state (operator configuration, scripts, managed workspaces) is the launcher's.
    TACK_STATE_DIR: dataDir,
    // A local run removes its sandbox containers when it stops.
    TACK_SANDBOX_REMOVE_ON_STOP: "1",
    ...options.env,
  };
  // The gateway's API keys may come from variables the operator configuration names; they reach the gateway only.
  const operatorKeyVariables = services.includes("gateway") ? await operatorKeyVariablesOf(env) : [];
  // Each child gets only the variables it uses (SERVICE_ENV), with its own bus credentials file for a local
  // nats-server; sandbox replicas on one host need distinct replica ids (each owns its containers and placements).
  const serviceEnv = (service: ServiceName, replica: number): NodeJS.ProcessEnv => {
    const own = serviceEnvironment(service, env, { operatorKeyVariables, busCredentialsFile: local?.files[service] });
    if (service === "sandbox" && replica > 1) own.TACK_SANDBOX_REPLICA = sandboxReplicaId(env.TACK_SANDBOX_REPLICA, replica);
    return own;
  };

  const table = new Map<ServiceName, Replica[]>(services.map((service) => [service, Array.from({ length: compiled.replicas[service] }, (_, i): Replica => ({
    service, index: i + 1, logFile: join(logDir, i === 0 ? `${service}.log` : `${service}-${i + 1}.log`),
    child: undefined, startedAt: undefined, readyAt: undefined, restarts: 0, failures: 0, supervised: false, timer: undefined, lastExit: undefined,
  }))]));
  const replicasOf = (service: ServiceName): Replica[] => {
    const found = table.get(service);
    if (!found) throw new TackError("launch.not_started", `${service} is not part of this launch (it started ${services.join(", ") || "no service"}); add it to services`, { details: { service } });
    return found;
  };
  const allReplicas = () => [...table.values()].flat();
  // Children we are ending on purpose, so their exit is not reported as a crash.
  const stopping = new WeakSet<Child>();
  // Children that answered once; only their later exits are crashes.
  const ready = new WeakSet<Child>();
  let stopped: Promise<void> | undefined;

  const probe = async (replica: Replica, child: Child): Promise<boolean> => {
    if (replica.service === "gateway") {
      try {
        const response = await fetch(`${gatewayUrl}/healthz`, { signal: AbortSignal.timeout(PROBE_TIMEOUT_MS) });
        await response.body?.cancel();
        return response.ok;
      } catch {
        return false;
      }
    }
    // Each process registers as micro-service tack-<service> once it serves; its pid tells the replicas apart.
    try {
      const found = await discoverMicro(bus, { service: replica.service, waitMs: PROBE_TIMEOUT_MS, stallMs: 100 });
      return found.some(({ instance }) => instance.pid === child.process.pid);
    } catch {
      return false;
    }
  };

  const spawnReplica = (replica: Replica): Child => {
    const { command, args, env: commandEnv } = serviceCommand(replica.service, { env });
    const name = replica.index === 1 ? replica.service : `${replica.service}-${replica.index}`;
    const child = spawnChild(name, command, [...args], { cwd: repoRoot, env: { ...serviceEnv(replica.service, replica.index), ...commandEnv }, logFile: replica.logFile });
    Object.assign(replica, { child, startedAt: Date.now(), readyAt: undefined });
    void child.exited.then((exit) => onExit(replica, child, exit));
    return child;
  };

  const onExit = (replica: Replica, child: Child, exit: ChildExit) => {
    const readyAt = replica.child === child ? replica.readyAt : undefined;
    if (replica.child === child) Object.assign(replica, { child: undefined, readyAt: undefined });
    // One that never answered is handled where it was waited for (start-up fails, or a restart is retried).
    if (stopping.has(child) || stopped || !ready.has(child)) return;
    replica.lastExit = describeExit(exit);
    options.onServiceExit?.(replica.service, replica.lastExit, replica.logFile, replica.index);
    if (replica.supervised) scheduleRestart(replica, replica.lastExit, child.process.pid, readyAt === undefined ? 0 : Date.now() - readyAt);
  };

  const scheduleRestart = (replica: Replica, reason: string, previousPid: number | undefined, ranMs: number) => {
    if (ranMs >= backoff.stableAfterMs) replica.failures = 0;
    replica.failures += 1;
    const delayMs = retryDelay(backoff.policy, replica.failures);
    clearTimeout(replica.timer);
    replica.timer = setTimeout(() => void restart(replica, reason, previousPid, delayMs), delayMs);
  };

  const restart = async (replica: Replica, reason: string, previousPid: number | undefined, delayMs: number) => {
    replica.timer = undefined;
    if (stopped || !replica.supervised) return;
    replica.restarts += 1;
    const child = spawnReplica(replica);
    try {
      await waitReady(replica, child);
    } catch (error) {
      if (stopped || !replica.supervised) return;
      const exit = child.exit();
      await stopChild(child);
      const why = exit ? `${describeExit(exit)} during start-up` : (error as Error).message.split("\n")[0]!;
      replica.lastExit = why;
      options.onServiceExit?.(replica.service, why, replica.logFile, replica.index);
      scheduleRestart(replica, why, child.process.pid, 0);
      return;
    }
    options.onRestart?.({
      service: replica.service, replica: replica.index, pid: child.process.pid!, previousPid, reason,
      restarts: replica.restarts, delayMs, logFile: replica.logFile,
    });
  };

  const waitReady = async (replica: Replica, child: Child): Promise<void> => {
    const deadline = Date.now() + compiled.readyTimeoutMs;
    for (;;) {
      const exit = child.exit();
      if (exit) throw await exitedDuringStart(replica, child, exit);
      if (await probe(replica, child)) {
        if (child.exit()) continue;
        ready.add(child);
        if (replica.child === child) replica.readyAt = Date.now();
        // Supervised from its first answer on, unless it is being stopped (`kill`, `stop`) meanwhile.
        if (!stopping.has(child) && !stopped) replica.supervised = true;
        return;
      }
      if (Date.now() > deadline) {
        throw new TackError("launch.timeout", `${label(replica)} did not answer within ${compiled.readyTimeoutMs} ms; see ${child.logFile}`, { details: { service: replica.service } });
      }
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
  };

  const stopChild = async (child: Child, graceMs = STOP_GRACE_MS) => {
    stopping.add(child);
    await child.stop(graceMs);
  };
  // If the launcher's process ends without stop(), do not leave services behind.
  const onProcessExit = () => {
    for (const replica of allReplicas()) replica.child?.process.kill("SIGTERM");
    nats?.child.process.kill("SIGTERM");
  };
  process.on("exit", onProcessExit);

  const stop = () => (stopped ??= (async () => {
    for (const replica of allReplicas()) {
      clearTimeout(replica.timer);
      replica.timer = undefined;
      replica.supervised = false;
    }
    await Promise.all(allReplicas().map((replica) => replica.child && stopChild(replica.child, replica.service === "sandbox" ? SANDBOX_STOP_GRACE_MS : STOP_GRACE_MS)));
    await bus.close().catch(() => undefined);
    if (nats) await stopChild(nats.child);
    process.off("exit", onProcessExit);
  })());

  if (services.length > 0) progress(`starting ${services.map((s) => (compiled.replicas[s] > 1 ? `${s}×${compiled.replicas[s]}` : s)).join(", ")}`);
  const waiting = new Set(services);
  try {
    for (const service of services) assertEntryExists(service, env);
    await Promise.all(services.map(async (service) => {
      await Promise.all(replicasOf(service).map((replica) => waitReady(replica, spawnReplica(replica))));
      waiting.delete(service);
      if (waiting.size > 0) progress(`${service} is up; waiting for ${[...waiting].join(", ")}`);
    }));
  } catch (error) {
    await stop();
    throw error;
  }

  const status = (replica: Replica): ReplicaStatus => ({
    service: replica.service,
    replica: replica.index,
    state: replica.child ? (replica.readyAt !== undefined ? "running" : "starting") : replica.timer ? "restarting" : "stopped",
    pid: replica.child?.process.pid,
    startedAt: replica.child && replica.startedAt !== undefined ? new Date(replica.startedAt).toISOString() : undefined,
    restarts: replica.restarts,
    lastExit: replica.lastExit,
    logFile: replica.logFile,
  });
  const replicaOf = (service: ServiceName, index: number): Replica => {
    const all = replicasOf(service);
    const found = all[index - 1];
    if (!Number.isInteger(index) || !found) throw new TackError("launch.no_such_replica", `${service} has no replica ${index}; it runs ${all.length} (1-${all.length})`, { details: { service } });
    return found;
  };

  return {
    gatewayUrl, apiKey, namespace, natsUrl, natsAuth, busCredentials: local?.files, dataDir, services, stop,
    kill: async (service, signal = "SIGKILL") => {
      await Promise.all(replicasOf(service).map(async (replica) => {
        replica.supervised = false;
        clearTimeout(replica.timer);
        replica.timer = undefined;
        const child = replica.child;
        if (!child) return;
        stopping.add(child);
        child.process.kill(signal);
        await child.exited;
      }));
    },
    start: async (service) => {
      if (stopped) throw new TackError("launch.stopped", `cannot start ${service}: this Tack was stopped; call launch() again`);
      const all = replicasOf(service);
      const idle = all.filter((replica) => !replica.child && !replica.timer);
      if (idle.length === 0) {
        throw new TackError("launch.already_running", `${service} is already running (pid ${all.map((r) => r.child?.process.pid ?? "restarting").join(", ")}); kill it first`);
      }
      await Promise.all(idle.map(async (replica) => {
        const child = spawnReplica(replica);
        replica.failures = 0;
        try {
          await waitReady(replica, child);
        } catch (error) {
          await stopChild(child);
          throw error;
        }
      }));
    },
    crash: async (service, index = 1) => {
      const replica = replicaOf(service, index);
      const child = replica.child;
      if (!child) throw new TackError("launch.not_running", `${label(replica)} is not running (${status(replica).state}); wait for it with whenRunning("${service}") or start it`, { details: { service } });
      const pid = child.process.pid!;
      child.process.kill("SIGKILL");
      await child.exited;
      return pid;
    },
    whenRunning: async (service, timeoutMs = compiled.readyTimeoutMs + backoff.policy.maxDelayMs) => {
      const all = replicasOf(service);
      const deadline = Date.now() + timeoutMs;
      while (!all.every((replica) => status(replica).state === "running")) {
        if (stopped) throw new TackError("launch.stopped", `${service} will not run again: this Tack was stopped`);
        if (Date.now() > deadline) {
          throw new TackError("launch.timeout", `${service} did not run again within ${timeoutMs} ms: ${all.map((r) => `${label(r)} ${status(r).state}${r.lastExit ? ` (last ${r.lastExit})` : ""}`).join(", ")}; see ${all.map((r) => r.logFile).join(", ")}`, { details: { service } });
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    },
    pid: (service) => table.get(service)?.find((replica) => replica.child)?.child?.process.pid,
    pids: (service) => (table.get(service) ?? []).flatMap((replica) => (replica.child?.process.pid === undefined ? [] : [replica.child.process.pid])),
    replicas: (service) => (service === undefined ? allReplicas() : replicasOf(service)).map(status),
    logFile: (service, index = 1) => table.get(service)?.[index - 1]?.logFile ?? join(logDir, index === 1 ? `${service}.log` : `${service}-${index}.log`),
  };
}

interface Compiled {
  readonly dataDir: string;
  readonly namespace: string;
  readonly apiKey: string;
  readonly gatewayPort: number | undefined;
  readonly services: readonly ServiceName[];
  readonly replicas: Readonly<Record<ServiceName, number>>;
  readonly readyTimeoutMs: number;
  readonly backoff: { readonly policy: RetryPolicy; readonly stableAfterMs: number };
  readonly progress: (message: string) => void;
}

function compile(options: LaunchOptions): Compiled {
  const invalid = (message: string) => new TackError("launch.invalid_options", message);
  const namespace = options.namespace ?? "tack";
  try {
    assertToken("namespace", namespace);
  } catch (error) {
    throw invalid((error as Error).message);
  }
  const services = options.services ?? SERVICES;
  for (const service of services) {
    if (!isServiceName(service)) throw invalid(`unknown service ${JSON.stringify(service)}; known services: ${SERVICES.join(", ")}`);
  }
  if (new Set(services).size !== services.length) throw invalid(`services lists a service twice: ${services.join(", ")}`);
  const replicas = Object.fromEntries(SERVICES.map((service) => [service, 1])) as Record<ServiceName, number>;
  for (const [service, count] of Object.entries(options.replicas ?? {})) {
    if (!isServiceName(service)) throw invalid(`replicas names unknown service ${JSON.stringify(service)}; known services: ${SERVICES.join(", ")}`);
    if (count === undefined) continue;
    if (!Number.isInteger(count) || count < 1 || count > MAX_REPLICAS) throw invalid(`replicas of ${service} is ${count}; it must be a whole number from 1 to ${MAX_REPLICAS}`);
    if (service === "gateway" && count > 1) throw invalid(`the gateway runs once per launch (it listens on one port, ${options.gatewayPort ?? "chosen at start"}); got ${count}: run more Tacks behind a load balancer instead`);
    replicas[service] = count;
  }
  const port = options.gatewayPort;
  if (port !== undefined && !(Number.isInteger(port) && port > 0 && port < 65536)) throw invalid(`gateway port ${port} is not a port number (1-65535)`);
  if (options.apiKey !== undefined && options.apiKey.trim() === "") throw invalid("the API key is empty; pass a non-empty key or none for a random one");
  const restart = options.restart ?? {};
  const stableAfterMs = restart.stableAfterMs ?? 30_000;
  if (!Number.isInteger(stableAfterMs) || stableAfterMs < 0) throw invalid(`restart.stableAfterMs is ${stableAfterMs}; it must be a whole number of milliseconds (0 or more)`);
  const policy = retryPolicy({ baseDelayMs: restart.initialDelayMs ?? 250, maxDelayMs: restart.maxDelayMs ?? 10_000, maxAttempts: Number.MAX_SAFE_INTEGER }, "launch.invalid_options");
  return {
    dataDir: resolve(options.dataDir),
    namespace,
    apiKey: options.apiKey ?? `tack_${randomBytes(24).toString("base64url")}`,
    gatewayPort: port,
    services,
    replicas,
    readyTimeoutMs: options.readyTimeoutMs ?? 60_000,
    backoff: { policy, stableAfterMs },
    progress: options.onProgress ?? (() => undefined),
  };
}

function isServiceName(name: string): name is ServiceName {
  return (SERVICES as readonly string[]).includes(name);
}

/** `tools` for the first replica, `tools#2` for the others, in messages. */
function label(replica: Replica): string {
  return replica.index === 1 ? replica.service : `${replica.service}#${replica.index}`;
}

/**
 * The sandbox replica id of replica `replica` > 1: the first one's (TACK_SANDBOX_REPLICA, else the
 * host name as the sandbox service derives it) with `-<replica>` appended, so that each owns its
 * containers and a restarted process takes its own back.
 */
export function sandboxReplicaId(base: string | undefined, replica: number): string {
  const first = base?.trim() || hostname().toLowerCase().replace(/[^a-z0-9_-]+/g, "-").replace(/^[-_]+/, "").slice(0, 64) || "sandbox";
  const suffix = `-${replica}`;
  return `${first.slice(0, 64 - suffix.length)}${suffix}`;
}

/**
 * The variables the operator configuration's `keys[].env` name, read as the gateway will read it.
 * None when it cannot be read: the gateway then fails at start naming the problem itself.
 */
async function operatorKeyVariablesOf(env: NodeJS.ProcessEnv): Promise<string[]> {
  // Loaded only here: `tack run` and `tack events` start faster without the configuration package.
  const { loadOperatorConfig } = await import("@tack/config");
  try {
    return loadOperatorConfig(env).keys.flatMap((key) => (key.env === undefined ? [] : [key.env]));
  } catch {
    return [];
  }
}

function assertEntryExists(service: ServiceName, env: NodeJS.ProcessEnv): void {
  const { entry } = serviceCommand(service, { env });
  if (!existsSync(entry)) throw new TackError("launch.missing_service", `${entry} does not exist; is this a complete Tack checkout?`, { details: { service } });
}

async function exitedDuringStart(replica: Replica, child: Child, exit: ChildExit): Promise<TackError> {
  const tail = await child.tail(10);
  return new TackError(
    "launch.service_exited",
    `${label(replica)} ${describeExit(exit)} during start-up${tail ? `:\n${tail}\n` : " without output; "}(full log: ${child.logFile})`,
    { details: { service: replica.service } },
  );
}
