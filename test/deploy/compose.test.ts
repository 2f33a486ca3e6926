// The one-host deploy (deploy/compose) for real: builds the images when they are not current (a no-op
// otherwise), brings the compose project up under a unique name from the local images with Debian's
// docker-compose, runs a scripted session through the gateway whose bash call runs in a gVisor sandbox
// container started by the containerised sandbox service on the host's engine, checks the spans reached an
// OTLP receiver running in the project, then `down -v` must leave no container, network, volume or sandbox.
import { execFileSync, spawnSync, type SpawnSyncReturns } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, chownSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sseJson } from "../e2e/support/sse.js";

const root = fileURLToPath(new URL("../..", import.meta.url));
const wrapper = join(root, "deploy/compose/tack-compose");
const suffix = randomBytes(4).toString("hex");
const project = `tackc${suffix}`;
const namespace = `compose${suffix}`;
const work = mkdtempSync("/var/tmp/tack-compose-test-");
chmodSync(work, 0o755);
let version = "";
let env: NodeJS.ProcessEnv = {};
let down = false;

function compose(args: string[], extraEnv: NodeJS.ProcessEnv = {}): SpawnSyncReturns<string> {
  return spawnSync(wrapper, args, { env: { ...env, ...extraEnv }, encoding: "utf8", timeout: 300_000 });
}

function composeOk(args: string[]): string {
  const result = compose(args);
  if (result.status !== 0) throw new Error(`tack-compose ${args.join(" ")} exited with ${result.status}: ${result.stderr}${result.stdout}`);
  return result.stdout;
}

/**
 * Polls `probe` until it returns a value (not undefined/false); a timeout names `what` and the last error. Local,
 * so that this test depends on nothing but Docker, Compose and the images.
 */
async function waitFor<T>(what: string, probe: () => Promise<T | undefined | false>, options: { timeoutMs: number; intervalMs: number }): Promise<T> {
  const deadline = Date.now() + options.timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined && value !== false) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${options.timeoutMs} ms waiting for ${what}${last ? ` (last: ${(last as Error).message})` : ""}`);
    await new Promise((resolve) => setTimeout(resolve, options.intervalMs));
  }
}

/** `host:port` docker published for a service's container port. */
const published = (service: string, port: number) => composeOk(["port", service, String(port)]).trim();

/** Names of docker objects of this compose project (containers, networks, volumes). */
function leftovers(): string[] {
  const label = `label=com.docker.compose.project=${project}`;
  const list = (args: string[]) => execFileSync("docker", args, { encoding: "utf8" }).split("\n").filter(Boolean);
  return [
    ...list(["ps", "-a", "--filter", label, "--format", "container {{.Names}}"]),
    ...list(["network", "ls", "--filter", label, "--format", "network {{.Name}}"]),
    ...list(["volume", "ls", "--filter", label, "--format", "volume {{.Name}}"]),
    ...list(["ps", "-a", "--filter", `label=tack.namespace=${namespace}`, "--format", "sandbox {{.Names}}"]),
  ];
}

beforeAll(() => {
  // Builds what is not current (the services image after a code change: a few seconds; cold: see deploy/compose/README.md).
  // The version is read once: commits landing meanwhile must not change the tag between build and use.
  version = execFileSync(process.execPath, [join(root, "scripts/build-images.mjs"), "--print-version"], { encoding: "utf8" }).trim();
  const build = spawnSync(process.execPath, [join(root, "scripts/build-images.mjs")], { encoding: "utf8", timeout: 45 * 60_000, env: { ...process.env, TACK_VERSION: version } });
  if (build.status !== 0) throw new Error(`make images failed:\n${build.stdout}\n${build.stderr}`);
  const workspaces = join(work, "workspaces");
  mkdirSync(workspaces, { recursive: true });
  env = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    COMPOSE_PROJECT_NAME: project,
    TACK_VERSION: version,
    TACK_NAMESPACE: namespace,
    TACK_SECRETS: join(work, "secrets"),
    TACK_WORKSPACES: workspaces,
    TACK_DATA: join(work, "data"),
    TACK_GATEWAY_PUBLISH: "127.0.0.1:",
    TACK_SANDBOX_REMOVE_ON_STOP: "1",
    TACK_COMPOSE_FILES: "compose.otlp.yaml",
    OTEL_EXPORTER_OTLP_ENDPOINT: "http://otlp:4318",
  };
  composeOk(["init"]);
  process.stderr.write(`compose test: up -d (project ${project}, images ${version})\n`);
  composeOk(["up", "-d"]);
}, 50 * 60_000);

afterAll(() => {
  if (!down) compose(["down", "-v", "--remove-orphans", "--timeout", "60"]);
  rmSync(work, { recursive: true, force: true });
}, 180_000);

describe("one-host deploy (docker-compose)", () => {
  it("compose - a scripted session through the gateway runs bash in a gVisor sandbox, its spans reach the OTLP receiver, and down -v leaves nothing", async () => {
    const step = (what: string) => process.stderr.write(`compose test: ${what}\n`);
    const gateway = `http://${published("gateway", 7700)}`;
    step(`waiting for ${gateway}/healthz`);
    // Each probe with its own deadline: a connection docker's port proxy accepted before the gateway listened can hang.
    await waitFor("the gateway's /healthz", async () => (await fetch(`${gateway}/healthz`, { signal: AbortSignal.timeout(2_000) }).catch(() => undefined))?.ok, { timeoutMs: 120_000, intervalMs: 500 });
    const key = readFileSync(join(env.TACK_SECRETS!, "api-key"), "utf8").trim();
    const api = (path: string, init: { method?: string; json?: unknown } = {}) =>
      fetch(`${gateway}${path}`, {
        method: init.method ?? "GET",
        headers: { authorization: `Bearer ${key}`, ...(init.json === undefined ? {} : { "content-type": "application/json" }) },
        body: init.json === undefined ? undefined : JSON.stringify(init.json),
        signal: AbortSignal.timeout(30_000),
      });

    // A directory workspace under TACK_WORKSPACES, owned by the sandbox user (gVisor cannot map another owner).
    const workspace = join(env.TACK_WORKSPACES!, "hello");
    mkdirSync(workspace);
    writeFileSync(join(workspace, "hi.txt"), "hi\n");
    chownSync(workspace, 1000, 1000);
    chownSync(join(workspace, "hi.txt"), 1000, 1000);
    step("creating a session");
    const created = await api("/v1/sessions", { method: "POST", json: { workspace, model: "scripted:/opt/tack/examples/hello.json" } });
    expect(created.status, await created.clone().text()).toBe(201);
    const { id } = (await created.json()) as { id: string };
    expect((await api(`/v1/sessions/${id}/messages`, { method: "POST", json: { text: "list the files" } })).status).toBe(202);

    step(`session ${id}: waiting for the turn to end`);
    type Event = { seq: number; type: string } & Record<string, Record<string, unknown> | undefined>;
    const log = await waitFor("the turn to end", async () => {
      const text = await (await api(`/v1/sessions/${id}/events?follow=0`)).text();
      const events = sseJson<Event>(text);
      return events.some((e) => e.type === "turn/end") ? events : undefined;
    }, { timeoutMs: 180_000, intervalMs: 500 });
    expect(log.at(-1)!.turnEnd).toMatchObject({ reason: "completed" });
    const result = log.find((e) => e.type === "tool/result")!.toolResult!;
    // `ls -la` of the workspace, run by bash in the sandbox.
    expect(String(result.content)).toContain("hi.txt");

    // The session's container runs under runsc on the host's engine, started by the sandbox service's container.
    const sandboxes = execFileSync("docker", ["ps", "-q", "--filter", `label=tack.namespace=${namespace}`], { encoding: "utf8" }).split("\n").filter(Boolean);
    expect(sandboxes.length).toBeGreaterThan(0);
    expect(execFileSync("docker", ["inspect", "-f", "{{.HostConfig.Runtime}}", sandboxes[0]!], { encoding: "utf8" }).trim()).toBe("runsc");

    step("checking the sandbox container and the spans");
    // Every service exported its spans of the turn to the receiver.
    const receiver = `http://${published("otlp", 4318)}`;
    const spans = await waitFor("spans of gateway, loop, llm, tools and sandbox", async () => {
      const seen = (await (await fetch(`${receiver}/spans`, { signal: AbortSignal.timeout(5_000) })).json()) as { total: number; services: Record<string, Record<string, number>> };
      return ["tack-gateway", "tack-loop", "tack-llm", "tack-tools", "tack-sandbox"].every((s) => seen.services[s]) ? seen : undefined;
    }, { timeoutMs: 30_000, intervalMs: 500 });
    expect(spans.total).toBeGreaterThan(5);

    // Three tools replicas, one of everything else.
    const running = composeOk(["ps", "--services", "--filter", "status=running"]).split("\n").filter(Boolean).sort();
    expect(running).toEqual(["gateway", "llm", "loop", "mcp", "nats", "otlp", "postgres", "sandbox", "skills", "tools"]);
    expect(execFileSync("docker", ["ps", "-q", "--filter", `label=com.docker.compose.project=${project}`, "--filter", "label=com.docker.compose.service=tools"], { encoding: "utf8" }).split("\n").filter(Boolean)).toHaveLength(3);

    step("down -v");
    composeOk(["down", "-v", "--remove-orphans", "--timeout", "60"]);
    down = true;
    expect(leftovers()).toEqual([]);
  }, 900_000);

  it("compose - an unknown service name and an invalid setting each fail at start-up with one line naming the fix", () => {
    const unknown = spawnSync("docker", ["run", "--rm", "--network", "none", `tack-services:${version}`, "gatewy"], { encoding: "utf8" });
    expect(unknown.status).toBe(2);
    expect(unknown.stderr).toBe('tack-services: unknown service "gatewy"; the first argument must be one of gateway, loop, llm, tools, sandbox, skills, mcp (or init, help)\n');

    // A bad namespace is refused before the service connects anywhere (no NATS is reachable from --network none).
    const invalid = spawnSync("docker", ["run", "--rm", "--network", "none", "-e", "TACK_NAMESPACE=Bad.Name", `tack-services:${version}`, "loop"], { encoding: "utf8" });
    expect(invalid.status).toBe(1);
    const lines = invalid.stderr.split("\n").filter(Boolean);
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0]!)).toMatchObject({ level: "error", msg: "start-up failed", code: "config.invalid" });
    expect(lines[0]).toContain("TACK_NAMESPACE must be 1-64 lowercase letters");

    // A missing image is named before compose could try a registry.
    const missing = compose(["up", "-d"], { TACK_VERSION: "0.0.0-missing" });
    expect(missing.status).toBe(1);
    expect(missing.stderr).toBe("tack-compose: image tack-services:0.0.0-missing is missing on this host (nothing is pulled from a registry); build it with: make images (in a checkout at that version)\n");
  });
});
