// Configuration shared by every component: validated and defaulted once at the boundary.
import type { BusAuth } from "@tack/bus";
import { logger } from "@tack/telemetry";
import { z } from "zod";
import { busAuthFromEnv } from "./bus-credentials.js";

const Env = z.object({
  NATS_URL: z.string().url({ message: "NATS_URL must be a URL like nats://127.0.0.1:4222" }).default("nats://127.0.0.1:4222"),
  TACK_NAMESPACE: z.string().regex(/^[a-z0-9][a-z0-9_-]{0,63}$/, {
    message: "TACK_NAMESPACE must be 1-64 lowercase letters, digits, '_' or '-'",
  }).default("tack"),
  TACK_TENANT: z.string().regex(/^[a-z0-9][a-z0-9_-]{0,63}$/, { message: "TACK_TENANT must be 1-64 lowercase letters, digits, '_' or '-'" }).default("local"),
});

/** Settings every service reads from the environment. */
export interface CommonConfig {
  readonly natsUrl: string;
  readonly namespace: string;
  readonly tenant: string;
  /** Who this process is on NATS (TACK_NATS_CREDENTIALS or TACK_NATS_USER/TACK_NATS_PASSWORD) and its TLS files (TACK_NATS_TLS_*); pass to `Bus.connect`. */
  readonly natsAuth: BusAuth;
}

/** Raised for invalid configuration; the message names the variable and the fix. */
export class ConfigError extends Error {
  readonly code = "config.invalid";
  constructor(message: string) {
    super(message);
    this.name = "ConfigError";
  }
}

/** Reads the common settings from `env` (default `process.env`). */
export function commonConfig(env: NodeJS.ProcessEnv = process.env): CommonConfig {
  const parsed = Env.safeParse({ NATS_URL: env.NATS_URL || undefined, TACK_NAMESPACE: env.TACK_NAMESPACE || undefined, TACK_TENANT: env.TACK_TENANT || undefined });
  if (!parsed.success) throw new ConfigError(parsed.error.issues.map((i) => i.message).join("; "));
  return { natsUrl: parsed.data.NATS_URL, namespace: parsed.data.TACK_NAMESPACE, tenant: parsed.data.TACK_TENANT, natsAuth: busAuthFromEnv(env) };
}

/**
 * Runs a service's main under the one logger (component `name`, e.g. `loop`): a start-up
 * failure is logged as `start-up failed` with the error's `code` and message (no stack) and
 * exits 1; SIGTERM or SIGINT logs `stopping`, stops the service and exits 0 (1 if stopping failed).
 * With `--probe` among the arguments it starts nothing: it asks whether this host's instance of
 * `name` answers NATS micro-service discovery (`probeService`), prints one line and exits 0 or 1.
 */
export async function runMain(name: string, start: () => Promise<{ stop(): Promise<void> }>): Promise<void> {
  const log = logger(name);
  if (process.argv.includes("--probe")) {
    // A container probe (deploy/k8s): does this host's instance answer discovery? Starts nothing.
    const { probeService } = await import("./probe.js");
    const result = await probeService(name);
    process.stdout.write(`${result.message}\n`);
    process.exit(result.ok ? 0 : 1);
  }
  let service: { stop(): Promise<void> };
  try {
    service = await start();
  } catch (error) {
    log.error("start-up failed", { code: errorCode(error), error: (error as Error).message });
    process.exit(1);
  }
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info("stopping", { signal });
    const stopped = await service.stop().then(() => true, (error: unknown) => {
      log.error("stop failed", { code: errorCode(error), error: (error as Error).message });
      return false;
    });
    process.exit(stopped ? 0 : 1);
  };
  process.on("SIGTERM", () => void stop("SIGTERM"));
  process.on("SIGINT", () => void stop("SIGINT"));
}

/** The error's `code` (a TackError's, a ConfigError's `config.invalid`, a system error's `ECONNREFUSED`), else `internal`. */
function errorCode(error: unknown): string {
  const code = (error as { code?: unknown } | undefined)?.code;
  return typeof code === "string" ? code : "internal";
}

export { ALLOWED_FROM, isSandboxMode, modeRank, SANDBOX_MODES, type Denied, type SandboxMode } from "./sandbox-modes.js";
export { compileOperatorConfig, INSTALL_DIR, isInside, loadOperatorConfig, LOG_REPLICAS, OperatorConfigError, tenantPolicy, type ConfiguredKey, type LogReplicas, type OperatorConfig, type TenantPolicy } from "./operator.js";
export { authorizeWorkspace, managedWorkspacePath, managedWorkspacesDir, WORKSPACE, WorkspaceAccessError, type AuthorizedWorkspace, type WorkspaceRefusal } from "./workspaces.js";
export { BusCredentialsError, busAuthFromEnv, readBusCredentials } from "./bus-credentials.js";
export { probeService, type ProbeOptions, type ProbeResult } from "./probe.js";
export { BUS_USERS, busPermissions, natsServerAuthorization, type BusPermissions, type BusUser } from "./bus-permissions.js";
