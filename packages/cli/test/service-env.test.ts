// Which variables each service process gets (SERVICE_ENV in src/services.ts): the rules on a made-up
// environment, and a check that every variable a service's code reads is one it is given.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { KEYED_PROVIDERS, keyVariable } from "@tack/credentials";
import { mayReceive, serviceEnvironment } from "../src/service-env.js";
import { PROVIDER_KEY_VARIABLES, SERVICES, type ServiceName } from "../src/services.js";

const ROOT = fileURLToPath(new URL("../../..", import.meta.url));

const SOURCE: NodeJS.ProcessEnv = {
  PATH: "/usr/bin", HOME: "/home/u", LANG: "C.UTF-8", TZ: "UTC", LC_ALL: "C",
  NODE_OPTIONS: "--require /tmp/evil.js", NATS_URL: "nats://127.0.0.1:4222", TACK_NAMESPACE: "tack",
  TACK_STATE_DIR: "/srv/tack", TACK_LEASE_TTL_MS: "2000", TACK_SANDBOX_POOL_SIZE: "0", OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:4318",
  DEEPSEEK_API_KEY: "sk-deepseek", OPENAI_API_KEY: "sk-openai", ANTHROPIC_API_KEY: "sk-ant", OPENAI_BASE_URL: "http://127.0.0.1:1/v1",
  BRAVE_API_KEY: "brave", TACK_API_KEY: "tack_admin", TACK_DB: "postgres://tack:pw@db/tack", MEMBER_KEY: "tack_member",
  AWS_SECRET_ACCESS_KEY: "aws", GITHUB_TOKEN: "ghp", TACK_UNRELATED_TOKEN: "tok", DOCKER_HOST: "unix:///var/run/docker.sock",
  TACK_NATS_USER: "operator", TACK_NATS_PASSWORD: "nats-pw",
};
const envOf = (service: ServiceName, busCredentialsFile?: string) => serviceEnvironment(service, SOURCE, { operatorKeyVariables: ["MEMBER_KEY"], busCredentialsFile });
const holders = (name: string) => SERVICES.filter((service) => envOf(service)[name] !== undefined);

describe("service environment", () => {
  it("service env - provider keys reach the llm service (DeepSeek's also web_search), the API keys the gateway, Brave's the tools, unrelated secrets nobody", () => {
    expect(holders("OPENAI_API_KEY")).toEqual(["llm"]);
    expect(holders("ANTHROPIC_API_KEY")).toEqual(["llm"]);
    expect(holders("OPENAI_BASE_URL")).toEqual(["llm"]);
    expect(holders("DEEPSEEK_API_KEY")).toEqual(["llm", "tools"]);
    expect(holders("BRAVE_API_KEY")).toEqual(["tools"]);
    expect(holders("TACK_API_KEY")).toEqual(["gateway"]);
    expect(holders("TACK_DB")).toEqual(["gateway"]);
    expect(holders("MEMBER_KEY")).toEqual(["gateway"]);
    expect(holders("DOCKER_HOST")).toEqual(["sandbox"]);
    for (const name of ["AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "TACK_UNRELATED_TOKEN", "NODE_OPTIONS"]) expect(holders(name), name).toEqual([]);
  });

  it("service env - every service gets the base and the TACK_* settings, and a local NATS's credentials file in place of any other bus user", () => {
    for (const service of SERVICES) {
      expect(envOf(service)).toMatchObject({
        PATH: "/usr/bin", HOME: "/home/u", LANG: "C.UTF-8", TZ: "UTC", LC_ALL: "C", NATS_URL: "nats://127.0.0.1:4222", TACK_NAMESPACE: "tack",
        TACK_STATE_DIR: "/srv/tack", TACK_LEASE_TTL_MS: "2000", TACK_SANDBOX_POOL_SIZE: "0", OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:4318",
        TACK_NATS_USER: "operator", TACK_NATS_PASSWORD: "nats-pw",
      });
      const local = envOf(service, `/srv/tack/bus/${service}.json`);
      expect(local.TACK_NATS_CREDENTIALS).toBe(`/srv/tack/bus/${service}.json`);
      expect(local.TACK_NATS_USER).toBeUndefined();
      expect(local.TACK_NATS_PASSWORD).toBeUndefined();
    }
  });

  it("service env - the provider keys declared are exactly the ones the llm service's credential loader reads", () => {
    expect([...PROVIDER_KEY_VARIABLES].sort()).toEqual(KEYED_PROVIDERS.map(keyVariable).sort());
  });

  it("service env - every variable a service's code (or a package it loads) reads reaches that service", () => {
    // The k8s exec probe (`main.js --probe`) runs beside a service, not in it; `tack up` has no probe.
    const notInService = new Set(["packages/config/src/probe.ts"]);
    const shared = ["packages/bus/src", "packages/config/src", "packages/telemetry/src", "packages/log/src"].flatMap(sources);
    const missing: string[] = [];
    for (const service of SERVICES) {
      for (const file of [...sources(`services/${service}/src`), ...shared]) {
        if (notInService.has(file)) continue;
        for (const name of readVariables(readFileSync(join(ROOT, file), "utf8"))) {
          if (!mayReceive(service, name)) missing.push(`${service}: ${name} (${file})`);
        }
      }
    }
    expect(missing).toEqual([]);
  });
});

/** The TypeScript sources under `dir` (relative to the repository root), tests excluded. */
function sources(dir: string): string[] {
  return readdirSync(join(ROOT, dir)).flatMap((entry) => {
    const path = `${dir}/${entry}`;
    if (statSync(join(ROOT, path)).isDirectory()) return entry === "gen" ? [] : sources(path);
    return path.endsWith(".ts") && !path.endsWith(".test.ts") && !path.endsWith(".d.ts") ? [path] : [];
  });
}

/** Variable names a source reads: `env.NAME`, `env?.NAME`, `env["NAME"]`, and `"TACK_*"` names handed to a reader. */
function readVariables(text: string): Set<string> {
  const names = new Set<string>();
  for (const match of text.matchAll(/\benv(?:\?\.|\.|\[["'])([A-Z][A-Z0-9_]*[A-Z0-9])\b/g)) names.add(match[1]!);
  for (const match of text.matchAll(/\bread\w*\(\s*["'](TACK_[A-Z0-9_]+)["']/g)) names.add(match[1]!);
  return names;
}
