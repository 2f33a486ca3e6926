// The gateway process with TACK_DB naming PostgreSQL: it starts on a reachable database, and a
// bad URL or an unreachable server ends it before it listens, with one line saying what and how.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createServer } from "node:net";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "./postgres.js";

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const MAIN = join(import.meta.dirname, "../src/main.ts");

let database: TestDatabase;
let dir: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "tack-gateway-main-pg-"));
  database = await createTestDatabase("main");
});

afterAll(async () => {
  await database?.drop();
  rmSync(dir, { recursive: true, force: true });
});

/** Starts the gateway process; resolves once it printed `listening` or exited. */
function run(env: Record<string, string>) {
  const child = spawn(process.execPath, ["--import", "tsx", MAIN], {
    env: { PATH: process.env.PATH, NATS_URL, TACK_NAMESPACE: `t${randomBytes(5).toString("hex")}`, TACK_API_KEY: "k", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  const ready = new Promise<void>((resolve) => {
    const take = (chunk: string) => {
      output += chunk;
      if (output.includes('"msg":"listening"')) resolve();
    };
    child.stdout.setEncoding("utf8").on("data", take);
    child.stderr.setEncoding("utf8").on("data", take);
  });
  return { child, exited, ready, output: () => output };
}

/** Runs the gateway expecting it to fail at start; returns its output's lines. */
async function failure(env: Record<string, string>): Promise<string[]> {
  const p = run(env);
  expect(await p.exited).toBe(1);
  const lines = p.output().trimEnd().split("\n");
  expect(p.output()).not.toContain('"msg":"listening"');
  return lines;
}

describe("gateway main on PostgreSQL", () => {
  it("main - starts on TACK_DB=postgres://… with TACK_DB_PASSWORD_FILE, serves, and logs the URL without the password", async () => {
    const port = 20_000 + Math.floor(Math.random() * 20_000);
    // Trust auth takes any password: the point is that it is sent and never shown.
    const passwordFile = join(dir, "postgres-password");
    writeFileSync(passwordFile, "not-checked-by-trust-auth\n", { mode: 0o600 });
    const p = run({ TACK_DB: database.url, TACK_DB_PASSWORD_FILE: passwordFile, TACK_GATEWAY_PORT: String(port) });
    await Promise.race([p.ready, p.exited.then(() => { throw new Error(`gateway exited: ${p.output()}`); })]);
    const health = await fetch(`http://127.0.0.1:${port}/healthz`);
    expect(health.status).toBe(200);
    const sessions = await fetch(`http://127.0.0.1:${port}/v1/sessions`, { headers: { authorization: "Bearer k" } });
    expect(await sessions.json()).toEqual({ sessions: [], limit: 50, offset: 0 });
    const listening = p.output().split("\n").find((line) => line.includes('"msg":"listening"'))!;
    expect(JSON.parse(listening).database).toBe(database.url.replace("postgres@", "postgres:***@"));
    expect(p.output()).not.toContain("not-checked-by-trust-auth");
    p.child.kill("SIGTERM");
    expect(await p.exited).toBe(0);
  });

  it("main - a bad TACK_DB URL ends the process before it connects anywhere, in one line", async () => {
    const lines = await failure({ TACK_DB: "postgres://tack:hunter2@db.example:5432", NATS_URL: "nats://127.0.0.1:1" });
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0]!)).toEqual(expect.objectContaining({
      level: "error", msg: "start-up failed", code: "config.invalid",
      error: "TACK_DB: postgres://tack:***@db.example:5432 names no database (or more than one path segment); end it with /DATABASE, as in postgres://USER:PASSWORD@HOST:5432/DATABASE",
    }));
  });

  it("main - an unreachable PostgreSQL ends the process before it listens, in one line with the fix", async () => {
    const port = await closedPort();
    const lines = await failure({ TACK_DB: `postgres://postgres@127.0.0.1:${port}/tack` });
    expect(lines).toHaveLength(1);
    const line = JSON.parse(lines[0]!) as Record<string, unknown>;
    expect(line).toMatchObject({ level: "error", msg: "start-up failed", code: "gateway.database_unavailable" });
    expect(line.error).toBe(`cannot reach the session index's PostgreSQL at 127.0.0.1:${port} (TACK_DB=postgres://postgres@127.0.0.1:${port}/tack): ECONNREFUSED; start PostgreSQL or correct the host and port in TACK_DB`);
    // No stack: the message is the whole story.
    expect(lines[0]).not.toContain("\\n");
  });
});

/** A loopback port nothing listens on. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
