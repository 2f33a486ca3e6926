// The images part of `make bench` (TACK_BENCH_ONLY=images): builds the images when they are not current
// (scripts/build-images.mjs, a no-op otherwise), then reports
// - image_mb: each image's size as Docker counts it (all layers), in MB;
// - service_ready_ms: each service's container of the one-host deploy (deploy/compose), from `docker start`
//   of the created container until it is ready — the gateway's /healthz answers 200, every other service
//   answers its NATS micro-service ping ($SRV.PING.tack-<service>) — p50 of RUNS starts.
// The deploy runs under a throwaway compose project (NATS, PostgreSQL and the services from the local images,
// NATS published on a loopback port) that is removed with its volumes at the end.
// Alone: `npx tsx bench/images.ts` prints the JSON (as root: the images are built with debootstrap).
import { execFileSync, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { connect } from "@nats-io/transport-node";
import { percentile, say, sleep } from "./lib.js";

const RUNS = Number(process.env.TACK_BENCH_IMAGE_RUNS ?? 3);
const SERVICES = ["gateway", "loop", "llm", "tools", "sandbox", "skills", "mcp"] as const;
const IMAGES = ["services", "nats", "postgres", "sandbox"] as const;
const root = join(import.meta.dirname, "..");
const script = join(root, "scripts/build-images.mjs");

/** Image sizes and each service's start-up time in a container. */
export async function benchImages(): Promise<Record<string, unknown>> {
  say("images: building what is not current (scripts/build-images.mjs)");
  const version = execFileSync(process.execPath, [script, "--print-version"], { encoding: "utf8" }).trim();
  const build = spawnSync(process.execPath, [script], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, TACK_VERSION: version } });
  if (build.status !== 0) throw new Error(`scripts/build-images.mjs failed: ${build.stdout.trim().split("\n").slice(-3).join(" | ")}`);
  const image_mb: Record<string, number> = {};
  for (const name of IMAGES) {
    const bytes = Number(execFileSync("docker", ["image", "inspect", "-f", "{{ .Size }}", `tack-${name}:${version}`], { encoding: "utf8" }).trim());
    image_mb[name] = Math.round(bytes / 1e5) / 10;
  }

  const suffix = randomBytes(4).toString("hex");
  const work = mkdtempSync("/var/tmp/tack-bench-images-");
  chmodSync(work, 0o755);
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    COMPOSE_PROJECT_NAME: `tackbench${suffix}`,
    TACK_VERSION: version,
    TACK_NAMESPACE: `benchimg${suffix}`,
    TACK_SECRETS: join(work, "secrets"),
    TACK_WORKSPACES: join(work, "workspaces"),
    TACK_DATA: join(work, "data"),
    TACK_GATEWAY_PUBLISH: "127.0.0.1:",
    TACK_SANDBOX_REMOVE_ON_STOP: "1",
    TACK_COMPOSE_FILES: "compose.nats-port.yaml",
  };
  mkdirSync(env.TACK_WORKSPACES!, { recursive: true });
  const compose = (...args: string[]) => execFileSync(join(root, "deploy/compose/tack-compose"), args, { env, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  const ready: Record<string, number[]> = Object.fromEntries(SERVICES.map((s) => [s, []]));
  try {
    compose("init");
    say("images: starting NATS and PostgreSQL, creating the service containers");
    compose("up", "-d", "nats", "postgres");
    compose("up", "--no-start");
    const admin = JSON.parse(readFileSync(join(env.TACK_SECRETS!, "bus/admin.json"), "utf8")) as { user: string; password: string };
    const nc = await connect({ servers: compose("port", "nats", "4222").trim(), user: admin.user, pass: admin.password });
    try {
      for (const service of SERVICES) {
        const container = compose("ps", "-q", service).trim().split("\n")[0]!;
        for (let run = 0; run < RUNS; run++) {
          const started = performance.now();
          execFileSync("docker", ["start", container]);
          if (service === "gateway") {
            const port = execFileSync("docker", ["port", container, "7700"], { encoding: "utf8" }).trim().split("\n")[0]!;
            await until(`the gateway's /healthz`, async () => (await fetch(`http://${port}/healthz`, { signal: AbortSignal.timeout(1_000) }).catch(() => undefined))?.status === 200);
          } else {
            await until(`tack-${service} to answer $SRV.PING`, async () => {
              const reply = await nc.request(`$SRV.PING.tack-${service}`, "", { timeout: 250 }).catch(() => undefined);
              return reply !== undefined;
            });
          }
          ready[service]!.push(performance.now() - started);
          execFileSync("docker", ["stop", "-t", "30", container]);
          // Its registration must be gone before the next start is timed.
          await sleep(200);
        }
        say(`images: ${service} ready in ${ready[service]!.map((ms) => ms.toFixed(0)).join(", ")} ms`);
      }
    } finally {
      await nc.close();
    }
  } finally {
    spawnSync(join(root, "deploy/compose/tack-compose"), ["down", "-v", "--remove-orphans", "--timeout", "30"], { env, stdio: "ignore" });
    rmSync(work, { recursive: true, force: true });
  }
  const service_ready_ms = Object.fromEntries(SERVICES.map((s) => [s, percentile(ready[s]!, 50)]));
  return { images: { version, image_mb, service_ready_ms, runs: RUNS } };
}

async function until(what: string, probe: () => Promise<boolean>, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`images: ${what} did not happen within ${timeoutMs} ms`);
    await sleep(20);
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  process.stdout.write(`${JSON.stringify(await benchImages(), null, 2)}\n`);
}
