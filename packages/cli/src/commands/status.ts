// `tack status`: what the running `tack up` runs (from .tack/up.json), and whether NATS, Docker,
// the gateway and every service process answer.
import { hostname } from "node:os";
import { Bus, discoverMicro, TackError } from "@tack/bus";
import type { Command } from "../args.js";
import { findUpState, processAlive, upStateDirs, type FoundUpState, type UpReplica } from "../state.js";
import { operatorAuth } from "../tack-bus.js";

type StatusCommand = Extract<Command, { name: "status" }>;

const CHECK_TIMEOUT_MS = 3_000;

/** One process of a service, as up.json lists it and as the checks found it. */
export interface ReplicaReport {
  readonly replica: number;
  readonly pid: number | null;
  /** The supervisor's view: `running`, `starting`, `restarting` or `stopped`. */
  readonly state: string;
  /** Whether the process exists now. */
  readonly alive: boolean;
  readonly startedAt: string | null;
  readonly uptimeMs: number | null;
  readonly restarts: number;
  readonly lastExit: string | null;
  /** Whether it answered micro-service discovery ($SRV.PING), found by its pid. */
  readonly answered: boolean;
  /** Its micro-service instance id, when it answered. */
  readonly instanceId: string | null;
  readonly logFile: string;
}

/** Everything `tack status --json` prints. */
export interface StatusReport {
  readonly healthy: boolean;
  /** One sentence per thing that is wrong, with where to look. */
  readonly problems: string[];
  readonly tack: {
    readonly running: boolean;
    /** Whether an up.json was found (false: only the bus of NATS_URL and TACK_NAMESPACE was checked). */
    readonly local: boolean;
    readonly stateFile: string | null;
    readonly pid: number | null;
    readonly gatewayUrl: string | null;
    readonly namespace: string;
    readonly natsUrl: string;
    readonly startedAt: string | null;
    readonly updatedAt: string | null;
  };
  readonly services: Array<{ readonly service: string; readonly replicas: ReplicaReport[] }>;
  readonly nats: { readonly url: string; readonly reachable: boolean; readonly jetstream: boolean; readonly serverVersion: string | null; readonly serverName: string | null; readonly error: string | null };
  readonly docker: { readonly reachable: boolean; readonly required: boolean; readonly serverVersion: string | null; readonly runtimes: string[]; readonly defaultRuntime: string | null; readonly error: string | null };
  readonly gateway: { readonly url: string; readonly healthy: boolean; readonly status: number | null; readonly error: string | null } | null;
  /** Every instance of this namespace that answered `$SRV.PING`. */
  readonly discovery: Array<{ readonly service: string; readonly id: string; readonly pid: number | null; readonly host: string; readonly version: string; readonly metadata: Readonly<Record<string, string>> }>;
}

/** Runs `tack status`; exit code 0 when everything is healthy, 1 otherwise. */
export async function statusCommand(command: StatusCommand, cwd: string, env: NodeJS.ProcessEnv): Promise<number> {
  const report = await collectStatus(cwd, env);
  process.stdout.write(command.json ? `${JSON.stringify(report, null, 2)}\n` : render(report));
  return report.healthy ? 0 : 1;
}

/**
 * Reads up.json (found like `tack down` finds it) and checks everything it names. Without an
 * up.json but with NATS_URL, checks that NATS and the namespace TACK_NAMESPACE instead.
 */
export async function collectStatus(cwd: string, env: NodeJS.ProcessEnv): Promise<StatusReport> {
  const problems: string[] = [];
  const found = await findUpState(upStateDirs(cwd));
  if (!found && !env.NATS_URL) {
    problems.push("Tack is not running: no .tack/up.json here, in a parent directory or in the Tack checkout; start it with `tack up` (or set NATS_URL to check a deployment's NATS)");
  } else if (found && !found.alive) {
    problems.push(`Tack is not running: ${found.file} is left from pid ${found.state.pid}, which has ended; start it with \`tack up\``);
  }
  const state = found?.state;
  const live = found?.alive === true;
  const namespace = state?.namespace ?? (env.TACK_NAMESPACE || "tack");
  const natsUrl = state?.natsUrl ?? env.NATS_URL ?? "";
  const replicas = live ? [...(state?.replicas ?? [])] : [];
  const launched = new Set(replicas.map((r) => r.service));

  const [nats, docker, gateway] = await Promise.all([
    checkNats(natsUrl, namespace, found, env),
    checkDocker(),
    live && state && launched.has("gateway") ? checkGateway(state.gatewayUrl) : Promise.resolve(null),
  ]);

  // The engine matters when a sandbox service runs on this host.
  const needsDocker = launched.has("sandbox") || nats.instances.some((i) => i.service === "sandbox" && i.host === hostname());
  if (!found && nats.reachable && nats.instances.length === 0) problems.push(`no Tack service of namespace ${namespace} answered micro-service discovery ($SRV.PING) on ${natsUrl}; check TACK_NAMESPACE and that the services run`);
  if (natsUrl && !nats.reachable) problems.push(`NATS at ${natsUrl} is unreachable (${nats.error}); see .tack/logs/nats-server.log, or check NATS_URL`);
  else if (natsUrl && !nats.jetstream) problems.push(`NATS at ${natsUrl} has no JetStream; start nats-server with -js`);
  if (needsDocker && !docker.reachable) problems.push(`the Docker engine is unreachable (${docker.error}); start it (\`scripts/ensure-docker.sh\`) or set DOCKER_HOST`);
  if (gateway && !gateway.healthy) problems.push(`the gateway at ${gateway.url} is unhealthy (${gateway.error ?? `HTTP ${gateway.status}`}); see .tack/logs/gateway.log`);

  // Each running sandbox instance says which Docker runtime it uses; the engine must have it.
  if (docker.reachable) {
    for (const instance of nats.instances.filter((i) => i.service === "sandbox")) {
      const runtime = instance.metadata.runtime;
      if (runtime && !docker.runtimes.includes(runtime)) problems.push(`sandbox instance pid ${instance.pid ?? "?"} runs containers under Docker runtime ${runtime}, which the engine does not have (it has ${docker.runtimes.join(", ")}); run \`scripts/ensure-docker.sh\``);
    }
  }

  const now = Date.now();
  const services = [...launched].map((service) => ({
    service,
    replicas: replicas.filter((r) => r.service === service).map((r): ReplicaReport => {
      const alive = r.pid !== null && processAlive(r.pid);
      const instance = r.pid === null ? undefined : nats.instances.find((i) => i.service === service && i.pid === r.pid);
      const report: ReplicaReport = {
        replica: r.replica, pid: r.pid, state: r.state, alive,
        startedAt: r.startedAt, uptimeMs: r.startedAt && alive ? Math.max(0, now - Date.parse(r.startedAt)) : null,
        restarts: r.restarts, lastExit: r.lastExit, answered: instance !== undefined, instanceId: instance?.id ?? null, logFile: r.logFile,
      };
      const problem = replicaProblem(service, r, report, nats.reachable);
      if (problem) problems.push(problem);
      return report;
    }),
  }));

  return {
    healthy: problems.length === 0,
    problems,
    tack: {
      running: live, local: found !== undefined, stateFile: found?.file ?? null, pid: state?.pid ?? null, gatewayUrl: state?.gatewayUrl ?? null, namespace, natsUrl,
      startedAt: state?.startedAt ?? null, updatedAt: state?.updatedAt ?? null,
    },
    services,
    nats: { url: natsUrl, reachable: nats.reachable, jetstream: nats.jetstream, serverVersion: nats.serverVersion, serverName: nats.serverName, error: nats.error },
    docker: { ...docker, required: needsDocker },
    gateway,
    discovery: nats.instances.map((i) => ({ service: i.service, id: i.id, pid: i.pid ?? null, host: i.host, version: i.version, metadata: i.metadata })),
  };
}

function replicaProblem(service: string, listed: UpReplica, report: ReplicaReport, natsReachable: boolean): string | undefined {
  const name = listed.replica === 1 ? service : `${service}#${listed.replica}`;
  const last = listed.lastExit ? ` (its last process ${listed.lastExit})` : "";
  if (listed.state !== "running") return `${name} is ${listed.state}${last}; see ${listed.logFile}`;
  if (!report.alive) return `${name} (pid ${listed.pid}) is gone${last}; see ${listed.logFile}`;
  if (natsReachable && !report.answered) return `${name} (pid ${listed.pid}) did not answer micro-service discovery ($SRV.PING.tack-${service}); see ${listed.logFile}`;
  return undefined;
}

interface NatsCheck {
  readonly reachable: boolean;
  readonly jetstream: boolean;
  readonly serverVersion: string | null;
  readonly serverName: string | null;
  readonly error: string | null;
  readonly instances: Awaited<ReturnType<typeof discoverMicro>>[number]["instance"][];
}

/** Connects as the operator (a local nats-server's `bus/admin.json`, else the TACK_NATS_* variables) and asks who answers discovery. */
async function checkNats(url: string, namespace: string, found: FoundUpState | undefined, env: NodeJS.ProcessEnv): Promise<NatsCheck> {
  const none = { jetstream: false, serverVersion: null, serverName: null, instances: [] };
  if (!url) return { reachable: false, error: "no NATS URL", ...none };
  let bus: Bus;
  try {
    bus = await Bus.connect({ url, namespace, name: "tack-status", ...(await operatorAuth(found, env)) });
  } catch (error) {
    return { reachable: false, error: TackError.from(error).message, ...none };
  }
  try {
    const info = bus.nc.info;
    const instances = (await discoverMicro(bus, { waitMs: CHECK_TIMEOUT_MS, stallMs: 300 })).map((answer) => answer.instance);
    instances.sort((a, b) => a.service.localeCompare(b.service) || (a.pid ?? 0) - (b.pid ?? 0));
    return { reachable: true, jetstream: info?.jetstream === true, serverVersion: info?.version ?? null, serverName: info?.server_name ?? null, error: null, instances };
  } catch (error) {
    return { reachable: true, jetstream: bus.nc.info?.jetstream === true, serverVersion: bus.nc.info?.version ?? null, serverName: null, error: TackError.from(error).message, instances: [] };
  } finally {
    await bus.close().catch(() => undefined);
  }
}

/** The engine the sandbox service uses (DOCKER_HOST, else the local socket): its version and runtimes. */
async function checkDocker(): Promise<Omit<StatusReport["docker"], "required">> {
  const { default: Docker } = await import("dockerode");
  const docker = new Docker({ timeout: CHECK_TIMEOUT_MS });
  try {
    const info = (await docker.info()) as { ServerVersion?: string; Runtimes?: Record<string, unknown>; DefaultRuntime?: string };
    return { reachable: true, serverVersion: info.ServerVersion ?? null, runtimes: Object.keys(info.Runtimes ?? {}).sort(), defaultRuntime: info.DefaultRuntime ?? null, error: null };
  } catch (error) {
    const failure = error as NodeJS.ErrnoException;
    return { reachable: false, serverVersion: null, runtimes: [], defaultRuntime: null, error: failure.code ?? failure.message };
  }
}

async function checkGateway(url: string): Promise<NonNullable<StatusReport["gateway"]>> {
  try {
    const response = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(CHECK_TIMEOUT_MS) });
    const body = (await response.json().catch(() => ({}))) as { problems?: string[] };
    return { url, healthy: response.ok, status: response.status, error: response.ok ? null : (body.problems?.join("; ") ?? null) };
  } catch (error) {
    const cause = (error as { cause?: NodeJS.ErrnoException }).cause;
    return { url, healthy: false, status: null, error: cause?.code ?? (error as Error).message };
  }
}

/** The report as a few aligned lines for a terminal. */
function render(report: StatusReport): string {
  const lines: string[] = [];
  const mark = (ok: boolean) => (ok ? "✓" : "✗");
  const { tack } = report;
  lines.push(tack.running
    ? `Tack${tack.gatewayUrl ? ` at ${tack.gatewayUrl}` : ""} · namespace ${tack.namespace} · \`tack up\` pid ${tack.pid}${tack.startedAt ? `, up since ${tack.startedAt}` : ""}`
    : !tack.local && tack.natsUrl
      ? `Tack namespace ${tack.namespace} on ${tack.natsUrl} (no .tack/up.json: checking the bus only)`
      : `Tack (namespace ${tack.namespace}) is not running${tack.stateFile ? ` (stale ${tack.stateFile})` : ""}`);
  if (report.services.length > 0) {
    lines.push("");
    const rows = [["service", "pid", "state", "up", "restarts", "ping", "last exit"]];
    for (const { service, replicas } of report.services) {
      for (const r of replicas) {
        rows.push([
          r.replica === 1 ? service : `${service}#${r.replica}`, r.pid === null ? "-" : String(r.pid), r.alive ? r.state : `${r.state} (gone)`,
          r.uptimeMs === null ? "-" : duration(r.uptimeMs), String(r.restarts), mark(r.answered), r.lastExit ?? "",
        ]);
      }
    }
    const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)));
    for (const row of rows) lines.push(`  ${row.map((cell, i) => cell.padEnd(widths[i]!)).join("  ").trimEnd()}`);
  }
  lines.push("");
  const { nats, docker, gateway } = report;
  lines.push(`  NATS       ${mark(nats.reachable && nats.jetstream)} ${nats.url || "(none)"}${nats.reachable ? ` · server ${nats.serverVersion ?? "?"} · JetStream ${nats.jetstream ? "on" : "OFF"}` : ` · ${nats.error}`}`);
  lines.push(`  Docker     ${mark(docker.reachable)} ${docker.reachable ? `engine ${docker.serverVersion ?? "?"} · runtimes ${docker.runtimes.join(", ")}` : `unreachable (${docker.error})`}${docker.required ? "" : " · not needed (no sandbox service)"}`);
  if (gateway) lines.push(`  gateway    ${mark(gateway.healthy)} ${gateway.url}/healthz ${gateway.status ?? gateway.error}`);
  const counts = new Map<string, number>();
  for (const instance of report.discovery) counts.set(instance.service, (counts.get(instance.service) ?? 0) + 1);
  lines.push(`  discovery  ${report.discovery.length} instance(s) answered $SRV.PING${counts.size > 0 ? `: ${[...counts].map(([service, n]) => `${service} ${n}`).join(", ")}` : ""}`);
  lines.push("");
  lines.push(report.healthy ? "healthy" : `unhealthy:\n${report.problems.map((p) => `  - ${p}`).join("\n")}`);
  return `${lines.join("\n")}\n`;
}

function duration(ms: number): string {
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}
