// Starts every Tack service as its own process (plus a local nats-server when none is given) and waits until each answers.
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { join, resolve } from "node:path";
import { assertToken, Bus, TackError, type BusAuth } from "@tack/bus";
import type { BusUser } from "@tack/config";
import {
  CompleteRequest, CompleteStreamMessage, ListToolsRequest, ListToolsResponse, ReleaseSandboxRequest, ReleaseSandboxResponse,
  SubmitMessageRequest, SubmitMessageResponse,
} from "@tack/proto";
import type { LocalBusCredentials } from "./bus-credentials.js";
import { describeExit, spawnChild, type Child, type ChildExit } from "./child.js";
import { freePort, startNatsServer, type LocalNats } from "./nats-server.js";
import { repoRoot } from "./paths.js";

/** Every service `launch` knows, in start order. */
export const SERVICES = ["llm", "tools", "sandbox", "loop", "gateway"] as const;

/** The name of one service: its code lives in `services/<name>/src/main.ts`. */
export type ServiceName = (typeof SERVICES)[number];

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
  /** Extra environment for every service, applied last. */
  env?: Record<string, string>;
  /** How long each service may take to answer (default 60 s). */
  readyTimeoutMs?: number;
  /** Called with a short line whenever start-up makes progress, e.g. for a spinner. */
  onProgress?: (message: string) => void;
  /** Called when a service ends on its own after start-up (not through `stop` or `kill`). */
  onServiceExit?: (service: ServiceName, description: string, logFile: string) => void;
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
  /** Stops every service (SIGTERM, SIGKILL after 5 s), then the local nats-server if one was started. Idempotent. */
  stop(): Promise<void>;
  /** Sends `signal` (default SIGKILL) to one service and resolves when it has exited. */
  kill(service: ServiceName, signal?: NodeJS.Signals): Promise<void>;
  /** Starts a service that is not running (e.g. after `kill`) and resolves once it answers. */
  start(service: ServiceName): Promise<void>;
  /** The pid of a running service, undefined when it is not running. */
  pid(service: ServiceName): number | undefined;
  /** The log file of a service (all its runs, appended). */
  logFile(service: ServiceName): string;
}

const STOP_GRACE_MS = 5_000;
const PROBE_TIMEOUT_MS = 2_000;
// Any reply, even an error, proves that the service subscribed, and so does a timeout (NATS answers
// "no responders" at once when nobody has); these codes mean it has not subscribed yet.
const NOT_LISTENING = new Set(["bus.no_responders", "bus.request_failed", "bus.unreachable"]);

/**
 * Starts the services as child processes (`node --import tsx services/<name>/src/main.ts`, cwd
 * the repository root) and resolves once the gateway answers `/healthz` and every other
 * service answers on the bus. A service that exits during start-up fails the launch with
 * its last output lines, after everything started so far is stopped again.
 */
export async function launch(options: LaunchOptions): Promise<Launched> {
  const compiled = compile(options);
  const { dataDir, namespace, apiKey, services, progress } = compiled;
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
  // A child of a local nats-server gets its own credentials file and nothing inherited that could override it.
  const serviceEnv = (service: ServiceName): NodeJS.ProcessEnv => {
    if (!local) return env;
    const own: NodeJS.ProcessEnv = { ...env, TACK_NATS_CREDENTIALS: local.files[service] };
    for (const variable of ["TACK_NATS_USER", "TACK_NATS_PASSWORD", "TACK_NATS_TLS_CA", "TACK_NATS_TLS_CERT", "TACK_NATS_TLS_KEY"]) delete own[variable];
    return own;
  };

  const running = new Map<ServiceName, Child>();
  // Children we are ending on purpose, so their exit is not reported as a crash.
  const stopping = new Set<Child>();
  // Children that answered once; only their later exits are crashes worth reporting.
  const ready = new WeakSet<Child>();
  const logFile = (service: ServiceName) => join(logDir, `${service}.log`);

  const probe = async (service: ServiceName): Promise<boolean> => {
    if (service === "gateway") {
      try {
        const response = await fetch(`${gatewayUrl}/healthz`, { signal: AbortSignal.timeout(PROBE_TIMEOUT_MS) });
        await response.body?.cancel();
        return response.ok;
      } catch {
        return false;
      }
    }
    try {
      await busProbe(bus, service);
      return true;
    } catch (error) {
      return !(error instanceof TackError && NOT_LISTENING.has(error.code));
    }
  };

  const spawnService = (service: ServiceName): Child => {
    const child = spawnChild(service, process.execPath, ["--import", "tsx", join("services", service, "src", "main.ts")], {
      cwd: repoRoot, env: serviceEnv(service), logFile: logFile(service),
    });
    running.set(service, child);
    void child.exited.then((exit) => {
      if (running.get(service) === child) running.delete(service);
      if (!stopping.has(child) && ready.has(child)) options.onServiceExit?.(service, describeExit(exit), child.logFile);
    });
    return child;
  };

  const waitReady = async (service: ServiceName, child: Child): Promise<void> => {
    const deadline = Date.now() + compiled.readyTimeoutMs;
    for (;;) {
      const exit = child.exit();
      if (exit) throw await exitedDuringStart(service, child, exit);
      if (await probe(service)) {
        ready.add(child);
        return;
      }
      if (Date.now() > deadline) {
        throw new TackError("launch.timeout", `${service} did not answer within ${compiled.readyTimeoutMs} ms; see ${child.logFile}`, { details: { service } });
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  };

  const stopChild = async (child: Child) => {
    stopping.add(child);
    await child.stop(STOP_GRACE_MS);
  };
  // If the launcher's process ends without stop(), do not leave services behind.
  const onProcessExit = () => {
    for (const child of running.values()) child.process.kill("SIGTERM");
    nats?.child.process.kill("SIGTERM");
  };
  process.on("exit", onProcessExit);

  let stopped: Promise<void> | undefined;
  const stop = () => (stopped ??= (async () => {
    await Promise.all([...running.values()].map(stopChild));
    await bus.close().catch(() => undefined);
    if (nats) await stopChild(nats.child);
    process.off("exit", onProcessExit);
  })());

  if (services.length > 0) progress(`starting ${services.join(", ")}`);
  const waiting = new Set(services);
  try {
    for (const service of services) assertEntryExists(service);
    await Promise.all(services.map(async (service) => {
      await waitReady(service, spawnService(service));
      waiting.delete(service);
      if (waiting.size > 0) progress(`${service} is up; waiting for ${[...waiting].join(", ")}`);
    }));
  } catch (error) {
    await stop();
    throw error;
  }

  return {
    gatewayUrl, apiKey, namespace, natsUrl, natsAuth, busCredentials: local?.files, dataDir, stop,
    kill: async (service, signal = "SIGKILL") => {
      const child = running.get(service);
      if (!child) return;
      stopping.add(child);
      child.process.kill(signal);
      await child.exited;
    },
    start: async (service) => {
      if (stopped) throw new TackError("launch.stopped", `cannot start ${service}: this Tack was stopped; call launch() again`);
      if (running.has(service)) throw new TackError("launch.already_running", `${service} is already running (pid ${running.get(service)!.process.pid}); kill it first`);
      const child = spawnService(service);
      try {
        await waitReady(service, child);
      } catch (error) {
        await stopChild(child);
        throw error;
      }
    },
    pid: (service) => running.get(service)?.process.pid,
    logFile,
  };
}

interface Compiled {
  readonly dataDir: string;
  readonly namespace: string;
  readonly apiKey: string;
  readonly gatewayPort: number | undefined;
  readonly services: readonly ServiceName[];
  readonly readyTimeoutMs: number;
  readonly progress: (message: string) => void;
}

function compile(options: LaunchOptions): Compiled {
  const namespace = options.namespace ?? "tack";
  try {
    assertToken("namespace", namespace);
  } catch (error) {
    throw new TackError("launch.invalid_options", (error as Error).message);
  }
  const services = options.services ?? SERVICES;
  for (const service of services) {
    if (!(SERVICES as readonly string[]).includes(service)) {
      throw new TackError("launch.invalid_options", `unknown service ${JSON.stringify(service)}; known services: ${SERVICES.join(", ")}`);
    }
  }
  if (new Set(services).size !== services.length) throw new TackError("launch.invalid_options", `services lists a service twice: ${services.join(", ")}`);
  const port = options.gatewayPort;
  if (port !== undefined && !(Number.isInteger(port) && port > 0 && port < 65536)) {
    throw new TackError("launch.invalid_options", `gateway port ${port} is not a port number (1-65535)`);
  }
  if (options.apiKey !== undefined && options.apiKey.trim() === "") throw new TackError("launch.invalid_options", "the API key is empty; pass a non-empty key or none for a random one");
  return {
    dataDir: resolve(options.dataDir),
    namespace,
    apiKey: options.apiKey ?? `tack_${randomBytes(24).toString("base64url")}`,
    gatewayPort: port,
    services,
    readyTimeoutMs: options.readyTimeoutMs ?? 60_000,
    progress: options.onProgress ?? (() => undefined),
  };
}

/** A cheap request each bus service answers (usually with an error) once it has subscribed; none has side effects. */
function busProbe(bus: Bus, service: Exclude<ServiceName, "gateway">): Promise<unknown> {
  const options = { timeoutMs: PROBE_TIMEOUT_MS };
  switch (service) {
    case "llm":
      return bus.request(bus.names.llmComplete, CompleteRequest, CompleteRequest.fromPartial({}), CompleteStreamMessage, options);
    case "tools":
      return bus.request(bus.names.toolsList, ListToolsRequest, { mode: "standard" }, ListToolsResponse, options);
    case "sandbox":
      return bus.request(bus.names.sandboxRelease, ReleaseSandboxRequest, { sessionId: "launcher-probe", mode: "" }, ReleaseSandboxResponse, options);
    case "loop":
      return bus.request(bus.names.loopSubmit, SubmitMessageRequest, SubmitMessageRequest.fromPartial({}), SubmitMessageResponse, options);
  }
}

function assertEntryExists(service: ServiceName): void {
  const entry = join(repoRoot, "services", service, "src", "main.ts");
  if (!existsSync(entry)) throw new TackError("launch.missing_service", `${entry} does not exist; is this a complete Tack checkout?`, { details: { service } });
}

async function exitedDuringStart(service: ServiceName, child: Child, exit: ChildExit): Promise<TackError> {
  const tail = await child.tail(10);
  return new TackError(
    "launch.service_exited",
    `${service} ${describeExit(exit)} during start-up${tail ? `:\n${tail}\n` : " without output; "}(full log: ${child.logFile})`,
    { details: { service } },
  );
}
