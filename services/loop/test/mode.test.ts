import { randomBytes } from "node:crypto";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { removeNamespace } from "@tack/testkit";
import { Bus, LlmRpc, LoopRpc, SandboxRpc, TackError, ToolsRpc } from "@tack/bus";
import { ensureLogStream, readAll } from "@tack/log";
import { CreateSessionRequest, ListProcessesRequest, SetSandboxModeResponse, type SandboxProcess } from "@tack/proto";
import { startLoopService, type LoopService } from "@tack/loop-service";

// The real loop against real NATS; the model and the sandbox are scripted responders on the bus.
// The sandbox's process listing itself (the agent leaves out only its own pid) is tested against
// real containers in services/sandbox.
const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const namespace = `t${randomBytes(5).toString("hex")}`;
const workspace = mkdtempSync(join(tmpdir(), "tack-mode-"));
const proc = (pid: number, command: string, ppid = 1): SandboxProcess => ({ pid, ppid, command, state: "S" });
let bus: Bus;
let loop: LoopService | undefined;
/** What the sandbox lists for each mode's container (the agent never among them); a mode not listed has none. */
let containers: Record<string, SandboxProcess[]> = {};
const listings: ListProcessesRequest[] = [];
let llmGate: Promise<void> = Promise.resolve();

beforeAll(async () => {
  bus = await Bus.connect({ url: NATS_URL, namespace, name: "mode-test" });
  await ensureLogStream(bus.nc, bus.names);
  bus.serve(LlmRpc.Complete, async (_req, w) => {
    await llmGate;
    w.send({ index: 0, body: { $case: "done", value: { content: "done", reasoningContent: "", toolCalls: [], finishReason: "stop", usage: { inputMissTokens: 1, inputHitTokens: 0, outputTokens: 1, reasoningTokens: 0 }, model: "scripted", costUsd: 0, priceWindow: "" } } });
  });
  bus.serve(LlmRpc.EstimateCost, async () => ({ costUsd: 0, priceWindow: "standard" }));
  bus.serve(LlmRpc.CheckModel, async () => ({ provider: "scripted" }));
  bus.serve(ToolsRpc.ListTools, async () => ({ tools: [] }));
  bus.serve(SandboxRpc.ListProcesses, async (req) => {
    listings.push(req);
    const processes = containers[req.mode];
    if (processes === undefined) throw new TackError("sandbox.not_found", `session ${req.sessionId} has no ${req.mode} container`);
    return { processes, truncated: false };
  });
});

afterEach(async () => {
  await loop?.stop();
  loop = undefined;
  containers = {};
  listings.length = 0;
  llmGate = Promise.resolve();
});

afterAll(async () => {
  // Streams, lease/spend buckets and spill store of this test's namespace.
  await removeNamespace(bus.nc, bus.names.namespace);
  await bus.close();
});

async function create(sandboxMode: string): Promise<string> {
  loop ??= await startLoopService({ natsUrl: NATS_URL, namespace, leaseTtlMs: 2_000 });
  const r = await bus.request(LoopRpc.CreateSession, CreateSessionRequest.fromPartial({ tenant: "local", model: "scripted:test", workspace, sandboxMode }));
  return r.sessionId;
}

function setMode(sessionId: string, mode: string, owner = false): Promise<SetSandboxModeResponse> {
  return bus.request(owner ? LoopRpc.SetSandboxMode.at({ session: sessionId }) : LoopRpc.SetSandboxMode, { tenant: "local", sessionId, mode, changedBy: "acme" });
}

async function modes(sessionId: string): Promise<string[]> {
  const events = await readAll(bus.nc, bus.names, { tenant: "local", sessionId });
  return events.flatMap((e) => (e.payload?.$case === "sandboxMode" ? [e.payload.value.mode] : []));
}

async function refusal(p: Promise<unknown>): Promise<TackError> {
  const error = await p.then(() => undefined, (e: unknown) => e);
  expect(error).toBeInstanceOf(TackError);
  return error as TackError;
}

describe("sandbox mode", () => {
  it("mode - a change is logged as sandbox/mode after the wider containers are checked", async () => {
    const id = await create("workspace-write");
    containers = { "workspace-write": [] };
    const r = await setMode(id, "read-only");
    expect(r.seq).toBe(5);
    expect(await modes(id)).toEqual(["workspace-write", "read-only"]);
    expect(listings).toEqual([{ sessionId: id, mode: "workspace-write" }, { sessionId: id, mode: "danger-full-access" }]);
  });

  it("mode - the mode in force again is a no-op with seq 0 and checks nothing", async () => {
    const id = await create("danger-full-access");
    expect(await setMode(id, "danger-full-access")).toEqual({ seq: 0 });
    expect(await modes(id)).toEqual(["danger-full-access"]);
    expect(listings).toEqual([]);
  });

  it("mode - a change while a turn runs is refused as busy", async () => {
    const id = await create("workspace-write");
    let open!: () => void;
    llmGate = new Promise((r) => { open = r; });
    await bus.request(LoopRpc.SubmitMessage, { tenant: "local", sessionId: id, text: "hi" });
    const e = await refusal(setMode(id, "read-only", true));
    expect(e.code).toBe("loop.busy");
    expect(e.message).toContain("wait for its turn/end");
    open();
    await loop!.session(id)?.settled();
    expect(await modes(id)).toEqual(["workspace-write"]);
  });

  it("mode - a change is refused while a wider container runs a process, and allowed once it is gone", async () => {
    const id = await create("danger-full-access");
    containers = { "danger-full-access": [proc(19, "sleep 300"), proc(23, "python3 -m http.server 8000", 19)] };
    const e = await refusal(setMode(id, "workspace-write"));
    expect(e.code).toBe("loop.mode_change_refused");
    expect(e.message).toBe(
      "cannot change the sandbox mode to workspace-write: 2 processes started under the wider mode danger-full-access are still running " +
      "(pid 19 sleep 300; pid 23 python3 -m http.server 8000); stop them (e.g. a bash call `kill 19 23` in a turn that has that mode) or wait for them to end, then retry",
    );
    expect(await modes(id)).toEqual(["danger-full-access"]);
    containers = { "danger-full-access": [] };
    expect((await setMode(id, "workspace-write")).seq).toBe(5);
    expect(await modes(id)).toEqual(["danger-full-access", "workspace-write"]);
  });

  it("mode - a process that ends within the grace period (a short command still finishing) does not block the change", async () => {
    const id = await create("workspace-write");
    // Like the read of a new session's hooks and rules files, started at its creation under workspace-write.
    containers = { "workspace-write": [proc(9, "bash -c for p in \"$@\"; do cat \"$p\"; done")] };
    setTimeout(() => { containers = { "workspace-write": [] }; }, 300);
    expect((await setMode(id, "read-only")).seq).toBeGreaterThan(0);
    expect(await modes(id)).toEqual(["workspace-write", "read-only"]);
    // It was asked again until the process was gone, not refused at the first listing.
    expect(listings.filter((l) => l.mode === "workspace-write").length).toBeGreaterThan(1);
  });

  it("mode - a process named like the exec agent still blocks the change: nothing is skipped by name", async () => {
    const id = await create("danger-full-access");
    containers = { "danger-full-access": [proc(31, "python3 -I -S -B /opt/tack/agent.py"), proc(32, "/opt/tack/agent.py")] };
    const e = await refusal(setMode(id, "read-only"));
    expect(e.code).toBe("loop.mode_change_refused");
    expect(e.message).toContain("2 processes started under the wider mode danger-full-access are still running (pid 31 python3 -I -S -B /opt/tack/agent.py; pid 32 /opt/tack/agent.py)");
    expect(e.details).toMatchObject({ pids: "31,32" });
    expect(await modes(id)).toEqual(["danger-full-access"]);
  });

  it("mode - an unknown mode is refused naming the three", async () => {
    const id = await create("workspace-write");
    const e = await refusal(setMode(id, "full"));
    expect(e.code).toBe("loop.bad_sandbox_mode");
    expect(e.message).toBe('sandbox mode "full" is unknown; use one of: read-only, workspace-write, danger-full-access');
  });
});
