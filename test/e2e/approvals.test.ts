// End to end: escalation and approval through every service process (the launcher `tack up`
// uses), the machine's NATS JetStream and real Docker sandboxes, decided over the HTTP API.
import { chownSync, existsSync, mkdtempSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Bus } from "@tack/bus";
import { removeNamespace, waitFor } from "@tack/testkit";
import { launch, type Launched } from "@tack/cli";
import { APPROVAL_TEXT } from "@tack/loop-service";

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const namespace = `e2e${randomBytes(4).toString("hex")}`;
const work = mkdtempSync(join(tmpdir(), "tack-e2e-approvals-"));
let tack: Launched;

/** An event as the gateway sends it: the payload sits under its case name (e.g. `toolResult`). */
type EventJson = { seq: number; type: string } & Record<string, Record<string, unknown> | undefined>;

function workspace(name: string): string {
  const dir = join(work, name);
  mkdirSync(dir, { recursive: true });
  if (process.getuid?.() === 0) chownSync(dir, 1000, 1000);
  return dir;
}

// The services' state directory; the llm service reads scripts only from its `scripts/` (and the bundled examples/).
const stateDir = join(work, "data");

/** A model that tries `touch x`, is denied, and retries once asking for workspace-write. */
function script(name: string): string {
  mkdirSync(join(stateDir, "scripts"), { recursive: true });
  const file = join(stateDir, "scripts", `${name}.json`);
  writeFileSync(file, JSON.stringify({ replies: [
    { tool_calls: [{ name: "bash", arguments: { command: "touch x" } }] },
    { tool_calls: [{ name: "bash", arguments: { command: "touch x", sandbox_permissions: "workspace-write", justification: "the user asked for the file x" } }] },
    { content: "Finished." },
  ] }));
  return file;
}

async function api(path: string, init: RequestInit & { json?: unknown } = {}): Promise<Response> {
  const headers: Record<string, string> = { authorization: `Bearer ${tack.apiKey}` };
  if (init.json !== undefined) headers["content-type"] = "application/json";
  return fetch(`${tack.gatewayUrl}${path}`, { ...init, headers, body: init.json === undefined ? init.body : JSON.stringify(init.json) });
}

async function events(id: string): Promise<EventJson[]> {
  const text = await (await api(`/v1/sessions/${id}/events?follow=0`)).text();
  return text.split("\n").filter((l) => l.startsWith("data: ")).map((l) => JSON.parse(l.slice(6)) as EventJson);
}

/** The session's log once `done` holds for it; a timeout names `what` and the event types read last. */
function logWhen(id: string, what: string, done: (e: EventJson[]) => boolean, timeoutMs = 60_000): Promise<EventJson[]> {
  return waitFor(`${what} in session ${id}`, async () => {
    const e = await events(id);
    if (done(e)) return e;
    throw new Error(`log so far: ${e.map((x) => x.type).join(", ")}`);
  }, { timeoutMs });
}

/** Starts a read-only session on a fresh workspace and runs the script up to the approval card. */
async function escalate(name: string): Promise<{ id: string; ws: string; log: EventJson[] }> {
  const ws = workspace(name);
  const created = await api("/v1/sessions", { method: "POST", json: { workspace: ws, model: `scripted:${script(name)}`, sandbox_mode: "read-only" } });
  expect(created.status, await created.clone().text()).toBe(201);
  const { id } = (await created.json()) as { id: string };
  expect((await api(`/v1/sessions/${id}/messages`, { method: "POST", json: { text: "create the file x" } })).status).toBe(202);
  const log = await logWhen(id, "an approval to be asked", (e) => e.some((x) => x.type === "approval/asked"));
  return { id, ws, log };
}

beforeAll(async () => {
  tack = await launch({ dataDir: stateDir, natsUrl: NATS_URL, namespace, env: { TACK_LEASE_TTL_MS: "2000", TACK_STATE_DIR: stateDir } });
}, 120_000);

afterAll(async () => {
  await tack?.stop();
  const bus = await Bus.connect({ url: NATS_URL, namespace, name: "e2e-cleanup" });
  await removeNamespace(bus.nc, namespace);
  await bus.close();
  rmSync(work, { recursive: true, force: true });
});

describe("approvals end to end", () => {
  it("e2e - denied in read-only, escalated, allowed once over the API: the file exists on the host", async () => {
    const { id, ws, log } = await escalate("allow");
    const denied = log.find((e) => e.type === "tool/result")!.toolResult!;
    expect(denied.isError).toBe(true);
    expect(String(denied.content).split("\n").slice(-2)).toEqual([
      "Denied: sandbox mode read-only does not allow writing files.",
      'To run it anyway, retry this exact call once with "sandbox_permissions": "workspace-write" and a "justification" saying why; the user will be asked to approve it.',
    ]);
    expect(String(denied.content)).toContain("Read-only file system");
    expect(log.find((e) => e.type === "approval/asked")!.approvalAsked).toMatchObject({
      callId: "call_1_0", toolName: "bash", operation: "touch x", currentMode: "read-only", requestedMode: "workspace-write", justification: "the user asked for the file x",
    });
    expect(existsSync(join(ws, "x"))).toBe(false);

    const decided = await api(`/v1/sessions/${id}/approvals/call_1_0`, { method: "POST", json: { decision: "allow_once" } });
    expect(decided.status, await decided.clone().text()).toBe(200);
    const done = await logWhen(id, "the turn to end", (e) => e.some((x) => x.type === "turn/end"));
    expect(done.find((e) => e.type === "approval/decided")!.approvalDecided).toMatchObject({ callId: "call_1_0", decision: "allow_once" });
    const result = done.filter((e) => e.type === "tool/result").at(-1)!.toolResult!;
    // The gateway's JSON leaves out proto3 defaults, so a successful result has no isError.
    expect(result).toEqual({ callId: "call_1_0", name: "bash", content: `${APPROVAL_TEXT.allowedOnce("workspace-write", "read-only")}\nexit code: 0`, durationMs: expect.any(Number) });
    expect(existsSync(join(ws, "x"))).toBe(true);
    expect(done.at(-1)!.turnEnd).toMatchObject({ reason: "completed" });
    // A decision arrives once: the second answer finds nothing pending.
    const again = await api(`/v1/sessions/${id}/approvals/call_1_0`, { method: "POST", json: { decision: "allow_once" } });
    expect(again.status).toBe(404);
  });

  it("e2e - denied in read-only, escalated, rejected over the API: the command never runs", async () => {
    const { id, ws } = await escalate("reject");
    const decided = await api(`/v1/sessions/${id}/approvals/call_1_0`, { method: "POST", json: { decision: "reject" } });
    expect(decided.status, await decided.clone().text()).toBe(200);
    const done = await logWhen(id, "the turn to end", (e) => e.some((x) => x.type === "turn/end"));
    const result = done.filter((e) => e.type === "tool/result").at(-1)!.toolResult!;
    expect(result).toMatchObject({ callId: "call_1_0", isError: true, content: APPROVAL_TEXT.rejected("workspace-write", "read-only") });
    expect(done.filter((e) => e.type === "tool/call").map((e) => e.toolCall!.callId)).toEqual(["call_0_0"]);
    expect(existsSync(join(ws, "x"))).toBe(false);
    expect(done.at(-1)!.turnEnd).toMatchObject({ reason: "completed" });
  });

  it("e2e - the loop is killed while an approval is pending: the decision still completes the turn", async () => {
    const { id, ws } = await escalate("restart");
    await tack.kill("loop", "SIGKILL");
    await tack.start("loop");
    const decided = await api(`/v1/sessions/${id}/approvals/call_1_0`, { method: "POST", json: { decision: "allow_once" } });
    expect(decided.status, await decided.clone().text()).toBe(200);
    const done = await logWhen(id, "the turn to end", (e) => e.some((x) => x.type === "turn/end"));
    expect(done.some((e) => e.type === "session/recovered")).toBe(true);
    expect(existsSync(join(ws, "x"))).toBe(true);
    expect(done.map((e) => e.seq)).toEqual(done.map((_, i) => i + 1));
    expect(done.at(-1)!.turnEnd).toMatchObject({ reason: "completed" });
  });
});
