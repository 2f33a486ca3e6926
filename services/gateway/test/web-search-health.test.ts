import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { compileOperatorConfig } from "@tack/config";
import { startGateway, type Gateway } from "@tack/gateway-service";
import type { ToolsService } from "@tack/tools-service";
import { startSearchFixtures, type SearchFixtureServer } from "../../tools/test/support/search-fixtures.js";

// GET /v1/web/search/health end to end: the gateway asks a real tools service over NATS, whose
// web_search is configured from the environment (as in production) and probes Brave Search's
// recorded-format fixtures on 127.0.0.1.

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const ADMIN = `admin-${randomBytes(16).toString("hex")}`;
const MEMBER = `member-${randomBytes(16).toString("hex")}`;
const BRAVE_KEY = `BSA${randomBytes(12).toString("hex")}`;
const namespace = `t${randomBytes(5).toString("hex")}`;

let fixtures: SearchFixtureServer;
let dir: string;
let tools: ToolsService | undefined;
let gateway: Gateway;

beforeAll(async () => {
  fixtures = await startSearchFixtures();
  dir = mkdtempSync(join(tmpdir(), "tack-web-health-"));
  // web_search reads its configuration when the tools service's module loads, its keys at each use.
  // HOME is a fresh directory so no real ~/.tack/credentials.yaml is read.
  vi.stubEnv("HOME", dir);
  vi.stubEnv("DEEPSEEK_API_KEY", "");
  vi.stubEnv("TACK_WEB_SEARCH_PROVIDER", "");
  vi.stubEnv("BRAVE_API_KEY", BRAVE_KEY);
  vi.stubEnv("TACK_WEB_SEARCH_BRAVE_URL", fixtures.url("brave-ok"));
  const { startToolsService } = await import("@tack/tools-service");
  tools = await startToolsService({ natsUrl: NATS_URL, namespace });
  gateway = await startGateway({
    natsUrl: NATS_URL, namespace, port: 0, sqlitePath: join(dir, "index.db"),
    apiKeys: [{ key: ADMIN, tenant: "acme" }, { key: MEMBER, tenant: "acme", role: "member" }],
    operator: compileOperatorConfig({ tenants: { acme: { workspace_roots: [dir] } } }, { stateDir: join(dir, "state"), baseDir: dir, source: undefined }),
  });
});

afterAll(async () => {
  await gateway?.stop();
  await tools?.stop();
  await fixtures?.close();
  vi.unstubAllEnvs();
  rmSync(dir, { recursive: true, force: true });
});

async function health(query = "", key: string | null = MEMBER) {
  const res = await fetch(`${gateway.url}/v1/web/search/health${query}`, { headers: key ? { authorization: `Bearer ${key}` } : {} });
  const text = await res.text();
  return { status: res.status, text, json: JSON.parse(text) as Record<string, unknown> & { providers: Record<string, unknown>[] } };
}

describe("web search health", () => {
  it("web search health - each provider's state as the tools service sees it: DeepSeek without a key, Brave configured, selected and probed", async () => {
    const res = await health();
    expect(res.status, res.text).toBe(200);
    expect(res.json).toEqual({
      selected: "brave",
      selection_error: null,
      providers: [
        {
          id: "deepseek", name: "DeepSeek web search", configured: false, selected: false, healthy: false, checked_at: expect.any(String),
          detail: "no key: set DEEPSEEK_API_KEY (or deepseek.api_key in ~/.tack/credentials.yaml, as for the llm service)",
        },
        { id: "brave", name: "Brave Search", configured: true, selected: true, healthy: true, detail: "probe: HTTP 200, search answered", checked_at: expect.any(String) },
      ],
    });
    const checkedAt = Date.parse(res.json.providers[1]!.checked_at as string);
    expect(Math.abs(Date.now() - checkedAt)).toBeLessThan(60_000);
    expect(fixtures.seen).toHaveLength(1);
    expect(fixtures.seen[0]!.headers["x-subscription-token"]).toBe(BRAVE_KEY);
    expect(res.text).not.toContain(BRAVE_KEY);
    // Within the cache age the state is answered without a new probe.
    expect((await health()).json.providers[1]!.checked_at).toBe(res.json.providers[1]!.checked_at);
    expect(fixtures.seen).toHaveLength(1);
  });

  it("web search health - refresh=true probes again and needs an admin key; a refused key shows as unhealthy with the status, never the key", async () => {
    const member = await health("?refresh=true");
    expect(member.status).toBe(403);
    expect(member.json.error).toMatchObject({ code: "gateway.forbidden" });
    expect((member.json.error as { message: string }).message).toContain("needs an admin key");
    const before = fixtures.seen.length;
    expect((await health("?refresh=true", ADMIN)).status).toBe(200);
    expect(fixtures.seen.length).toBe(before + 1);

    // The key is rotated to one the provider refuses: read at the next probe, no restart.
    const bad = `bad-${BRAVE_KEY}`;
    vi.stubEnv("BRAVE_API_KEY", bad);
    const refused = await health("?refresh=1", ADMIN);
    expect(refused.status).toBe(200);
    expect(refused.json.providers[1]).toMatchObject({ id: "brave", configured: true, selected: true, healthy: false });
    expect(refused.json.providers[1]!.detail).toMatch(/^probe: Brave Search answered HTTP 401: SUBSCRIPTION_TOKEN_INVALID: .*The key from env:BRAVE_API_KEY was refused/);
    expect(fixtures.seen.at(-1)!.headers["x-subscription-token"]).toBe(bad);
    expect(refused.text).not.toContain(BRAVE_KEY);
    vi.stubEnv("BRAVE_API_KEY", BRAVE_KEY);
  });

  it("web search health - needs a key like every API route", async () => {
    const res = await health("", null);
    expect(res.status).toBe(401);
  });

  it("web search health - without a tools service the gateway answers 503", async () => {
    await tools!.stop();
    tools = undefined;
    const res = await health();
    expect(res.status).toBe(503);
    expect(res.json.error).toMatchObject({ code: "bus.no_responders" });
  });
});
