import { TackError } from "@tack/bus";
import { AgentChannel } from "./agent.js";
import type { SandboxBackend, SandboxSpec } from "./backend.js";
import type { DirIdentity } from "./mounts.js";

// Python starts in well under a second even under gVisor; this only bounds a wedged start on a loaded host.
const HANDSHAKE_TIMEOUT_MS = 30_000;
// A running agent answers a greeting in milliseconds; one silent this long is wedged or dying with its sandbox.
const REGREET_TIMEOUT_MS = 15_000;

/** A running sandbox with its agent's channel open. */
export interface Started {
  readonly id: string;
  readonly channel: AgentChannel;
}

/**
 * Creates and starts a sandbox from `spec` on `backend` and opens its agent's channel (attached
 * before the start, greeted after it). A sandbox that already holds the name is removed first:
 * the caller owns the name through its placement record, so it was left by a crash. A sandbox
 * that fails on the way is removed again. Fails with `sandbox.image_missing` when the image is
 * not in the engine.
 */
export async function startNew(backend: SandboxBackend, spec: SandboxSpec, label: string): Promise<Started> {
  const id = await backend.create(spec, label);
  try {
    return { id, channel: await startAndGreet(backend, id, label, `${label} (runtime ${spec.runtime})`) };
  } catch (error) {
    await backend.remove(id).catch(() => undefined);
    throw error;
  }
}

// Starts a stopped (or new) sandbox with its agent's channel attached before the start and greeted after it.
async function startAndGreet(backend: SandboxBackend, id: string, label: string, starting: string): Promise<AgentChannel> {
  const channel = await AgentChannel.attach(backend, id, label);
  try {
    await backend.start(id, starting);
    await channel.handshake(HANDSHAKE_TIMEOUT_MS);
    return channel;
  } catch (error) {
    channel.close();
    throw error;
  }
}

/**
 * Opens the agent channel of an existing sandbox, starting it first when it is stopped (its
 * agent died, or the host restarted). A running sandbox whose agent does not answer within
 * `REGREET_TIMEOUT_MS` (wedged, or still counted as running while it dies) is killed and started
 * afresh, so no ensure waits on it again. Returns undefined when the sandbox no longer exists.
 */
export async function reopen(backend: SandboxBackend, id: string, label: string): Promise<AgentChannel | undefined> {
  const state = await backend.state(id, label);
  if (!state) return undefined;
  if (state.running) {
    const channel = await AgentChannel.attach(backend, id, label);
    try {
      await channel.handshake(REGREET_TIMEOUT_MS);
      return channel;
    } catch (error) {
      channel.close();
      if (!(error instanceof TackError) || error.code !== "sandbox.agent_failed") throw error;
    }
    await backend.stop(id, `${label} (its agent did not answer)`);
    if (!(await backend.state(id, label))) return undefined;
  }
  return startAndGreet(backend, id, label, `${label} (restarting it)`);
}

/**
 * Checks that the running sandbox `id` is served, at /workspace, the directory the service
 * mounted for it (`expected`: device and inode from the mount helper), read on the host
 * (decision 0021). Anything else, or a sandbox that no longer runs, fails with
 * `sandbox.workspace_changed`; the caller removes the sandbox.
 */
export async function verifyWorkspace(backend: SandboxBackend, id: string, expected: DirIdentity, workspace: string, label: string): Promise<void> {
  const seen = await backend.workspaceIdentity(id, label);
  if (seen?.dev === expected.dev && seen.ino === expected.ino) return;
  throw new TackError(
    "sandbox.workspace_changed",
    `the sandbox of ${label} was served ${seen ? `device ${seen.dev} inode ${seen.ino}` : "nothing (it stopped)"} at /workspace instead of workspace ${workspace} (device ${expected.dev} inode ${expected.ino}), which was checked and mounted for it; it was removed. A sandbox only runs on the directory that was checked (decision 0021): stop whatever renames or replaces the workspace and retry`,
    { details: { workspace } },
  );
}
