// NATS micro-service discovery for Tack's services (@nats-io/services): each process registers
// itself as `tack-<service>` and answers `$SRV.PING`, `$SRV.INFO` and `$SRV.STATS`, so `tack status`,
// the launcher and the `nats micro` CLI can list the instances that really run.
import { hostname } from "node:os";
import { Svcm, type Service, type ServiceIdentity, type ServiceInfo, type ServiceStats } from "@nats-io/services";
import type { Bus } from "./bus.js";
import { TackError } from "./errors.js";

/** The version every Tack service reports (a semantic version, as the micro protocol requires). */
export const TACK_VERSION = "0.1.0";

/** The micro-service name of Tack service `service`, e.g. `tack-loop`. */
export function microName(service: string): string {
  return `tack-${service}`;
}

/**
 * The discovery subjects the service registered as `microName(service)` subscribes to: every
 * verb for all services, for its name, and for one instance of it (`$SRV.<VERB>[.<name>[.<id>]]`).
 * The bus permission table grants exactly these.
 */
export function microSubjects(service: string): string[] {
  const name = microName(service);
  return ["$SRV.PING", "$SRV.INFO", "$SRV.STATS", `$SRV.*.${name}`, `$SRV.*.${name}.*`];
}

/** What a service tells about itself when it registers. */
export interface MicroOptions {
  /** The Tack service, e.g. `loop`; it registers as `tack-loop`. */
  readonly service: string;
  /** One line on what it does, shown by `$SRV.INFO`. */
  readonly description: string;
  /** Semantic version (default `TACK_VERSION`). */
  readonly version?: string;
  /** Extra metadata; `namespace`, `service`, `pid` and `host` are always set. */
  readonly metadata?: Readonly<Record<string, string>>;
}

/**
 * Registers the process as NATS micro-service `tack-<service>` on the bus's connection, so that
 * `$SRV.PING|INFO|STATS` (all services, by name or by instance id) answer with its identity and
 * metadata: the bus namespace (instances of other deployments on a shared NATS are told apart by
 * it), the service, the process id and the host. No endpoint is added: the service's own
 * subjects stay as they are. Resolves once the server knows the subscriptions; the registration
 * ends with the connection or with `stop()`.
 */
export async function registerMicro(bus: Bus, options: MicroOptions): Promise<Service> {
  let service: Service;
  try {
    service = await new Svcm(bus.nc).add({
      name: microName(options.service),
      version: options.version ?? TACK_VERSION,
      description: options.description,
      metadata: { ...options.metadata, namespace: bus.names.namespace, service: options.service, pid: String(process.pid), host: hostname() },
    });
  } catch (error) {
    throw new TackError("bus.micro_invalid", `cannot register micro-service ${microName(options.service)}: ${(error as Error).message}; the service name must be letters, digits, '-' or '_' and the version a semantic version such as 1.2.3`, { cause: error });
  }
  await bus.nc.flush();
  return service;
}

/** One instance of a Tack service that answered discovery. */
export interface MicroInstance {
  /** The Tack service (`loop`), from the instance's metadata. */
  readonly service: string;
  /** The micro-service name (`tack-loop`). */
  readonly name: string;
  /** The instance id the library gave it (unique per registration). */
  readonly id: string;
  readonly version: string;
  readonly namespace: string;
  /** Its process id, undefined when it did not say. */
  readonly pid: number | undefined;
  readonly host: string;
  readonly metadata: Readonly<Record<string, string>>;
}

/** Discovery responses by verb, as the micro protocol defines them. */
export interface MicroResponses {
  PING: ServiceIdentity;
  INFO: ServiceInfo;
  STATS: ServiceStats;
}

/** Which instances to ask and how long to listen. */
export interface DiscoverOptions<V extends keyof MicroResponses> {
  /** `PING` (default), `INFO` or `STATS`. */
  readonly verb?: V;
  /** Only this Tack service (e.g. `tools`); default every service. */
  readonly service?: string;
  /** Only instances of this namespace (default the bus's); `null` for every namespace on the server. */
  readonly namespace?: string | null;
  /** How long to wait for the first answer (default 1000 ms). */
  readonly waitMs?: number;
  /** How long to wait for more after the last answer (default 200 ms). */
  readonly stallMs?: number;
}

/**
 * Asks the micro-services on the bus's server (`$SRV.<verb>[.tack-<service>]`) and returns the
 * answers of Tack instances of the namespace, each with `instance` read from its metadata.
 * Nobody answering is an empty list, not an error.
 */
export async function discoverMicro<V extends keyof MicroResponses = "PING">(
  bus: Bus,
  options: DiscoverOptions<V> = {},
): Promise<Array<MicroResponses[V] & { instance: MicroInstance }>> {
  const verb = (options.verb ?? "PING") as V;
  const namespace = options.namespace === undefined ? bus.names.namespace : options.namespace;
  const client = new Svcm(bus.nc).client({ strategy: "stall", stall: options.stallMs ?? 200, maxWait: options.waitMs ?? 1_000 });
  const name = options.service === undefined ? "" : microName(options.service);
  const found: Array<MicroResponses[V] & { instance: MicroInstance }> = [];
  try {
    const answers = verb === "INFO" ? await client.info(name) : verb === "STATS" ? await client.stats(name) : await client.ping(name);
    for await (const answer of answers) {
      const instance = instanceOf(answer);
      if (!instance || (namespace !== null && instance.namespace !== namespace)) continue;
      found.push({ ...(answer as MicroResponses[V]), instance });
    }
  } catch (error) {
    // No responders: nobody registered (yet); anything else is the bus failing.
    if (!/no responders/i.test((error as Error).message) && (error as { name?: string }).name !== "NoRespondersError") {
      throw new TackError("bus.request_failed", `micro-service discovery ($SRV.${verb}${name ? `.${name}` : ""}) failed: ${(error as Error).message}`, { retryable: true, cause: error });
    }
  }
  return found;
}

function instanceOf(identity: ServiceIdentity): MicroInstance | undefined {
  const metadata = identity.metadata ?? {};
  if (!identity.name?.startsWith("tack-") || metadata.namespace === undefined) return undefined;
  const pid = Number(metadata.pid);
  return {
    service: metadata.service ?? identity.name.slice("tack-".length),
    name: identity.name,
    id: identity.id,
    version: identity.version,
    namespace: metadata.namespace,
    pid: Number.isInteger(pid) && pid > 0 ? pid : undefined,
    host: metadata.host ?? "",
    metadata,
  };
}
