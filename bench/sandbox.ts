// Sandbox numbers for `make bench`: exec round trip through the bus, warm pool claim, cold starts under
// runc and runsc, and gVisor's slowdown on a file-heavy command. Each runtime gets its own throwaway
// namespace (services, containers, placement bucket and workspaces are removed at the end).
// Alone: `npx tsx bench/sandbox.ts` prints the JSON (NATS_URL, default nats://127.0.0.1:4222).
import { randomBytes } from "node:crypto";
import { chown, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { Kvm } from "@nats-io/kv";
import { Bus, SandboxRpc } from "@tack/bus";
import { draft, ensureLogStream, FORMAT_VERSION, SessionLogWriter } from "@tack/log";
import { EnsureSandboxRequest, EnsureSandboxResponse, ExecRequest, ExecResponse, ReleaseSandboxRequest, SessionCreated } from "@tack/proto";
import { removeNamespace } from "@tack/testkit";
import { placementBucket, startSandboxService, type SandboxService, type SandboxServiceOptions } from "@tack/sandbox-service";

const EXEC_WARMUP = 20;
const EXECS = 300;
const CLAIMS = 10;
const COLD_STARTS = 5;
const FILE_RUNS = 3;
// In the workspace: creates 2,000 small files, archives them, unpacks the archive, lists everything, removes it all
// (metadata-heavy, as checkouts, installs and builds are).
const FILE_HEAVY = "mkdir -p /workspace/fh && cd /workspace/fh && for i in $(seq 2000); do echo $i > f$i; done && tar cf ../fh.tar . && mkdir ../fh2 && tar xf ../fh.tar -C ../fh2 && ls -lR .. | wc -l && cd / && rm -rf /workspace/fh /workspace/fh2 /workspace/fh.tar";

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return Math.round(sorted[i]! * 100) / 100;
}

const say = (message: string) => process.stderr.write(`bench sandbox: ${message}\n`);

/** One runtime's service in its own namespace, a client, and the workspaces it made. */
class Rig {
  readonly workspaces: string[] = [];
  private constructor(readonly service: SandboxService, readonly bus: Bus) {}

  static async start(natsUrl: string, options: Partial<SandboxServiceOptions>): Promise<Rig> {
    const namespace = `benchsb${randomBytes(4).toString("hex")}`;
    const service = await startSandboxService({ natsUrl, namespace, ...options });
    return new Rig(service, await Bus.connect({ url: natsUrl, namespace, name: "bench-sandbox" }));
  }

  async workspace(): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), "tack-bench-sandbox-"));
    if (process.getuid?.() === 0) await chown(dir, 1000, 1000);
    this.workspaces.push(dir);
    return dir;
  }

  /** Logs the session's `session/created` as the loop would (the service checks requests against it), then asks for its sandbox. */
  async ensure(sessionId: string, workspace: string): Promise<EnsureSandboxResponse> {
    await ensureLogStream(this.bus.nc, this.bus.names);
    const writer = await SessionLogWriter.open(this.bus.nc, this.bus.names, { tenant: "bench", sessionId });
    if (writer.lastSeq === 0) await writer.append(draft("sessionCreated", SessionCreated.fromPartial({ sessionId, tenant: "bench", workspace, mode: "standard", formatVersion: FORMAT_VERSION }), "bench"));
    return this.bus.request(SandboxRpc.EnsureSandbox, EnsureSandboxRequest.fromPartial({ sessionId, tenant: "bench", workspace, mode: "workspace-write" }), { timeoutMs: 120_000 });
  }

  exec(sessionId: string, argv: string[]): Promise<ExecResponse> {
    return this.bus.request(SandboxRpc.Exec, ExecRequest.fromPartial({ sessionId, argv, stdin: Buffer.alloc(0), cwd: "", timeoutMs: 120_000, maxOutputBytes: 0, mode: "workspace-write" }), { timeoutMs: 150_000 });
  }

  async release(sessionId: string): Promise<void> {
    await this.bus.request(SandboxRpc.ReleaseSandbox, ReleaseSandboxRequest.fromPartial({ sessionId, mode: "" }), { timeoutMs: 60_000 });
  }

  /** Times `fn` once, in milliseconds. */
  static async time(fn: () => Promise<unknown>): Promise<number> {
    const startedAt = performance.now();
    await fn();
    return performance.now() - startedAt;
  }

  async close(): Promise<void> {
    await this.service.stop({ removeContainers: true });
    await new Kvm(this.bus.nc).open(placementBucket(this.service.options.namespace)).then((kv) => kv.destroy()).catch(() => undefined);
    await removeNamespace(this.bus.nc, this.service.options.namespace);
    await this.bus.close();
    await Promise.all(this.workspaces.map((dir) => rm(dir, { recursive: true, force: true })));
  }
}

async function coldStarts(rig: Rig, runtime: string): Promise<number[]> {
  const times: number[] = [];
  for (let i = 0; i < COLD_STARTS; i++) {
    const workspace = await rig.workspace();
    times.push(await Rig.time(() => rig.ensure(`cold-${i}`, workspace)));
    await rig.release(`cold-${i}`);
    say(`${runtime} cold start ${i + 1}/${COLD_STARTS}: ${Math.round(times.at(-1)!)} ms`);
  }
  return times;
}

async function fileHeavy(rig: Rig, sessionId: string, runtime: string): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < FILE_RUNS; i++) {
    const result = await rig.exec(sessionId, ["bash", "-c", FILE_HEAVY]);
    if (result.exitCode !== 0) throw new Error(`file-heavy command failed under ${runtime}: ${Buffer.from(result.stderr).toString()}`);
    times.push(result.durationMs);
  }
  say(`${runtime} file-heavy command: ${times.map(Math.round).join(", ")} ms`);
  return percentile(times, 50);
}

/**
 * Measures the sandbox: `sandbox_exec_ms` (p50/p99 of `true` in a warm runc sandbox through the bus, as the
 * tools service sends it), `sandbox_claim_ms` (p50 of ensure for a new session served from the warm pool),
 * `sandbox_cold_start_ms` (p50 of ensure for a new session without a pool, per runtime) and `runsc_slowdown`
 * (a file-heavy command's time under runsc divided by its time under runc).
 */
export async function benchSandbox(options: { natsUrl: string }): Promise<Record<string, unknown>> {
  const rigs: Rig[] = [];
  try {
    // runc with the default warm pool (2): claims, then exec and the file-heavy command in a claimed sandbox.
    const pooled = await Rig.start(options.natsUrl, { runtime: "runc", poolSize: 2 });
    rigs.push(pooled);
    if (pooled.service.pool().unavailable) throw new Error(`the warm pool is off: ${pooled.service.pool().unavailable}`);
    const claims: number[] = [];
    for (let i = 0; i < CLAIMS; i++) {
      await pooled.service.whenPoolFull();
      const workspace = await pooled.workspace();
      const sessionId = `claim-${i}`;
      claims.push(await Rig.time(async () => {
        const ensured = await pooled.ensure(sessionId, workspace);
        if (!ensured.created) throw new Error("a claim reused a container");
      }));
      if (i < CLAIMS - 1) await pooled.release(sessionId);
    }
    say(`claims: ${claims.map(Math.round).join(", ")} ms`);
    const warm = `claim-${CLAIMS - 1}`;
    for (let i = 0; i < EXEC_WARMUP; i++) await pooled.exec(warm, ["true"]);
    const execs: number[] = [];
    for (let i = 0; i < EXECS; i++) execs.push(await Rig.time(() => pooled.exec(warm, ["true"])));
    say(`exec true: p50 ${percentile(execs, 50)} ms, p99 ${percentile(execs, 99)} ms`);
    const runcFiles = await fileHeavy(pooled, warm, "runc");

    // Cold starts: no pool, one namespace per runtime.
    const cold: Record<string, { p50: number }> = {};
    let runscFiles = 0;
    for (const runtime of ["runc", "runsc"]) {
      const rig = await Rig.start(options.natsUrl, { runtime, poolSize: 0 });
      rigs.push(rig);
      cold[runtime] = { p50: percentile(await coldStarts(rig, runtime), 50) };
      if (runtime === "runsc") {
        await rig.ensure("files", await rig.workspace());
        runscFiles = await fileHeavy(rig, "files", runtime);
      }
    }

    return {
      sandbox_exec_ms: { p50: percentile(execs, 50), p99: percentile(execs, 99), definition: "sandbox.exec of `true` over the bus (mode given, as the tools service sends it) in a warm runc sandbox claimed from the pool" },
      sandbox_claim_ms: { p50: percentile(claims, 50), definition: "sandbox.ensure for a new session served from the warm pool (workspace bind + rename + placement record)" },
      sandbox_cold_start_ms: { ...cold, definition: "sandbox.ensure for a new session without a pool: create, start, exec agent handshake, placement record" },
      runsc_slowdown: Math.round((runscFiles / runcFiles) * 100) / 100,
      runsc_slowdown_definition: `median time of a file-heavy command under runsc ÷ under runc (${Math.round(runscFiles)} ms ÷ ${Math.round(runcFiles)} ms): in /workspace: create 2,000 files, tar them, untar the archive, list everything, remove it all`,
    };
  } finally {
    for (const rig of rigs) await rig.close();
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const result = await benchSandbox({ natsUrl: process.env.NATS_URL ?? "nats://127.0.0.1:4222" });
  console.log(JSON.stringify(result, null, 2));
}
