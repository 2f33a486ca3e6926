// End to end on a real 3-node NATS JetStream cluster: the log and the loop's buckets with 3
// replicas from the operator configuration, the real llm (scripted model), tools, sandbox and
// loop processes (the launcher `tack up` uses), and the node leading the log stream and the
// lease bucket killed with SIGKILL in the middle of a turn. Nothing may be lost or duplicated.
import { chownSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { Bus, LoopRpc } from "@tack/bus";
import { launch, type Launched } from "@tack/cli";
import { ensureLogStream, readAll } from "@tack/log";
import { CreateSessionRequest } from "@tack/proto";
import { removeNamespace, startNatsCluster, waitFor, type NatsCluster } from "@tack/testkit";

const namespace = `jsc${randomBytes(4).toString("hex")}`;
const work = mkdtempSync(join(tmpdir(), "tack-e2e-cluster-"));
const stateDir = join(work, "data");
const workspace = join(work, "project");
let cluster: NatsCluster;
let bus: Bus;
let jsm: JetStreamManager;
let tack: Launched | undefined;
/** The node that held the log stream at first and leads it and the lease bucket when killed. */
let victim: number;

const LOG_STREAM = `${namespace.toUpperCase()}_LOG`;

beforeAll(async () => {
  mkdirSync(workspace, { recursive: true });
  if (process.getuid?.() === 0) chownSync(workspace, 1000, 1000);
  // The services read this operator configuration: the log and its buckets get 3 replicas from `log.replicas`.
  const config = join(work, "operator.yaml");
  writeFileSync(config, [
    "tenants:",
    `  local: { workspace_roots: [${JSON.stringify(work)}], budget_usd: 100 }`,
    "log:",
    "  replicas: 3",
    "",
  ].join("\n"));
  mkdirSync(join(stateDir, "scripts"), { recursive: true });
  writeFileSync(join(stateDir, "scripts", "cluster.json"), JSON.stringify({ replies: [
    // Over the loop's 50,000-byte spill threshold: the whole result goes to the spill store.
    { content: "Counting.", tool_calls: [{ name: "bash", arguments: { command: "seq 1 12000" } }] },
    // The leader is killed while this one runs; its result is appended during the election.
    { content: "Waiting.", tool_calls: [{ name: "bash", arguments: { command: "sleep 2; echo two" } }] },
    { content: "Once more.", tool_calls: [{ name: "bash", arguments: { command: "echo three" } }] },
    { content: "Done." },
  ] }));

  cluster = await startNatsCluster();
  // A log stream left from a single-server setup (1 replica): the loop scales it to the configured 3.
  const first = await Bus.connect({ url: cluster.urls[0]!, namespace, name: "cluster-test-setup" });
  const info = await (await ensureLogStream(first.nc, first.names)).streams.info(LOG_STREAM);
  await first.close();
  expect(info.config.num_replicas).toBe(1);
  // The node holding it is the one killed; everything else talks to a node that stays up (its
  // connection learns the other nodes from the cluster).
  victim = cluster.nodeOf(info.cluster!.leader!);
  const survivor = cluster.urls[(victim + 1) % cluster.urls.length]!;
  bus = await Bus.connect({ url: survivor, namespace, name: "cluster-test" });
  tack = await launch({
    dataDir: stateDir, natsUrl: survivor, namespace, services: ["llm", "tools", "sandbox", "loop"],
    env: { TACK_CONFIG: config, TACK_STATE_DIR: stateDir, TACK_SANDBOX_POOL_SIZE: "0" },
  });
  jsm = await jetstreamManager(bus.nc);
  expect((await jsm.streams.info(LOG_STREAM)).config.num_replicas).toBe(3);
  // The worst case for a running turn: the killed node leads both the log and the lease bucket
  // (created by the loop), so appends and lease renewals both wait for an election.
  for (const stream of [LOG_STREAM, `KV_${bus.names.leaseBucket}`]) await leadOn(stream, cluster.serverNames[victim]!);
  await waitFor("all three replicas of the log to be current", async () => {
    const peers = (await jsm.streams.info(LOG_STREAM)).cluster?.replicas ?? [];
    return peers.length === 2 && peers.every((p) => p.current);
  });
}, 90_000);

afterAll(async () => {
  await tack?.stop();
  if (bus) {
    await removeNamespace(bus.nc, namespace).catch(() => undefined);
    await bus.close();
  }
  await cluster?.stop();
  rmSync(work, { recursive: true, force: true });
});

/** Moves the leadership of `stream` to `serverName`: a leader stepdown hands it to another peer at random, so step down until it lands there. */
async function leadOn(stream: string, serverName: string): Promise<void> {
  for (let attempt = 0; attempt < 12; attempt++) {
    const leader = (await jsm.streams.info(stream)).cluster?.leader;
    if (leader === serverName) return;
    const answered = await bus.nc.request(`$JS.API.STREAM.LEADER.STEPDOWN.${stream}`, undefined, { timeout: 5_000 }).then(() => true, () => false);
    // Unanswered (an election already running, a loaded machine: CI saw it time out): it may or may not have happened, so look again.
    if (!answered) continue;
    await waitFor(`a new leader of ${stream} after a stepdown from ${leader}`, async () => {
      const now = (await jsm.streams.info(stream)).cluster?.leader;
      return now !== undefined && now !== leader;
    }, { timeoutMs: 15_000 });
  }
  throw new Error(`${stream}'s leadership did not land on ${serverName} after 12 stepdowns`);
}

/** The session's log as read back now; a read during the leader election throws, which `waitFor` takes as "not yet". */
const log = (sessionId: string) => readAll(bus.nc, bus.names, { tenant: "local", sessionId });

describe("JetStream cluster", () => {
  it("cluster - the node leading the log stream and the lease bucket is killed mid-turn: the turn ends, every event is there once, in order", async () => {
    const { sessionId } = await bus.request(LoopRpc.CreateSession, CreateSessionRequest.fromPartial({
      tenant: "local", model: "scripted:cluster.json", workspace,
    }), { timeoutMs: 20_000 });
    await bus.request(LoopRpc.SubmitMessage, { tenant: "local", sessionId, text: "count, wait, and once more" });

    // Kill the leader while the second tool call runs: its result, the next model call and everything after are written during or after the election.
    await waitFor("the second tool call to start", async () => (await log(sessionId)).some((e) => e.payload?.$case === "toolCall" && e.payload.value.callId === "call_1_0"), { timeoutMs: 20_000 });
    const leader = (await jsm.streams.info(LOG_STREAM)).cluster!.leader!;
    expect(cluster.nodeOf(leader)).toBe(victim);
    expect((await jsm.streams.info(`KV_${bus.names.leaseBucket}`)).cluster!.leader).toBe(leader);
    await cluster.kill(victim);

    let lastRead = "nothing yet";
    const events = await waitFor("the turn to end after the leader was killed", async () => {
      const now = await log(sessionId).catch((error: unknown) => {
        throw new Error(`${(error as Error).message} (reading the log; the last read had: ${lastRead})`);
      });
      lastRead = now.map((e) => e.type).join(", ");
      if (!now.some((e) => e.type === "turn/end")) throw new Error(`no turn/end yet: ${lastRead}`);
      return now;
    }, { timeoutMs: 40_000, intervalMs: 200 });

    // A new leader among the survivors holds the log.
    const after = await waitFor("the log stream's info from the survivors", () => jsm.streams.info(LOG_STREAM, { subjects_filter: bus.names.logSubject("local", sessionId) }), { timeoutMs: 30_000 });
    expect(after.cluster!.leader).not.toBe(leader);
    expect(after.config.num_replicas).toBe(3);

    // Contiguous seqs 1..N, and exactly N messages on the session's subject: no gap, no duplicate.
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
    expect(after.state.subjects?.[bus.names.logSubject("local", sessionId)]).toBe(events.length);

    const types = events.map((e) => e.type);
    const count = (type: string) => types.filter((t) => t === type).length;
    expect(types.slice(0, 6)).toEqual(["session/created", "permission/preset", "sandbox/mode", "approval/policy", "user/message", "turn/start"]);
    expect([count("turn/start"), count("turn/end"), count("step/start"), count("step/end"), count("assistant/message")]).toEqual([1, 1, 4, 4, 4]);
    expect(types).not.toContain("session/recovered");
    const calls = events.flatMap((e) => (e.payload?.$case === "toolCall" ? [e.payload.value.callId] : []));
    const results = events.flatMap((e) => (e.payload?.$case === "toolResult" ? [e.payload.value] : []));
    expect(calls).toEqual(["call_0_0", "call_1_0", "call_2_0"]);
    expect(results.map((r) => r.callId)).toEqual(["call_0_0", "call_1_0", "call_2_0"]);
    // Every tool really ran in the sandbox (none synthesized by recovery); the first result went whole to the spill store.
    expect(results.map((r) => r.synthesized)).toEqual([false, false, false]);
    expect(results[0]!.spillObject).not.toBe("");
    expect(results[0]!.fullBytes).toBeGreaterThan(50_000);
    expect(results[1]!.content).toMatch(/^two\n/);
    expect(results[2]!.content).toMatch(/^three\n/);
    const assistant = events.flatMap((e) => (e.payload?.$case === "assistantMessage" ? [e.payload.value.content] : []));
    expect(assistant).toEqual(["Counting.", "Waiting.", "Once more.", "Done."]);
    const end = events.at(-1)!;
    expect(end.payload?.$case === "turnEnd" && end.payload.value).toMatchObject({ turn: 1, reason: "completed", steps: 4 });

    // The buckets the loop created have the configured replicas too: leases, tenant spend (budget_usd is set), spilled results.
    for (const stream of [`KV_${bus.names.leaseBucket}`, `KV_${bus.names.spendBucket}`, `OBJ_${bus.names.spillBucket}`]) {
      // Asked again while it times out: with a node gone, nats-server 2.9 can leave a JetStream API request unanswered (CI saw it).
      const replicas = await waitFor(`${stream}'s stream info`, async () => (await jsm.streams.info(stream)).config.num_replicas, { timeoutMs: 30_000 });
      expect([stream, replicas]).toEqual([stream, 3]);
    }

    // The killed node comes back and catches up: every replica of the log is current again.
    await cluster.restart(victim);
    const healed = await waitFor("the restarted node to catch up on the log", async () => {
      const info = await jsm.streams.info(LOG_STREAM);
      const peers = info.cluster?.replicas ?? [];
      // The server leaves out a lag of 0.
      if (peers.length === 2 && peers.every((p) => p.current && !p.offline && !p.lag)) return info;
      throw new Error(`replicas: ${JSON.stringify(peers)}`);
    }, { timeoutMs: 20_000, intervalMs: 200 });
    expect([healed.cluster!.leader, ...healed.cluster!.replicas!.map((p) => p.name)].sort()).toEqual([...cluster.serverNames].sort());
  }, 90_000);
});
