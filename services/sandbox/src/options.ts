import { hostname } from "node:os";
import { isAbsolute } from "node:path";
import { assertToken, TackError, type BusAuth } from "@tack/bus";
import { z } from "zod";
import { AGENT_SOURCE, defaultAgentDir } from "./agent-copy.js";
import type { BackendFactory } from "./backend.js";
import { loadOperatorConfig, type OperatorConfig } from "@tack/config";

/** How a sandbox service instance is configured; every field but `natsUrl` has a default. */
export interface SandboxServiceOptions {
  /** NATS server URL, e.g. `nats://127.0.0.1:4222`. */
  natsUrl: string;
  /** NATS user and TLS files (`commonConfig().natsAuth`); none for an open NATS. */
  natsAuth?: BusAuth;
  /** Subject and container-name namespace (default `tack`); tests use a unique one. */
  namespace?: string;
  /** Local Docker image of the sandbox (default `tack-sandbox:bookworm`, built by `make sandbox-image`). */
  image?: string;
  /** Docker runtime the containers run under, e.g. `runc` (default) or `runsc` (gVisor); never replaced by another. */
  runtime?: string;
  /** A container unused for this long is removed (default 15 minutes). */
  idleTimeoutMs?: number;
  /**
   * This process's id among the namespace's sandbox replicas (default: derived from the host
   * name). A restarted process with the same id takes its containers back; replicas sharing a
   * namespace need distinct ids.
   */
  replicaId?: string;
  /** Started containers kept ready for new sessions (default 2); only runtimes that share the host's mounts (runc, crun) can have one. */
  poolSize?: number;
  /** Host directory under which the warm pool mounts session workspaces (default /var/lib/tack/sandbox). */
  poolDir?: string;
  /** The exec agent's source, copied once at start (default: `agent/agent.py` beside the service's code). */
  agentSource?: string;
  /** Host directory of the agent's content-addressed copies, mounted into containers (default: `defaultAgentDir()`); never inside a workspace. */
  agentDir?: string;
  /** The operator's configuration: workspace roots per tenant, managed workspaces, the sandbox user (default: `loadOperatorConfig()`). */
  operator?: OperatorConfig;
  /** Makes the container backend (default: `DockerBackend`, the Docker engine `DOCKER_HOST` names); see the README's "Add a backend". */
  backend?: BackendFactory;
}

/** Options after validation and defaulting; trusted from here on. */
export type CompiledOptions = Readonly<Required<Omit<SandboxServiceOptions, "natsAuth" | "backend">>>;

const tokenOf = (kind: string) => (value: string) => {
  try {
    assertToken(kind, value);
    return true;
  } catch {
    return false;
  }
};

const schema = z.object({
  natsUrl: z.string().min(1, "must name a NATS server, e.g. nats://127.0.0.1:4222"),
  namespace: z.string().refine(tokenOf("namespace"), "must be 1-64 lowercase letters, digits, '_' or '-'").default("tack"),
  image: z.string().min(1, "must name a local image, e.g. tack-sandbox:bookworm").default("tack-sandbox:bookworm"),
  // Any runtime declared to the Docker daemon is accepted here; whether it exists is checked when a container is created.
  runtime: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_.-]*$/, "must be a Docker runtime name such as runc or runsc").default("runc"),
  idleTimeoutMs: z.number({ error: "must be a whole number of milliseconds" }).int("must be a whole number of milliseconds").positive("must be positive").default(15 * 60_000),
  replicaId: z.string().refine(tokenOf("replica id"), "must be 1-64 lowercase letters, digits, '_' or '-'").default(defaultReplicaId),
  poolSize: z.number({ error: "must be a whole number" }).int("must be a whole number").min(0, "must be 0 or more").max(64, "must be at most 64").default(2),
  poolDir: z.string().refine(isAbsolute, "must be an absolute host path").default("/var/lib/tack/sandbox"),
  agentSource: z.string().refine(isAbsolute, "must be an absolute host path").default(AGENT_SOURCE),
  agentDir: z.string().refine(isAbsolute, "must be an absolute host path").default(() => defaultAgentDir()),
});

// The host name as a subject token: a restarted process on the same host gets the same id.
function defaultReplicaId(): string {
  const id = hostname().toLowerCase().replace(/[^a-z0-9_-]+/g, "-").replace(/^[-_]+/, "").slice(0, 64);
  return id || "sandbox";
}

/** Validates and defaults the options once, failing with `sandbox.invalid_options` that names each bad field. */
export function compileOptions(options: SandboxServiceOptions): CompiledOptions {
  const parsed = schema.safeParse(options);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((issue) => `${issue.path.join(".") || "options"}: ${issue.message}`).join("; ");
    throw new TackError("sandbox.invalid_options", `invalid sandbox service options: ${problems}`);
  }
  return { ...parsed.data, operator: options.operator ?? loadOperatorConfig() };
}
