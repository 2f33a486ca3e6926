// Least secret per process (issue 18, item 7): `tack up` is started, as an operator would, with fake
// provider keys, an admin key, an operator-configured member key, web_search's key and unrelated
// secret-looking variables in its environment; each service process's /proc/<pid>/environ must hold
// only what SERVICE_ENV allows that service, and each secret only where it is used.
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../packages/cli/src/nats-server.js";
import { mayReceive } from "../../packages/cli/src/service-env.js";
import { SERVICES, type ServiceName } from "../../packages/cli/src/services.js";
import type { UpState } from "../../packages/cli/src/state.js";

const BIN = fileURLToPath(new URL("../../packages/cli/bin/tack.js", import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), "tack-service-env-"));
const project = join(scratch, "project");
const stateDir = join(project, ".tack");
// Nothing listens on port 9 of loopback: should a service reach for a provider, it stays on this host.
const NOWHERE = "http://127.0.0.1:9";
const SECRETS = {
  DEEPSEEK_API_KEY: `sk-deepseek-${randomBytes(6).toString("hex")}`,
  OPENAI_API_KEY: `sk-openai-${randomBytes(6).toString("hex")}`,
  ANTHROPIC_API_KEY: `sk-ant-${randomBytes(6).toString("hex")}`,
  BRAVE_API_KEY: `brave-${randomBytes(6).toString("hex")}`,
  TACK_API_KEY: `tack_admin_${randomBytes(12).toString("hex")}`,
  TACK_TEST_MEMBER_KEY: `tack_member_${randomBytes(12).toString("hex")}`,
  UNRELATED_DEPLOY_TOKEN: `unrelated-${randomBytes(6).toString("hex")}`,
  TACK_UNRELATED_SECRET: `unrelated-${randomBytes(6).toString("hex")}`,
};
/** The operator configuration names this variable as a key of tenant local: the gateway's, nobody else's. */
const OPERATOR_KEYS = ["TACK_TEST_MEMBER_KEY"];

let up: ChildProcess | undefined;
let output = "";
let environ: Map<string, { service: ServiceName; env: Record<string, string> }>;

beforeAll(async () => {
  mkdirSync(project, { recursive: true });
  const config = join(scratch, "operator.yaml");
  writeFileSync(config, [
    "tenants:",
    "  local: { workspace_roots: [/tmp] }",
    "keys:",
    "  - { tenant: local, role: member, name: member, env: TACK_TEST_MEMBER_KEY }",
  ].join("\n"));
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH, HOME: process.env.HOME, LANG: "C.UTF-8", TZ: "UTC",
    // Set by the operator, not by Tack: it must not reach a service (it could load code into each).
    NODE_OPTIONS: "--max-old-space-size=2048",
    TACK_CONFIG: config, TACK_NAMESPACE: `t${randomBytes(5).toString("hex")}`, TACK_SANDBOX_POOL_SIZE: "0",
    DEEPSEEK_BASE_URL: NOWHERE, OPENAI_BASE_URL: NOWHERE, ANTHROPIC_BASE_URL: NOWHERE,
    TACK_WEB_SEARCH_BRAVE_URL: NOWHERE, TACK_WEB_SEARCH_DEEPSEEK_URL: NOWHERE,
    ...SECRETS,
  };
  up = spawn(process.execPath, [BIN, "up", "--port", String(await freePort())], { cwd: project, env, stdio: ["ignore", "pipe", "pipe"] });
  up.stdout!.on("data", (chunk: Buffer) => { output += chunk.toString(); });
  up.stderr!.on("data", (chunk: Buffer) => { output += chunk.toString(); });
  const state = await waitForUp(180_000);
  environ = new Map(state.replicas!.map((r) => [`${r.service}#${r.replica}`, { service: r.service as ServiceName, env: readEnviron(r.pid!) }]));
}, 240_000);

afterAll(async () => {
  if (up && up.exitCode === null) {
    const ended = new Promise((resolve) => up!.once("exit", resolve));
    up.kill("SIGTERM");
    await ended;
  }
  rmSync(scratch, { recursive: true, force: true });
}, 120_000);

/** Resolves with up.json once every replica of every service runs; fails with `tack up`'s output when it ends or takes too long. */
async function waitForUp(timeoutMs: number): Promise<UpState> {
  const file = join(stateDir, "up.json");
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (up!.exitCode !== null) throw new Error(`tack up exited with ${up!.exitCode}:\n${output}`);
    if (existsSync(file)) {
      const state = JSON.parse(readFileSync(file, "utf8")) as UpState;
      if (state.replicas?.length === SERVICES.length && state.replicas.every((r) => r.state === "running" && r.pid)) return state;
    }
    if (Date.now() > deadline) throw new Error(`tack up did not come up within ${timeoutMs} ms:\n${output}`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

/** A process's environment as it was started (NUL-separated NAME=value). */
function readEnviron(pid: number): Record<string, string> {
  const text = readFileSync(`/proc/${pid}/environ`, "utf8");
  return Object.fromEntries(text.split("\0").filter(Boolean).map((entry) => [entry.slice(0, entry.indexOf("=")), entry.slice(entry.indexOf("=") + 1)]));
}

/** The services whose process holds `name` with the value `tack up` was given. */
const holders = (name: keyof typeof SECRETS) => [...environ.values()].filter(({ env }) => env[name] === SECRETS[name]).map(({ service }) => service).sort();

describe("least secret per process under tack up", () => {
  it("service env - every service process runs and holds only variables its allowlist (SERVICE_ENV) gives it", () => {
    expect([...environ.values()].map(({ service }) => service).sort()).toEqual([...SERVICES].sort());
    const outside: string[] = [];
    for (const [label, { service, env }] of environ) {
      for (const name of Object.keys(env)) if (!mayReceive(service, name, OPERATOR_KEYS)) outside.push(`${label}: ${name}`);
      // Each service is on the bus as its own user, through its own credentials file.
      expect(env.TACK_NATS_CREDENTIALS, label).toBe(join(stateDir, "bus", `${service}.json`));
      expect(env.NODE_OPTIONS, label).toBeUndefined();
      expect(env.PATH, label).toBe(process.env.PATH);
    }
    expect(outside).toEqual([]);
  });

  it("service env - the provider keys reach only the llm service (DeepSeek's also web_search in tools), the admin and member keys only the gateway, Brave's only tools, unrelated secrets nobody", () => {
    expect(holders("OPENAI_API_KEY")).toEqual(["llm"]);
    expect(holders("ANTHROPIC_API_KEY")).toEqual(["llm"]);
    expect(holders("DEEPSEEK_API_KEY")).toEqual(["llm", "tools"]);
    expect(holders("BRAVE_API_KEY")).toEqual(["tools"]);
    expect(holders("TACK_API_KEY")).toEqual(["gateway"]);
    expect(holders("TACK_TEST_MEMBER_KEY")).toEqual(["gateway"]);
    expect(holders("UNRELATED_DEPLOY_TOKEN")).toEqual([]);
    expect(holders("TACK_UNRELATED_SECRET")).toEqual([]);
    // No secret's value hides under another name either.
    for (const { service, env } of environ.values()) {
      const values = new Set(Object.values(env));
      for (const [name, value] of Object.entries(SECRETS)) {
        if (values.has(value)) expect(env[name], `${service} holds ${name}'s value under another name`).toBe(value);
      }
    }
  });
});
