// The environment of one service process: only what that service uses (SERVICE_ENV in
// services.ts), so that a process taken over by a model or a repository holds no key it
// does not need (issue 18, item 7). Everything not allowed is left out, never passed "just in case".
import { BASE_ENV, SECRET_NAME, SERVICE_ENV, SERVICES, type ServiceName } from "./services.js";

/** What decides beyond the declarations: the operator's key variables and, for a local NATS, the service's own bus credentials file. */
export interface ServiceEnvContext {
  /** The variables the operator configuration's `keys[].env` name: the gateway's, secrets for every other service. */
  readonly operatorKeyVariables?: readonly string[];
  /** This service's credentials file of a nats-server the launcher started; then no TACK_NATS_USER/PASSWORD/TLS_* is passed. */
  readonly busCredentialsFile?: string;
}

const BUS_AUTH = ["TACK_NATS_USER", "TACK_NATS_PASSWORD", "TACK_NATS_TLS_CA", "TACK_NATS_TLS_CERT", "TACK_NATS_TLS_KEY"];

/** Secrets some service declares: they reach that service only. */
const DECLARED_SECRETS = new Set(SERVICES.flatMap((service) => SERVICE_ENV[service].secrets));

/**
 * True when `name` may reach `service`: a base variable; one of its own settings, prefixes or
 * secrets (the gateway: also an operator key variable); else a `TACK_*` setting that is neither
 * declared a secret, an operator key variable, nor named like a secret (`SECRET_NAME`).
 */
export function mayReceive(service: ServiceName, name: string, operatorKeyVariables: readonly string[] = []): boolean {
  if ((BASE_ENV.names as readonly string[]).includes(name) || BASE_ENV.prefixes.some((prefix) => name.startsWith(prefix))) return true;
  const own = SERVICE_ENV[service];
  if (own.settings.includes(name) || own.secrets.includes(name) || (own.prefixes ?? []).some((prefix) => name.startsWith(prefix))) return true;
  if (operatorKeyVariables.includes(name)) return own.operatorKeys === true;
  if (DECLARED_SECRETS.has(name)) return false;
  return name.startsWith("TACK_") && !SECRET_NAME.test(name);
}

/**
 * The environment of `service` taken from `source` (the launcher's environment with its own
 * settings applied): only the variables `mayReceive` allows, plus the bus credentials file of a
 * local NATS in place of any other bus user.
 */
export function serviceEnvironment(service: ServiceName, source: NodeJS.ProcessEnv, context: ServiceEnvContext = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(source)) {
    if (value !== undefined && mayReceive(service, name, context.operatorKeyVariables)) env[name] = value;
  }
  if (context.busCredentialsFile !== undefined) {
    // A child of a local nats-server gets its own credentials file and nothing inherited that could override it.
    for (const name of BUS_AUTH) delete env[name];
    env.TACK_NATS_CREDENTIALS = context.busCredentialsFile;
  }
  return env;
}
