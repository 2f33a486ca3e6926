import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const MAIN = join(import.meta.dirname, "../src/main.ts");
const dir = mkdtempSync(join(tmpdir(), "tack-gateway-main-"));

afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Starts the gateway process; resolves once it printed `listening` or exited. */
function run(env: Record<string, string>) {
  const child = spawn(process.execPath, ["--import", "tsx", MAIN], {
    env: { PATH: process.env.PATH, NATS_URL, TACK_NAMESPACE: `t${randomBytes(5).toString("hex")}`, ...env },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  const ready = new Promise<void>((resolve) => {
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
      stderr += chunk;
      if (stderr.includes('"msg":"listening"')) resolve();
    });
  });
  return { child, exited, ready, stderr: () => stderr };
}

describe("gateway main", () => {
  it("main - refuses to start without TACK_API_KEY and says how to fix it", async () => {
    const p = run({ TACK_DB: join(dir, "a", "tack.db") });
    expect(await p.exited).toBe(1);
    const failure = p.stderr().trimEnd().split("\n").map((line) => JSON.parse(line) as Record<string, unknown>).at(-1);
    expect(failure).toMatchObject({ level: "error", component: "gateway", msg: "start-up failed", code: "config.invalid", error: expect.stringContaining("TACK_API_KEY is not set") });
  });

  it("main - starts from the environment, creates the index folder and stops on SIGTERM", async () => {
    const port = 20_000 + Math.floor(Math.random() * 20_000);
    const db = join(dir, "b", "nested", "tack.db");
    const p = run({ TACK_API_KEY: "k", TACK_DB: db, TACK_GATEWAY_PORT: String(port) });
    await Promise.race([p.ready, p.exited.then(() => { throw new Error(`gateway exited: ${p.stderr()}`); })]);
    expect(existsSync(db)).toBe(true);
    const health = await fetch(`http://127.0.0.1:${port}/healthz`);
    expect(health.status).toBe(200);
    const sessions = await fetch(`http://127.0.0.1:${port}/v1/sessions`, { headers: { authorization: "Bearer k" } });
    expect(await sessions.json()).toEqual({ sessions: [], limit: 50, offset: 0 });
    p.child.kill("SIGTERM");
    expect(await p.exited).toBe(0);
  });
});
