import type Docker from "dockerode";
import { TackError } from "@tack/bus";

/** HTTP status of a Docker API error, if the engine answered at all. */
export function statusOf(error: unknown): number | undefined {
  const status = (error as { statusCode?: unknown } | undefined)?.statusCode;
  return typeof status === "number" ? status : undefined;
}

/**
 * Turns a failed Docker call into a TackError: an unreachable engine or a refused socket
 * says how to fix it, anything else names the action that failed and the engine's reason.
 */
export function dockerFailure(error: unknown, action: string): TackError {
  if (error instanceof TackError) return error;
  const code = (error as { code?: unknown } | undefined)?.code;
  const reason = (error as Error | undefined)?.message ?? String(error);
  if (code === "ECONNREFUSED" || code === "ENOENT") {
    return new TackError(
      "sandbox.docker_unreachable",
      `the Docker engine is unreachable (${reason}) while trying to ${action}; start it with \`sudo scripts/ensure-docker.sh\` (or start dockerd)`,
      { retryable: true, cause: error },
    );
  }
  if (code === "EACCES") {
    return new TackError(
      "sandbox.docker_forbidden",
      `permission denied on the Docker socket while trying to ${action}; run the sandbox service as root or as a member of the docker group`,
      { cause: error },
    );
  }
  const detail = (error as { json?: { message?: unknown } } | undefined)?.json?.message;
  return new TackError("sandbox.docker_failed", `Docker failed to ${action}: ${typeof detail === "string" ? detail : reason}`, {
    retryable: statusOf(error) === undefined || (statusOf(error) ?? 0) >= 500,
    cause: error,
  });
}

/** A runtime as the engine declares it. */
export interface RuntimeInfo {
  readonly path?: string;
  readonly runtimeArgs?: string[];
}

/** The runtimes the engine has, by name. */
export async function engineRuntimes(docker: Docker): Promise<Record<string, RuntimeInfo>> {
  try {
    return ((await docker.info()) as { Runtimes?: Record<string, RuntimeInfo> }).Runtimes ?? {};
  } catch (error) {
    throw dockerFailure(error, "read the engine's runtimes");
  }
}
