// `node <service main> --probe`: the readiness/liveness check of a bus-only service in a container
// (Kubernetes exec probes, deploy/k8s). It connects as the `probe` NATS user (TACK_PROBE_PASSWORD;
// without it, with the service's own credentials, enough on an open NATS) and asks micro-service
// discovery (`$SRV.PING.tack-<service>`) whether the instance on this host answers.
import { hostname } from "node:os";
import { Bus, discoverMicro } from "@tack/bus";
import { commonConfig } from "./index.js";

/** What a probe found: `ok` and one line saying what answered or what is wrong and how to look. */
export interface ProbeResult {
  readonly ok: boolean;
  readonly message: string;
}

/** Options of `probeService`; the defaults are what a container needs. */
export interface ProbeOptions {
  /** Settings as for the service itself (NATS_URL, TACK_NAMESPACE, TACK_NATS_*) plus TACK_PROBE_PASSWORD; default `process.env`. */
  readonly env?: NodeJS.ProcessEnv;
  /** The host whose instance must answer (default this host's name: the pod's name in Kubernetes). */
  readonly host?: string;
  /** How long to wait for the answers (default 2000 ms). */
  readonly waitMs?: number;
}

/**
 * Pings Tack service `service` through NATS micro-service discovery and reports whether an
 * instance of this namespace on `host` answered. Never throws: an unreachable bus or a refused
 * login is a failed probe whose message says so.
 */
export async function probeService(service: string, options: ProbeOptions = {}): Promise<ProbeResult> {
  const host = options.host ?? hostname();
  let bus: Bus | undefined;
  try {
    const env = options.env ?? process.env;
    const common = commonConfig(env);
    // The `probe` user when its password is given (a service's own user may not ping), else the service's credentials.
    const auth = env.TACK_PROBE_PASSWORD ? { ...common.natsAuth, credentials: { user: "probe", password: env.TACK_PROBE_PASSWORD } } : common.natsAuth;
    bus = await Bus.connect({ url: common.natsUrl, namespace: common.namespace, name: `tack-${service}-probe`, ...auth });
    const answers = await discoverMicro(bus, { service, waitMs: options.waitMs ?? 2_000, stallMs: 300 });
    const mine = answers.filter((answer) => answer.instance.host === host);
    if (mine.length > 0) {
      return { ok: true, message: `${service} on ${host} answers $SRV.PING in namespace ${common.namespace} (pid ${mine.map((a) => a.instance.pid ?? "?").join(", ")})` };
    }
    const others = answers.map((answer) => answer.instance.host).join(", ");
    return {
      ok: false,
      message: `no ${service} instance on ${host} answered $SRV.PING.tack-${service} in namespace ${common.namespace}${others ? ` (instances on ${others} did)` : ""}; the service is not running or not connected: read its log`,
    };
  } catch (error) {
    return { ok: false, message: `${service} probe failed: ${(error as Error).message}` };
  } finally {
    await bus?.close().catch(() => undefined);
  }
}
