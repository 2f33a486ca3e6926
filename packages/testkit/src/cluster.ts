import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { TackError } from "@tack/bus";
import { waitFor } from "./wait.js";

/** How to start a test cluster. */
export interface NatsClusterOptions {
  /** Nodes in the cluster (default 3: the smallest that survives losing one under R3). */
  nodes?: number;
  /** The nats-server binary (default `nats-server` from PATH, the machine's own). */
  binary?: string;
  /** How long to wait for the cluster, or a restarted node, to be ready (default 30 s). */
  readyTimeoutMs?: number;
}

/** A JetStream cluster of `nats-server` processes on loopback that a test may break. */
export interface NatsCluster {
  /** Client URL of each node, in node order (`nats://127.0.0.1:<port>`). */
  readonly urls: readonly string[];
  /** Server name of each node, in node order (what `StreamInfo.cluster.leader` names). */
  readonly serverNames: readonly string[];
  /** The node index of a server name (e.g. a stream's `cluster.leader`); throws for a name not in this cluster. */
  nodeOf(serverName: string): number;
  /** The current JetStream meta leader's server name, as the running nodes agree on it; undefined while there is none. */
  metaLeader(): Promise<string | undefined>;
  /** Kills a node with SIGKILL (no shutdown, no flush) and waits until its process is gone. Its store dir stays. */
  kill(node: number): Promise<void>;
  /** Starts a killed node again on the same ports and store dir; resolves once it is back in the cluster and JetStream on it is current. */
  restart(node: number): Promise<void>;
  /** Stops every node and removes the cluster's temporary directory. */
  stop(): Promise<void>;
}

interface Node {
  readonly name: string;
  readonly clientPort: number;
  readonly clusterPort: number;
  readonly monitorPort: number;
  readonly config: string;
  process: ChildProcess | undefined;
  /** The node's last lines of output, for error messages. */
  output: string[];
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
    s.on("error", reject);
  });
}

/**
 * Starts a JetStream cluster of `nodes` (default 3) `nats-server` processes from the machine's
 * binary: each node listens on loopback ports of its own, keeps its JetStream store in its own
 * directory under one temporary directory, and routes to the others. Resolves once every node
 * answers its health check and all agree on a JetStream meta leader, so streams with replicas
 * can be created at once. Fails with `testkit.cluster_failed` naming the node and its last output.
 */
export async function startNatsCluster(options: NatsClusterOptions = {}): Promise<NatsCluster> {
  const count = options.nodes ?? 3;
  const binary = options.binary ?? "nats-server";
  const readyTimeoutMs = options.readyTimeoutMs ?? 30_000;
  if (!Number.isInteger(count) || count < 1 || count > 9) throw new TackError("testkit.bad_cluster", `a cluster of ${count} nodes: give 1 to 9 nodes (3 for R3 streams)`);
  const dir = mkdtempSync(join(tmpdir(), "tack-nats-cluster-"));
  const clusterName = `tack-test-${randomBytes(4).toString("hex")}`;
  const nodes: Node[] = [];
  try {
    const ports: number[] = [];
    // Ports are taken one by one and kept distinct (a port just closed may be offered again).
    while (ports.length < count * 3) {
      const port = await freePort();
      if (!ports.includes(port)) ports.push(port);
    }
    for (let i = 0; i < count; i++) {
      const [clientPort, clusterPort, monitorPort] = [ports[i * 3]!, ports[i * 3 + 1]!, ports[i * 3 + 2]!];
      const store = join(dir, `n${i}`);
      mkdirSync(store);
      nodes.push({ name: `${clusterName}-n${i}`, clientPort, clusterPort, monitorPort, config: join(dir, `n${i}.conf`), process: undefined, output: [] });
    }
    for (const [i, node] of nodes.entries()) {
      const routes = nodes.filter((other) => other !== node).map((other) => `"nats-route://127.0.0.1:${other.clusterPort}"`);
      writeFileSync(node.config, [
        `server_name: "${node.name}"`,
        `listen: "127.0.0.1:${node.clientPort}"`,
        `http: "127.0.0.1:${node.monitorPort}"`,
        `jetstream { store_dir: "${join(dir, `n${i}`)}", max_memory_store: 268435456, max_file_store: 4294967296 }`,
        `cluster { name: "${clusterName}", listen: "127.0.0.1:${node.clusterPort}", routes: [${routes.join(", ")}] }`,
        "",
      ].join("\n"));
    }
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }

  const launch = (node: Node): void => {
    const child = spawn(binary, ["-c", node.config], { stdio: ["ignore", "pipe", "pipe"] });
    node.process = child;
    node.output = [];
    const keep = (chunk: Buffer) => {
      node.output.push(...chunk.toString().split("\n").filter(Boolean));
      if (node.output.length > 40) node.output.splice(0, node.output.length - 40);
    };
    child.stdout!.on("data", keep);
    child.stderr!.on("data", keep);
    child.on("error", (error) => node.output.push(`cannot start ${binary}: ${error.message}`));
  };

  const failure = (node: Node, what: string, cause?: unknown) =>
    new TackError("testkit.cluster_failed", `NATS cluster node ${node.name} (client port ${node.clientPort}) ${what}; its last output: ${node.output.slice(-8).join(" | ") || "(none)"}`, { cause });

  const monitor = async <T>(node: Node, path: string): Promise<{ status: number; body: T }> => {
    const res = await fetch(`http://127.0.0.1:${node.monitorPort}${path}`, { signal: AbortSignal.timeout(2_000) });
    return { status: res.status, body: (await res.json()) as T };
  };

  const exited = (child: ChildProcess) => child.exitCode !== null || child.signalCode !== null
    ? Promise.resolve()
    : new Promise<void>((resolve) => {
      child.once("exit", () => resolve());
      // A binary that cannot be started emits only "error".
      child.once("error", () => resolve());
    });

  const running = () => nodes.filter((node) => node.process && node.process.exitCode === null && node.process.signalCode === null);

  const metaLeader = async (): Promise<string | undefined> => {
    const up = running();
    const leaders = await Promise.all(up.map(async (node) => {
      const { body } = await monitor<{ meta_cluster?: { leader?: string } }>(node, "/jsz");
      return body.meta_cluster?.leader ?? "";
    }));
    const [first] = leaders;
    // A killed leader is still named by the others until they notice it is gone.
    return first && leaders.every((leader) => leader === first) && up.some((node) => node.name === first) ? first : undefined;
  };

  /** Waits until `node` answers healthy (JetStream current), sees all its routes, and the running nodes agree on a meta leader. */
  const ready = async (node: Node): Promise<void> => {
    const child = node.process!;
    // A node that exits (a bad configuration, a port taken meanwhile) fails the wait at once.
    let settled = false;
    const died = exited(child).then(() => {
      if (!settled) throw failure(node, `exited while starting (code ${child.exitCode}, signal ${child.signalCode})`);
    });
    const healthy = (async () => {
      await waitFor(`node ${node.name} to be healthy with routes to the running nodes`, async () => {
        const health = await monitor<{ status: string }>(node, "/healthz");
        if (health.status !== 200) return false;
        const routes = await monitor<{ num_routes: number }>(node, "/routez");
        return routes.body.num_routes >= running().length - 1;
      }, { timeoutMs: readyTimeoutMs, intervalMs: 50 });
      await waitFor("the NATS cluster to agree on a JetStream meta leader", metaLeader, { timeoutMs: readyTimeoutMs, intervalMs: 50 });
    })().catch((error: unknown) => {
      throw failure(node, `did not become ready: ${(error as Error).message}`, error);
    });
    try {
      await Promise.race([healthy, died]);
    } finally {
      settled = true;
    }
  };

  const byIndex = (index: number): Node => {
    const node = nodes[index];
    if (!node) throw new TackError("testkit.bad_cluster", `node ${index} does not exist; this cluster has nodes 0 to ${nodes.length - 1}`);
    return node;
  };

  const stopAll = async () => {
    await Promise.all(nodes.map(async (node) => {
      if (!node.process) return;
      node.process.kill("SIGKILL");
      await exited(node.process);
    }));
    rmSync(dir, { recursive: true, force: true });
  };

  try {
    for (const node of nodes) launch(node);
    for (const node of nodes) await ready(node);
  } catch (error) {
    await stopAll();
    throw error;
  }

  return {
    urls: nodes.map((node) => `nats://127.0.0.1:${node.clientPort}`),
    serverNames: nodes.map((node) => node.name),
    nodeOf(serverName) {
      const index = nodes.findIndex((node) => node.name === serverName);
      if (index < 0) throw new TackError("testkit.bad_cluster", `server ${JSON.stringify(serverName)} is not a node of this cluster (${nodes.map((node) => node.name).join(", ")})`);
      return index;
    },
    metaLeader: () => metaLeader().catch(() => undefined),
    async kill(index) {
      const node = byIndex(index);
      if (!node.process || node.process.exitCode !== null || node.process.signalCode !== null) throw new TackError("testkit.bad_cluster", `node ${index} is not running; restart it first`);
      node.process.kill("SIGKILL");
      await exited(node.process);
    },
    async restart(index) {
      const node = byIndex(index);
      if (node.process && node.process.exitCode === null && node.process.signalCode === null) throw new TackError("testkit.bad_cluster", `node ${index} is still running; kill it first`);
      launch(node);
      await ready(node);
    },
    stop: stopAll,
  };
}
