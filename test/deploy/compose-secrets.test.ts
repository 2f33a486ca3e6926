// deploy/compose without Docker: each service of compose.yaml gets only the secrets its Tack service
// uses (SERVICE_ENV in packages/cli/src/services.ts, the allowlist `tack up` starts each process with),
// as environment variables and as Docker secrets.
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { mayReceive } from "../../packages/cli/src/service-env.js";
import { SERVICES, type ServiceName } from "../../packages/cli/src/services.js";

const COMPOSE = fileURLToPath(new URL("../../deploy/compose/compose.yaml", import.meta.url));

type ComposeService = { command?: string[]; environment?: Record<string, unknown>; secrets?: Array<string | { source: string; target?: string }> };

/** compose.yaml's Tack services (merge keys resolved), by the Tack service each runs. */
function tackServices(): Map<ServiceName, ComposeService> {
  const file = parse(readFileSync(COMPOSE, "utf8"), { merge: true }) as { services: Record<string, ComposeService> };
  const out = new Map<ServiceName, ComposeService>();
  for (const [name, service] of Object.entries(file.services)) {
    const runs = service.command?.[0];
    if (runs && (SERVICES as readonly string[]).includes(runs)) out.set(runs as ServiceName, { ...service, environment: { ...service.environment } });
    else expect(["nats", "postgres"], `compose service ${name}`).toContain(name);
  }
  return out;
}

describe("deploy/compose secrets", () => {
  it("compose - every Tack service runs, and its environment holds only variables its service may receive", () => {
    const services = tackServices();
    expect([...services.keys()].sort()).toEqual([...SERVICES].sort());
    const outside = [...services].flatMap(([service, spec]) => Object.keys(spec.environment ?? {}).filter((name) => !mayReceive(service, name)).map((name) => `${service}: ${name}`));
    expect(outside).toEqual([]);
    const holders = (variable: string) => [...services].filter(([, spec]) => variable in (spec.environment ?? {})).map(([service]) => service).sort();
    expect(holders("OPENAI_API_KEY")).toEqual(["llm"]);
    expect(holders("ANTHROPIC_API_KEY")).toEqual(["llm"]);
    expect(holders("DEEPSEEK_API_KEY")).toEqual(["llm", "tools"]);
    expect(holders("BRAVE_API_KEY")).toEqual(["tools"]);
  });

  it("compose - each service mounts only its own NATS credentials as its Docker secrets; the API key and database password only the gateway", () => {
    for (const [service, spec] of tackServices()) {
      const secrets = (spec.secrets ?? []).map((s) => (typeof s === "string" ? { source: s, target: s } : { source: s.source, target: s.target ?? s.source }));
      const expected = [{ source: `nats_${service}`, target: "nats" }, ...(service === "gateway" ? [{ source: "api_key", target: "api_key" }, { source: "gateway_db_password", target: "gateway_db_password" }] : [])];
      expect(secrets, service).toEqual(expected);
    }
  });
});
