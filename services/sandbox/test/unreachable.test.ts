import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "../../..");

// The executable as `tack up` and the deployments start it; NATS_URL points at nothing, so a start that got past the check would fail otherwise.
function start(env: Record<string, string>) {
  return spawnSync(process.execPath, ["--import", "tsx", "services/sandbox/src/main.ts"], {
    cwd: root,
    env: { ...process.env, NATS_URL: "nats://127.0.0.1:1", TACK_SANDBOX_POOL_SIZE: "0", ...env },
    encoding: "utf8",
    timeout: 30_000,
  });
}

describe("sandbox start-up", () => {
  it("sandbox - an unreachable Docker engine stops start-up with a one-line error that says how to fix it", () => {
    const r = start({ DOCKER_HOST: "unix:///tmp/tack-no-such-docker.sock", TACK_NAMESPACE: "tdockergone" });
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/the Docker engine is unreachable .*start it with `sudo scripts\/ensure-docker.sh`/);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
  });

  it("sandbox - a missing sandbox image stops start-up with a one-line error naming the image and make sandbox-image", () => {
    const r = start({ TACK_SANDBOX_IMAGE: "tack-sandbox:no-such-tag", TACK_NAMESPACE: "timagegone" });
    expect(r.status).toBe(1);
    const lines = r.stderr.trim().split("\n");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain("sandbox.image_missing");
    expect(lines[0]).toContain("sandbox image tack-sandbox:no-such-tag is not in the local Docker engine; build it with `make sandbox-image`");
  });
});
