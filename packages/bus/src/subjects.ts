import { TackError } from "./errors.js";

/**
 * Every subject, stream and bucket name of one Tack deployment, derived from its namespace.
 * Tests use a unique namespace so that they never meet another run's services on a shared NATS.
 * Rpc subjects are not here: rpcs are served and asked through the descriptors generated from
 * the proto services (`LoopRpc`, `SandboxRpc`, …, `rpcSubject`; docs/decisions/0022-bus-descriptors.md).
 */
export interface Names {
  readonly namespace: string;
  /** Object store bucket the archives of managed workspaces travel through. */
  readonly workspacesBucket: string;
  /** Gateway replicas tell each other here what they just changed (a revoked key, a session's index row), so none keeps using its old copy. */
  readonly gatewayChanged: string;
  /** Log subject of one session. */
  logSubject(tenant: string, sessionId: string): string;
  readonly logSubjects: string;
  readonly logStream: string;
  readonly leaseBucket: string;
  /** Object store bucket holding spilled tool results and other large payloads. */
  readonly spillBucket: string;
  /** KV bucket of money spent per tenant (USD), for tenant budgets and the usage API. */
  readonly spendBucket: string;
  /** KV bucket of sandbox placements, one key per session and mode (written by the sandbox service, purged with a deleted session). */
  readonly sandboxBucket: string;
  /** Input of one stdio stream of a process in a sandbox (decision 0016): the caller publishes StdioFrames, the sandbox service reads. */
  stdioInput(streamId: string): string;
  /** Output of one stdio stream: the sandbox service publishes, the caller reads. */
  stdioOutput(streamId: string): string;
  /** Every stream's input (`.in.*`), for permissions. */
  readonly stdioInputs: string;
  /** Every stream's output (`.out.*`), for permissions. */
  readonly stdioOutputs: string;
}

const TOKEN = /^[a-z0-9][a-z0-9_-]*$/;

/** Checks that `value` can be one subject token (tenant ids, session ids, namespaces). */
export function assertToken(kind: string, value: string): void {
  if (!TOKEN.test(value) || value.length > 64) {
    throw new Error(`invalid ${kind} ${JSON.stringify(value)}: use 1-64 lowercase letters, digits, '_' or '-'`);
  }
}

/**
 * The namespace a service starts in (default `tack`), after checking what every service checks
 * first: a NATS URL is given and the namespace is a valid token. Failures are TackError
 * `<service>.invalid_options` saying what to set.
 */
export function serviceNamespace(service: string, options: { readonly natsUrl: string; readonly namespace?: string }): string {
  const namespace = options.namespace ?? "tack";
  if (!options.natsUrl) throw new TackError(`${service}.invalid_options`, "natsUrl is empty; set NATS_URL, e.g. nats://127.0.0.1:4222");
  try {
    assertToken("namespace", namespace);
  } catch (error) {
    throw new TackError(`${service}.invalid_options`, (error as Error).message, { cause: error });
  }
  return namespace;
}

/** Derives all names from a namespace (default `tack`). */
export function names(namespace = "tack"): Names {
  assertToken("namespace", namespace);
  const upper = namespace.toUpperCase().replace(/-/g, "_");
  return {
    namespace,
    workspacesBucket: `${upper}_WORKSPACES`,
    gatewayChanged: `${namespace}.gateway.changed`,
    logSubject: (tenant, sessionId) => `${namespace}.log.${tenant}.${sessionId}`,
    logSubjects: `${namespace}.log.>`,
    logStream: `${upper}_LOG`,
    leaseBucket: `${upper}_LEASES`,
    spillBucket: `${upper}_SPILL`,
    spendBucket: `${upper}_SPEND`,
    sandboxBucket: `${upper}_SANDBOXES`,
    stdioInput: (streamId) => `${namespace}.sandbox.stdio.in.${streamId}`,
    stdioOutput: (streamId) => `${namespace}.sandbox.stdio.out.${streamId}`,
    stdioInputs: `${namespace}.sandbox.stdio.in.*`,
    stdioOutputs: `${namespace}.sandbox.stdio.out.*`,
  };
}
