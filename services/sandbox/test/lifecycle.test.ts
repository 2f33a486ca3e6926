import { SandboxRpc } from "@tack/bus";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "@tack/testkit";
import { startSandboxService } from "../src/index.js";
import { docker, Harness, NATS_URL, rejection, uniqueNamespace } from "./helpers.js";

describe("sandbox lifecycle", () => {
  let h: Harness;
  beforeAll(async () => {
    h = await Harness.start();
  });
  afterAll(async () => {
    await h.cleanup();
  });

  it("ensure - creates one labelled, hardened container and is idempotent", async () => {
    const workspace = await h.workspace();
    const first = await h.ensure({ sessionId: "s-idem", workspace });
    expect(first).toMatchObject({ created: true, runtime: "runc" });
    const second = await h.ensure({ sessionId: "s-idem", workspace });
    expect(second).toEqual({ containerId: first.containerId, created: false, runtime: "runc" });
    expect(await h.containerIds("s-idem")).toEqual([first.containerId]);

    const info = await docker.getContainer(first.containerId).inspect();
    expect(info.Name).toBe(`/${h.containerName("s-idem")}`);
    expect(info.Config.Labels).toMatchObject({
      "tack.namespace": h.namespace, "tack.replica": h.service.options.replicaId, "tack.session": "s-idem", "tack.tenant": "acme", "tack.mode": "workspace-write",
    });
    expect(info.Config.User).toBe("1000:1000");
    expect([...info.Config.Env].sort()).toEqual(["HOME=/home/tack", "LANG=C.UTF-8", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]);
    expect(info.HostConfig).toMatchObject({
      CapDrop: ["ALL"],
      SecurityOpt: ["no-new-privileges"],
      ReadonlyRootfs: true,
      PidsLimit: 256,
      Memory: 1024 ** 3,
      NanoCpus: 1e9,
      NetworkMode: "none",
      Runtime: "runc",
    });
    expect(Object.keys(info.HostConfig.Tmpfs ?? {}).sort()).toEqual(["/home/tack", "/tmp"]);
    expect(info.HostConfig.LogConfig?.Type).toBe("none");
    // The workspace, and the exec agent's directory (read-only), which runs as the container's main process.
    expect([...info.Mounts].sort((a, b) => a.Destination.localeCompare(b.Destination))).toEqual([
      expect.objectContaining({ Type: "bind", Destination: "/opt/tack", RW: false }),
      expect.objectContaining({ Type: "bind", Destination: "/workspace", RW: true }),
    ]);
    expect(info.Config.Cmd).toEqual(["python3", "-I", "-S", "-B", "/opt/tack/agent.py"]);
  });

  it("ensure - two concurrent ensures of one session create one container", async () => {
    const workspace = await h.workspace();
    const results = await Promise.all([h.ensure({ sessionId: "s-race", workspace }), h.ensure({ sessionId: "s-race", workspace })]);
    expect(results.map((result) => result.created).sort()).toEqual([false, true]);
    expect(results[0]?.containerId).toBe(results[1]?.containerId);
    expect(await h.containerIds("s-race")).toEqual([results[0]?.containerId]);
  });

  it("ensure - restarts a stopped container of the session instead of creating another", async () => {
    const workspace = await h.workspace();
    const { containerId } = await h.ensure({ sessionId: "s-stopped", workspace });
    await docker.getContainer(containerId).stop({ t: 0 });
    expect(await h.ensure({ sessionId: "s-stopped", workspace })).toMatchObject({ containerId, created: false });
    expect((await h.exec("s-stopped", ["echo", "back"])).stdout).toBe("back\n");
  });

  it("ensure - another mode gets the session a second container, and exec picks one by mode", async () => {
    const workspace = await h.workspace();
    const first = await h.ensure({ sessionId: "s-modes", workspace });
    const readOnly = await h.ensure({ sessionId: "s-modes", workspace, mode: "read-only" });
    expect(readOnly.created).toBe(true);
    expect(readOnly.containerId).not.toBe(first.containerId);
    expect((await h.containerIds("s-modes")).sort()).toEqual([first.containerId, readOnly.containerId].sort());
    expect((await docker.getContainer(readOnly.containerId).inspect()).Name).toBe(`/${h.containerName("s-modes", "read-only")}`);
    // Without a mode, exec runs in the session's first container.
    expect((await h.exec("s-modes", ["touch", "/workspace/f"])).exitCode).toBe(0);
    expect((await h.exec("s-modes", ["touch", "/workspace/g"], { mode: "read-only" })).stderr).toContain("Read-only file system");
    expect((await rejection(h.exec("s-modes", ["true"], { mode: "danger-full-access" }))).code).toBe("sandbox.not_found");
    // Releasing one mode keeps the other.
    expect(await h.bus.request(SandboxRpc.ReleaseSandbox, { sessionId: "s-modes", mode: "read-only" })).toEqual({ removed: true });
    expect(await h.containerIds("s-modes")).toEqual([first.containerId]);
  });

  it("ensure - refuses another workspace or tenant than the session was logged with", async () => {
    const workspace = await h.workspace();
    await h.ensure({ sessionId: "s-conflict", workspace });
    const error = await rejection(h.ensure({ sessionId: "s-conflict", workspace: await h.workspace() }));
    expect(error.code).toBe("sandbox.workspace_mismatch");
    expect(error.message).toContain(`was created on workspace ${workspace}`);
    expect((await rejection(h.ensure({ sessionId: "s-conflict", workspace, tenant: "other" }))).code).toBe("sandbox.session_unknown");
    expect(await h.containerIds("s-conflict")).toHaveLength(1);
  });

  it("ensure - an unknown mode fails listing the three modes", async () => {
    const error = await rejection(h.ensure({ sessionId: "s-mode", workspace: await h.workspace(), mode: "yolo" }));
    expect(error.code).toBe("sandbox.bad_mode");
    expect(error.message).toContain("read-only, workspace-write, danger-full-access");
    expect(await h.containerIds("s-mode")).toEqual([]);
  });

  it("ensure - a missing workspace directory fails clearly", async () => {
    const error = await rejection(h.ensure({ sessionId: "s-missing", workspace: "/nonexistent/tack-workspace" }));
    expect(error.code).toBe("sandbox.workspace_missing");
    expect(error.message).toContain("/nonexistent/tack-workspace does not exist");
    expect((await rejection(h.ensure({ sessionId: "s-relative", workspace: "relative/dir" }))).code).toBe("sandbox.bad_workspace");
  });

  it("ensure - bad session and tenant ids are refused", async () => {
    const workspace = await h.workspace();
    expect((await rejection(h.ensure({ sessionId: "Bad/Id", workspace }))).code).toBe("sandbox.bad_request");
    expect((await rejection(h.ensure({ sessionId: "s-tenant", workspace, tenant: "" }))).code).toBe("sandbox.bad_request");
  });

  it("exec - a session without a sandbox fails with sandbox.not_found", async () => {
    const error = await rejection(h.exec("s-never", ["true"]));
    expect(error.code).toBe("sandbox.not_found");
    expect(error.message).toContain("call sandbox.ensure");
  });

  it("release - removes the session's container, then reports nothing to remove", async () => {
    const workspace = await h.workspace();
    await h.ensure({ sessionId: "s-release", workspace });
    expect(await h.release("s-release")).toEqual({ removed: true });
    expect(await h.containerIds("s-release")).toEqual([]);
    expect(await h.release("s-release")).toEqual({ removed: false });
    expect((await rejection(h.exec("s-release", ["true"]))).code).toBe("sandbox.not_found");
  });

  it("service - a restarted service reuses the containers it left behind", async () => {
    const workspace = await h.workspace();
    const { containerId } = await h.ensure({ sessionId: "s-restart", workspace });
    await h.service.stop();
    expect(await h.containerIds("s-restart")).toEqual([containerId]);
    h.service = await startSandboxService({ natsUrl: NATS_URL, namespace: h.namespace });
    expect((await h.exec("s-restart", ["echo", "still here"])).stdout).toBe("still here\n");
    expect(await h.ensure({ sessionId: "s-restart", workspace })).toMatchObject({ containerId, created: false });
  });

  it("service - a container left behind whose agent no longer answers is killed and started afresh by the next ensure, not waited on", async () => {
    const workspace = await h.workspace();
    const { containerId } = await h.ensure({ sessionId: "s-wedged", workspace });
    await h.exec("s-wedged", ["sh", "-c", "echo kept > /workspace/mark"]);
    await h.service.stop();
    // Stopped by a signal: docker still counts the container as running, but its agent answers nothing.
    const wedged = (await docker.getContainer(containerId).inspect()).State.Pid;
    process.kill(wedged, "SIGSTOP");
    h.service = await startSandboxService({ natsUrl: NATS_URL, namespace: h.namespace });
    expect(await h.ensure({ sessionId: "s-wedged", workspace })).toMatchObject({ containerId, created: false });
    const { State } = await docker.getContainer(containerId).inspect();
    expect(State.Running).toBe(true);
    expect(State.Pid).not.toBe(wedged);
    expect((await h.exec("s-wedged", ["cat", "/workspace/mark"])).stdout).toBe("kept\n");
  });
});

describe("sandbox lifecycle with other settings", () => {
  it("ensure - a runtime the engine does not have fails clearly, never falls back to another, and creates no container", async () => {
    const h = await Harness.start({ runtime: "nonexistent-runtime", poolSize: 2 });
    try {
      // Not even the warm pool starts containers under another runtime.
      expect(h.service.pool()).toMatchObject({ size: 0, unavailable: expect.stringContaining("runtime nonexistent-runtime is not configured") });
      for (const mode of ["workspace-write", "read-only", "danger-full-access"]) {
        const error = await rejection(h.ensure({ sessionId: `s-runtime-${mode}`, workspace: await h.workspace(), mode }));
        expect(error.code).toBe("sandbox.runtime_missing");
        expect(error.message).toContain("Docker runtime nonexistent-runtime is not configured");
      }
      expect(await h.containerIds()).toEqual([]);
    } finally {
      await h.cleanup();
    }
  });

  it("start - a missing image fails the service's start, naming the image and make sandbox-image, before it connects to NATS", async () => {
    // The image vanishing after the start fails ensure the same way: test/backend-conformance.test.ts.
    const error = await rejection(startSandboxService({ natsUrl: "nats://127.0.0.1:1", namespace: uniqueNamespace(), poolSize: 0, image: "tack-sandbox:does-not-exist" }));
    expect(error.code).toBe("sandbox.image_missing");
    expect(error.message).toBe("sandbox image tack-sandbox:does-not-exist is not in the local Docker engine; build it with `make sandbox-image`");
  });

  it("reaper - removes a container left idle past the idle timeout", async () => {
    const h = await Harness.start({ idleTimeoutMs: 1000 });
    try {
      await h.ensure({ sessionId: "s-idle", workspace: await h.workspace() });
      expect(await h.containerIds("s-idle")).toHaveLength(1);
      await waitFor("the reaper to remove the idle container", async () => (await h.containerIds("s-idle")).length === 0, { timeoutMs: 20_000, intervalMs: 200 });
      expect((await rejection(h.exec("s-idle", ["true"]))).code).toBe("sandbox.not_found");
    } finally {
      await h.cleanup();
    }
  });

  it("reaper - keeps a container whose command outlasts the idle timeout", async () => {
    const h = await Harness.start({ idleTimeoutMs: 500 });
    try {
      await h.ensure({ sessionId: "s-busy", workspace: await h.workspace() });
      expect((await h.exec("s-busy", ["sleep", "2"])).exitCode).toBe(0);
      expect(await h.containerIds("s-busy")).toHaveLength(1);
    } finally {
      await h.cleanup();
    }
  });

  it("stop - removeContainers removes the namespace's containers", async () => {
    const h = await Harness.start();
    await h.ensure({ sessionId: "s-stop", workspace: await h.workspace() });
    await h.cleanup();
    expect(await h.containerIds()).toEqual([]);
  });

  it("service - invalid options fail with one message naming each bad field", async () => {
    const error = await rejection(startSandboxService({ natsUrl: "", namespace: "Bad Namespace", idleTimeoutMs: -1 }));
    expect(error.code).toBe("sandbox.invalid_options");
    expect(error.message).toMatch(/natsUrl: .*; namespace: .*; idleTimeoutMs: must be positive/);
  });
});
