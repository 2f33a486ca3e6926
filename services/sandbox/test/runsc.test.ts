import { release } from "node:os";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { docker, Harness } from "./helpers.js";

describe("sandbox under gVisor", () => {
  let h: Harness;
  beforeAll(async () => {
    h = await Harness.start({ runtime: "runsc" });
  });
  afterAll(async () => {
    await h.cleanup();
  });

  it("runsc - a workspace-write sandbox runs commands under gVisor", async () => {
    const ensured = await h.ensure({ sessionId: "g1", workspace: await h.workspace() });
    expect(ensured).toMatchObject({ created: true, runtime: "runsc" });
    expect((await docker.getContainer(ensured.containerId).inspect()).HostConfig.Runtime).toBe("runsc");
    expect(await h.exec("g1", ["bash", "-c", "id -u; echo hi > /workspace/f; cat /workspace/f"])).toMatchObject({ exitCode: 0, stdout: "1000\nhi\n" });
    // gVisor's own kernel answers, not the host's.
    expect((await h.exec("g1", ["uname", "-r"])).stdout.trim()).not.toBe(release());
  });

  it("runsc - danger-full-access runs under gVisor with a network (runsc-net), never under another runtime", async () => {
    // scripts/ensure-docker.sh declares runsc with --network=none and runsc-net, the same binary, for the networked mode;
    // an engine without runsc-net refuses the mode (sandbox.runtime_without_network). Its egress guard: egress.test.ts.
    const ensured = await h.ensure({ sessionId: "g2", workspace: await h.workspace(), mode: "danger-full-access" });
    expect(ensured).toMatchObject({ created: true, runtime: "runsc" });
    expect((await docker.getContainer(ensured.containerId).inspect()).HostConfig.Runtime).toBe("runsc-net");
    expect((await h.exec("g2", ["uname", "-r"], { mode: "danger-full-access" })).stdout.trim()).not.toBe(release());
  });
});
