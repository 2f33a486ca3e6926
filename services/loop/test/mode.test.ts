import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { removeNamespace } from "@tack/testkit";
import { Bus, serveStream, TackError } from "@tack/bus";
import { ensureLogStream, readAll } from "@tack/log";
import {
  CheckModelRequest, CheckModelResponse, CompleteRequest, CompleteStreamMessage, CreateSessionRequest, CreateSessionResponse, EstimateCostRequest,
  EstimateCostResponse, ExecRequest, ExecResponse, ListToolsRequest, ListToolsResponse, SetSandboxModeRequest, SetSandboxModeResponse,
  SubmitMessageRequest, SubmitMessageResponse,
} from "@tack/proto";
import { startLoopService, type LoopService } from "@tack/loop-service";
import { leftoverProcesses, PS_ARGV } from "../src/mode.js";

// The real loop against real NATS; the model and the sandbox are scripted responders on the bus.
// What the sandbox answers is checked against a real container's `ps` in the first test.
const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const namespace = `t${randomBytes(5).toString("hex")}`;
const workspace = mkdtempSync(join(tmpdir(), "tack-mode-"));
const AGENT = "      1       0 /sbin/docker-init -- python3 -I -S -B /opt/tack/agent.py\n      7       1 python3 -I -S -B /opt/tack/agent.py\n";
let bus: Bus;
let loop: LoopService | undefined;
/** `ps` listing (without the ps line) of each mode's container; a mode not listed has none. */
let containers: Record<string, string> = {};
const execs: ExecRequest[] = [];
let llmGate: Promise<void> = Promise.resolve();

beforeAll(async () => {
  bus = await Bus.connect({ url: NATS_URL, namespace, name: "mode-test" });
  await ensureLogStream(bus.nc, bus.names);
  serveStream(bus, bus.names.llmComplete, "llm", CompleteRequest, CompleteStreamMessage, async (_req, w) => {
    await llmGate;
    w.send({ index: 0, body: { $case: "done", value: { content: "done", reasoningContent: "", toolCalls: [], finishReason: "stop", usage: { inputMissTokens: 1, inputHitTokens: 0, outputTokens: 1, reasoningTokens: 0 }, model: "scripted", costUsd: 0, priceWindow: "" } } });
  });
  bus.serve(bus.names.llmEstimate, "llm", EstimateCostRequest, EstimateCostResponse, async () => ({ costUsd: 0, priceWindow: "standard" }));
  bus.serve(bus.names.llmCheck, "llm", CheckModelRequest, CheckModelResponse, async () => ({ provider: "scripted" }));
  bus.serve(bus.names.toolsList, "tools", ListToolsRequest, ListToolsResponse, async () => ({ tools: [] }));
  bus.serve(bus.names.sandboxExec, "sandbox", ExecRequest, ExecResponse, async (req) => {
    execs.push(req);
    const listing = containers[req.mode];
    if (listing === undefined) throw new TackError("sandbox.not_found", `session ${req.sessionId} has no ${req.mode} container`);
    expect(req.argv).toEqual([...PS_ARGV]);
    const stdout = `${listing}     42       7 ${PS_ARGV.join(" ")}\n`;
    return { exitCode: 0, stdout: Buffer.from(stdout), stderr: Buffer.alloc(0), timedOut: false, truncated: false, durationMs: 3 };
  });
});

afterEach(async () => {
  await loop?.stop();
  loop = undefined;
  containers = {};
  execs.length = 0;
  llmGate = Promise.resolve();
});

afterAll(async () => {
  // Streams, lease/spend buckets and spill store of this test's namespace.
  await removeNamespace(bus.nc, bus.names.namespace);
  await bus.close();
});

async function create(sandboxMode: string): Promise<string> {
  loop ??= await startLoopService({ natsUrl: NATS_URL, namespace, leaseTtlMs: 2_000 });
  const r = await bus.request(bus.names.loopCreate, CreateSessionRequest, CreateSessionRequest.fromPartial({ tenant: "local", model: "scripted:test", workspace, sandboxMode }), CreateSessionResponse);
  return r.sessionId;
}

function setMode(sessionId: string, mode: string, subject = bus.names.loopMode): Promise<SetSandboxModeResponse> {
  return bus.request(subject, SetSandboxModeRequest, { tenant: "local", sessionId, mode, changedBy: "acme" }, SetSandboxModeResponse);
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
  it("mode - a real container's ps listing yields only the processes commands left behind", async () => {
    const script = `import subprocess, time
subprocess.Popen(["bash", "-c", "sleep 30 & echo"], start_new_session=True).wait()
time.sleep(0.5)
print(subprocess.run(${JSON.stringify([...PS_ARGV])}, capture_output=True, text=True, start_new_session=True).stdout, end="")`;
    const run = (code: string) => promisify(execFile)("docker", ["run", "--rm", "--init", "--network", "none", "tack-sandbox:bookworm", "python3", "-I", "-S", "-B", "-c", code], { timeout: 30_000 });
    const { stdout } = await run(script);
    // The stand-in agent runs from -c; named as the real one is, only the orphaned sleep is left.
    const renamed = stdout.replace(/python3 -I -S -B -c .*$/gm, "python3 -I -S -B /opt/tack/agent.py");
    expect(leftoverProcesses(renamed)).toEqual([{ pid: expect.any(Number), command: "sleep 30" }]);
  }, 40_000);

  it("mode - a change is logged as sandbox/mode after the wider containers are checked", async () => {
    const id = await create("workspace-write");
    containers = { "workspace-write": AGENT };
    const r = await setMode(id, "read-only");
    expect(r.seq).toBe(5);
    expect(await modes(id)).toEqual(["workspace-write", "read-only"]);
    expect(execs.map((e) => [e.sessionId, e.mode])).toEqual([[id, "workspace-write"], [id, "danger-full-access"]]);
  });

  it("mode - the mode in force again is a no-op with seq 0 and checks nothing", async () => {
    const id = await create("danger-full-access");
    expect(await setMode(id, "danger-full-access")).toEqual({ seq: 0 });
    expect(await modes(id)).toEqual(["danger-full-access"]);
    expect(execs).toEqual([]);
  });

  it("mode - a change while a turn runs is refused as busy", async () => {
    const id = await create("workspace-write");
    let open!: () => void;
    llmGate = new Promise((r) => { open = r; });
    await bus.request(bus.names.loopSubmit, SubmitMessageRequest, { tenant: "local", sessionId: id, text: "hi" }, SubmitMessageResponse);
    const e = await refusal(setMode(id, "read-only", bus.names.loopSessionMode(id)));
    expect(e.code).toBe("loop.busy");
    expect(e.message).toContain("wait for its turn/end");
    open();
    await loop!.session(id)?.settled();
    expect(await modes(id)).toEqual(["workspace-write"]);
  });

  it("mode - a change is refused while a wider container runs a process, and allowed once it is gone", async () => {
    const id = await create("danger-full-access");
    containers = { "danger-full-access": `${AGENT}     19       1 sleep 300\n     23       7 python3 -m http.server 8000\n` };
    const e = await refusal(setMode(id, "workspace-write"));
    expect(e.code).toBe("loop.mode_change_refused");
    expect(e.message).toBe(
      "cannot change the sandbox mode to workspace-write: 2 processes started under the wider mode danger-full-access are still running " +
      "(pid 19 sleep 300; pid 23 python3 -m http.server 8000); stop them (e.g. a bash call `kill 19 23` in a turn that has that mode) or wait for them to end, then retry",
    );
    expect(await modes(id)).toEqual(["danger-full-access"]);
    containers = { "danger-full-access": AGENT };
    expect((await setMode(id, "workspace-write")).seq).toBe(5);
    expect(await modes(id)).toEqual(["danger-full-access", "workspace-write"]);
  });

  it("mode - an unknown mode is refused naming the three", async () => {
    const id = await create("workspace-write");
    const e = await refusal(setMode(id, "full"));
    expect(e.code).toBe("loop.bad_sandbox_mode");
    expect(e.message).toBe('sandbox mode "full" is unknown; use one of: read-only, workspace-write, danger-full-access');
  });
});
