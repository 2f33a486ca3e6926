// Session deletion and retention against real services: NATS JetStream, the loop, the tools
// service and the sandbox service with real Docker containers, driven through the gateway's
// HTTP API with two tenants' keys. The model is scripted on the bus (as in the loop's tests),
// so a turn can be held open to test the refusal while it runs.
import { execFileSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { chownSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { Base64UrlPaddedCodec } from "@nats-io/obj";
import { Bus, LlmRpc, SandboxRpc } from "@tack/bus";
import { compileOperatorConfig, type OperatorConfig } from "@tack/config";
import { startGateway, type Gateway } from "@tack/gateway-service";
import { ensureLogStream, readAll, SpillBucket } from "@tack/log";
import { startLoopService, type LoopService } from "@tack/loop-service";
import { Delta_Kind, Role, type ToolCall } from "@tack/proto";
import { startSandboxService, type SandboxService } from "@tack/sandbox-service";
import { removeNamespace, waitFor } from "@tack/testkit";
import { startToolsService, type ToolsService } from "@tack/tools-service";

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const namespace = `del${randomBytes(4).toString("hex")}`;
const KEY_ACME = `acme-${randomBytes(16).toString("hex")}`;
const KEY_GLOBEX = `globex-${randomBytes(16).toString("hex")}`;
const DAY_MS = 86_400_000;
const LOG_MAX_BYTES = 256 * 1024 * 1024;
const LOG_MAX_AGE_DAYS = 30;

const work = mkdtempSync(join(tmpdir(), "tack-deletion-"));
const workspace = join(work, "project");
let bus: Bus;
let jsm: JetStreamManager;
let sandbox: SandboxService;
let tools: ToolsService;
let loop: LoopService;
let gateway: Gateway;
let retentionGateway: Gateway | undefined;

/** Model replies by the number of assistant messages so far; a session's gate holds its replies until opened. */
const replies = [
  { content: "Counting.", calls: [{ name: "bash", args: { command: "seq 1 3000" } }] },
  { content: "Done." },
];
const gates = new Map<string, Promise<void>>();

function operator(retention: Record<string, number> = {}): OperatorConfig {
  const tenants = { acme: { workspace_roots: [work] }, globex: { workspace_roots: [work] } };
  return compileOperatorConfig({ tenants, retention }, { stateDir: join(work, "state"), baseDir: work, source: undefined });
}

beforeAll(async () => {
  mkdirSync(workspace);
  if (process.getuid?.() === 0) chownSync(workspace, 1000, 1000);
  bus = await Bus.connect({ url: NATS_URL, namespace, name: "deletion-test" });
  jsm = await jetstreamManager(bus.nc);
  // The stream exists without limits before the loop starts: the loop must update it.
  await ensureLogStream(bus.nc, bus.names);
  bus.serve(LlmRpc.Complete, async (req, w) => {
    await gates.get(req.sessionId);
    const n = req.messages.filter((m) => m.role === Role.ROLE_ASSISTANT).length;
    const reply = replies[n] ?? { content: "Done." };
    const toolCalls: ToolCall[] = (reply.calls ?? []).map((c, i) => ({ id: `call_${n}_${i}`, name: c.name, arguments: JSON.stringify(c.args) }));
    w.send({ index: 0, body: { $case: "delta", value: { kind: Delta_Kind.KIND_TEXT, text: reply.content, toolIndex: 0, toolCallId: "", toolName: "" } } });
    w.send({ index: 1, body: { $case: "done", value: {
      content: reply.content, reasoningContent: "", toolCalls, finishReason: toolCalls.length ? "tool_calls" : "stop",
      usage: { inputMissTokens: 10, inputHitTokens: 0, outputTokens: 2, reasoningTokens: 0 }, model: "scripted", costUsd: 0, priceWindow: "",
    } } });
  });
  bus.serve(LlmRpc.CheckModel, async () => ({ provider: "scripted" }));
  bus.serve(LlmRpc.EstimateCost, async () => ({ costUsd: 0, priceWindow: "standard" }));
  // No warm pool: every container is created for its session and carries the session label.
  sandbox = await startSandboxService({ natsUrl: NATS_URL, namespace, poolSize: 0 });
  tools = await startToolsService({ natsUrl: NATS_URL, namespace });
  // Results over 1,000 bytes are spilled to the object store.
  loop = await startLoopService({ natsUrl: NATS_URL, namespace, leaseTtlMs: 2_000, spillBytes: 1_000, logMaxBytes: LOG_MAX_BYTES, logMaxAgeDays: LOG_MAX_AGE_DAYS });
  gateway = await startGateway({
    natsUrl: NATS_URL, namespace, port: 0, sqlitePath: join(work, "index.db"), operator: operator(),
    apiKeys: [{ key: KEY_ACME, tenant: "acme" }, { key: KEY_GLOBEX, tenant: "globex" }],
  });
}, 120_000);

afterAll(async () => {
  await retentionGateway?.stop();
  await gateway?.stop();
  await loop?.stop();
  await tools?.stop();
  await sandbox?.stop({ removeContainers: true });
  await removeNamespace(bus.nc, namespace);
  await bus.close();
  rmSync(work, { recursive: true, force: true });
});

async function call(target: Gateway, method: string, path: string, key: string, body?: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const headers: Record<string, string> = { authorization: `Bearer ${key}` };
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(`${target.url}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, json: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
}

async function createSession(target: Gateway, key = KEY_ACME): Promise<string> {
  const r = await call(target, "POST", "/v1/sessions", key, { workspace, model: "scripted:deletion" });
  expect(r.status, JSON.stringify(r.json)).toBe(201);
  return r.json.id as string;
}

/** The event types of a session's log once `done` holds for them; a timeout names `what` and the types read last. */
function waitForLog(sessionId: string, what: string, done: (types: string[]) => boolean, timeoutMs = 60_000): Promise<string[]> {
  return waitFor(`${what} in session ${sessionId}`, async () => {
    const types = (await readAll(bus.nc, bus.names, { tenant: "acme", sessionId })).map((e) => e.payload?.$case ?? "");
    if (done(types)) return types;
    throw new Error(`log so far: ${types.join(", ")}`);
  }, { timeoutMs });
}

/** Runs one turn (a bash call whose result is spilled, then a final answer) to its end. */
async function runTurn(target: Gateway, sessionId: string): Promise<void> {
  const posted = await call(target, "POST", `/v1/sessions/${sessionId}/messages`, KEY_ACME, { text: "count to 3000" });
  expect(posted.status, JSON.stringify(posted.json)).toBe(202);
  await waitForLog(sessionId, "the turn to end", (types) => types.includes("turnEnd"));
}

/** Messages stored on the session's log subject. */
async function logMessages(sessionId: string): Promise<number> {
  const subject = bus.names.logSubject("acme", sessionId);
  const info = await jsm.streams.info(bus.names.logStream, { subjects_filter: subject });
  return info.state.subjects?.[subject] ?? 0;
}

/** Containers of the session, found by label and by name (any state). */
function containers(sessionId: string): { byLabel: string[]; byName: string[] } {
  const list = (filter: string) => execFileSync("docker", ["ps", "-aq", "--filter", filter]).toString().split("\n").filter(Boolean);
  return { byLabel: list(`label=tack.session=${sessionId}`), byName: list(`name=^tack-${namespace}-${sessionId}\\.`) };
}

/** Subjects of a stream that name the session (a KV key, an object name) — the traces a deletion must not leave. */
async function tracesIn(stream: string, sessionId: string, decode: (subject: string) => string = (s) => s): Promise<string[]> {
  const info = await jsm.streams.info(stream, { subjects_filter: ">" }).catch(() => undefined);
  return Object.keys(info?.state.subjects ?? {}).map(decode).filter((s) => s.includes(sessionId));
}

const spillStream = () => `OBJ_${bus.names.spillBucket}`;
const spillName = (subject: string) => {
  const meta = `$O.${bus.names.spillBucket}.M.`;
  return subject.startsWith(meta) ? String(Base64UrlPaddedCodec.decode(subject.slice(meta.length))) : subject;
};

describe("session deletion", () => {
  it("deletion - DELETE removes the log, spilled results, every sandbox, the lease and the index row, and is audited; another tenant's key changes nothing", async () => {
    const id = await createSession(gateway);
    await runTurn(gateway, id);
    // A second container, of another mode: deletion releases every mode.
    await bus.request(SandboxRpc.EnsureSandbox, { sessionId: id, tenant: "acme", workspace, mode: "read-only" }, { timeoutMs: 60_000 });
    const spills = (await SpillBucket.open(bus.nc, bus.names))!;
    const messages = await logMessages(id);
    expect(messages).toBeGreaterThan(8);
    expect(await spills.get({ tenant: "acme", sessionId: id }, "call_0_0")).toBeDefined();
    expect(containers(id).byLabel).toHaveLength(2);

    // Another tenant's key: 404, as for a session that does not exist, and nothing changes.
    const foreign = await call(gateway, "DELETE", `/v1/sessions/${id}`, KEY_GLOBEX);
    expect(foreign.status).toBe(404);
    expect((foreign.json.error as { code: string }).code).toBe("gateway.session_not_found");
    expect(await logMessages(id)).toBe(messages);
    expect(await spills.get({ tenant: "acme", sessionId: id }, "call_0_0")).toBeDefined();
    expect(containers(id).byLabel).toHaveLength(2);
    expect((await call(gateway, "GET", `/v1/sessions/${id}`, KEY_ACME)).status).toBe(200);
    expect((await call(gateway, "GET", "/v1/audit", KEY_GLOBEX)).json.records).toEqual([]);
    expect((await call(gateway, "GET", "/v1/audit", KEY_ACME)).json.records).toEqual([]);

    const deleted = await call(gateway, "DELETE", `/v1/sessions/${id}`, KEY_ACME);
    expect(deleted.status, JSON.stringify(deleted.json)).toBe(200);
    expect(deleted.json).toMatchObject({ id, deleted: true, removed: { log_messages: messages, spill_objects: 1, sandboxes: true } });

    expect(await logMessages(id)).toBe(0);
    expect(await spills.get({ tenant: "acme", sessionId: id }, "call_0_0")).toBeUndefined();
    expect(await tracesIn(spillStream(), id, spillName)).toEqual([]);
    expect(containers(id)).toEqual({ byLabel: [], byName: [] });
    expect(await tracesIn(`KV_${bus.names.leaseBucket}`, id)).toEqual([]);
    expect(await tracesIn(`KV_${bus.names.sandboxBucket}`, id)).toEqual([]);
    expect((await call(gateway, "GET", `/v1/sessions/${id}`, KEY_ACME)).status).toBe(404);
    expect((await call(gateway, "DELETE", `/v1/sessions/${id}`, KEY_ACME)).status).toBe(404);

    const audit = await call(gateway, "GET", "/v1/audit", KEY_ACME);
    expect(audit.status).toBe(200);
    const records = audit.json.records as Array<Record<string, unknown>>;
    expect(records).toHaveLength(1);
    const keyId = createHash("sha256").update(KEY_ACME).digest("hex").slice(0, 12);
    expect(records[0]).toMatchObject({ actor: "api_key", key_id: keyId, action: "session.delete", session_id: id, details: { log_messages: messages, spill_objects: 1, sandboxes_removed: true } });
    expect(Date.now() - Date.parse(records[0]!.at as string)).toBeLessThan(60_000);
    expect(JSON.stringify(records)).not.toContain(KEY_ACME);
    expect((await call(gateway, "GET", "/v1/audit", KEY_GLOBEX)).json.records).toEqual([]);
  }, 120_000);

  it("deletion - refused with 409 gateway.session_busy while a turn runs, nothing removed; succeeds once the turn ended", async () => {
    const id = await createSession(gateway);
    let open!: () => void;
    gates.set(id, new Promise<void>((resolve) => { open = resolve; }));
    const posted = await call(gateway, "POST", `/v1/sessions/${id}/messages`, KEY_ACME, { text: "count to 3000" });
    expect(posted.status).toBe(202);
    // The model call is held: the turn is running.
    await waitForLog(id, "the first step", (types) => types.includes("stepStart"));
    const before = await logMessages(id);
    const refused = await call(gateway, "DELETE", `/v1/sessions/${id}`, KEY_ACME);
    expect(refused.status, JSON.stringify(refused.json)).toBe(409);
    expect((refused.json.error as { code: string }).code).toBe("gateway.session_busy");
    expect(await logMessages(id)).toBe(before);
    expect((await call(gateway, "GET", `/v1/sessions/${id}`, KEY_ACME)).status).toBe(200);
    open();
    await waitForLog(id, "the turn to end", (types) => types.includes("turnEnd"));
    const deleted = await call(gateway, "DELETE", `/v1/sessions/${id}`, KEY_ACME);
    expect(deleted.status, JSON.stringify(deleted.json)).toBe(200);
    expect(await logMessages(id)).toBe(0);
    expect(containers(id)).toEqual({ byLabel: [], byName: [] });
  }, 120_000);

  it("retention - a sweep deletes a session idle past the maximum age (audited as retention) and keeps a fresh one", async () => {
    const maxAgeMs = 4_000;
    // A second gateway with its own index, so that its sweep sees only its own sessions.
    retentionGateway = await startGateway({
      natsUrl: NATS_URL, namespace, port: 0, sqlitePath: join(work, "retention.db"),
      operator: operator({ session_max_age_days: maxAgeMs / DAY_MS, sweep_interval_minutes: 250 / 60_000 }),
      apiKeys: [{ key: KEY_ACME, tenant: "acme" }, { key: KEY_GLOBEX, tenant: "globex" }],
    });
    const sweeping = retentionGateway;
    const old = await createSession(retentionGateway);
    await runTurn(retentionGateway, old);
    const turnEndedAt = Date.now();
    await waitFor("the retention sweep to delete the idle session", async () => (await call(sweeping, "GET", `/v1/sessions/${old}`, KEY_ACME)).status === 404);
    // Idle is counted from the last log event, not only from the index's last API call.
    expect(Date.now() - turnEndedAt).toBeGreaterThanOrEqual(maxAgeMs - 500);
    const fresh = await createSession(retentionGateway);
    // Several sweeps (every 250 ms) run while its log is watched (not through the API, which would count as activity);
    // the fresh session is far younger than the maximum age, so waiting for its deletion must time out.
    await expect(waitFor("the fresh session's log to be purged", async () => (await logMessages(fresh)) === 0, { timeoutMs: 1_500 }))
      .rejects.toMatchObject({ code: "testkit.timeout" });
    expect((await call(retentionGateway, "GET", `/v1/sessions/${fresh}`, KEY_ACME)).status).toBe(200);
    expect(await logMessages(fresh)).toBeGreaterThan(0);
    expect(await logMessages(old)).toBe(0);
    expect(containers(old)).toEqual({ byLabel: [], byName: [] });
    const records = (await call(retentionGateway, "GET", "/v1/audit", KEY_ACME)).json.records as Array<Record<string, unknown>>;
    expect(records).toHaveLength(1);
    expect(records[0]).toMatchObject({ actor: "retention", key_id: null, action: "session.delete", session_id: old });
    await retentionGateway.stop();
    retentionGateway = undefined;
  }, 120_000);

  it("retention - the log stream gets max_bytes / max_age from the loop's configuration, also when it already existed, and updates to new limits", async () => {
    const info = await jsm.streams.info(bus.names.logStream);
    expect(info.config.max_bytes).toBe(LOG_MAX_BYTES);
    expect(info.config.max_age).toBe(LOG_MAX_AGE_DAYS * DAY_MS * 1_000_000);
    // New limits replace the old ones; an absent limit is lifted.
    await ensureLogStream(bus.nc, bus.names, { limits: { maxBytes: LOG_MAX_BYTES / 2 } });
    const updated = await jsm.streams.info(bus.names.logStream);
    expect(updated.config.max_bytes).toBe(LOG_MAX_BYTES / 2);
    expect(updated.config.max_age).toBe(0);
    // Without limits the stream's are kept.
    await ensureLogStream(bus.nc, bus.names);
    expect((await jsm.streams.info(bus.names.logStream)).config.max_bytes).toBe(LOG_MAX_BYTES / 2);
    await expect(ensureLogStream(bus.nc, bus.names, { limits: { maxAgeMs: 1_000 } })).rejects.toThrow(/dedup window/);
  });
});
