import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "../../..");

describe("sandbox start-up", () => {
  it("sandbox - an unreachable Docker engine stops start-up with a one-line error that says how to fix it", () => {
    const r = spawnSync(process.execPath, ["--import", "tsx", "services/sandbox/src/main.ts"], {
      cwd: root,
      env: { ...process.env, DOCKER_HOST: "unix:///tmp/tack-no-such-docker.sock", TACK_NAMESPACE: "tdockergone" },
      encoding: "utf8",
      timeout: 30_000,
    });
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/the Docker engine is unreachable .*start it with `sudo scripts\/ensure-docker.sh`/);
  });
});
