// Who decided: a person's answer to a question, review of a plan and decision on an approval,
// made through the real gateway and loop with a named API key, are logged with that key's name
// and id (taken from the authenticated key, never from the request body) and listed in the
// tenant's audit trail with the key's name.
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readAll } from "@tack/log";
import type { Event } from "@tack/proto";
import { waitFor } from "@tack/testkit";
import { GatewayStack } from "./real-loop.js";

const KEY_ACME = `acme-${randomBytes(16).toString("hex")}`;
const KEY_GLOBEX = `globex-${randomBytes(16).toString("hex")}`;

let stack: GatewayStack;

beforeAll(async () => {
  stack = await GatewayStack.start({ name: "decided-by", keys: { acme: KEY_ACME, globex: KEY_GLOBEX } });
});

afterAll(async () => {
  await stack?.stop();
});

async function call(method: string, path: string, key: string, body?: unknown) {
  const headers: Record<string, string> = { authorization: `Bearer ${key}` };
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(`${stack.gateway.url}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- bodies of several shapes, each checked by the assertions that read them
  return { status: res.status, json: (text ? JSON.parse(text) : undefined) as any };
}

const events = (id: string) => readAll(stack.bus.nc, stack.bus.names, { tenant: "acme", sessionId: id });
const payloadOf = (event: Event | undefined) => (event?.payload as { value?: Record<string, unknown> } | undefined)?.value ?? {};

/** Waits for the session's `count`th event of `type`. */
async function logged(id: string, type: string, count = 1): Promise<Event> {
  return waitFor(`${type} #${count} in ${id}`, async () => (await events(id)).filter((e) => e.type === type)[count - 1], { timeoutMs: 15_000, intervalMs: 25 });
}

describe("who decided", () => {
  it("decided by - a question, a plan and an approval decided with a key named alice: each logged event and audit record names alice and her key id, not only the tenant", async () => {
    const created = await call("POST", "/v1/admin/keys", KEY_ACME, { name: "alice", role: "member" });
    expect(created.status, JSON.stringify(created.json)).toBe(201);
    const alice = created.json as { key: string; id: string };

    const model = stack.loop.script("decisions", [
      { tool_calls: [{ name: "ask_user_question", arguments: { questions: [{ header: "Runtime", question: "Which runtime?", options: [{ label: "node" }, { label: "deno" }] }] } }] },
      { tool_calls: [{ name: "exit_plan_mode", arguments: { plan: "1. touch x" } }] },
      { tool_calls: [{ name: "bash", arguments: { command: "touch x", sandbox_permissions: "workspace-write", justification: "the plan" } }] },
      { content: "done" },
    ]);
    const session = await call("POST", "/v1/sessions", alice.key, { workspace: stack.workspace, model, sandbox_mode: "read-only", plan_mode: true });
    expect(session.status, JSON.stringify(session.json)).toBe(201);
    const id = session.json.id as string;
    expect((await call("POST", `/v1/sessions/${id}/messages`, alice.key, { text: "go" })).status).toBe(202);

    // The body cannot say who decided: the contract has no such field and refuses one.
    await logged(id, "question/asked");
    const spoofed = await call("POST", `/v1/sessions/${id}/questions/call_0_0`, alice.key, { answers: [{ selected: ["node"] }], decided_by_key: "mallory" });
    expect(spoofed.status).toBe(400);
    const answered = await call("POST", `/v1/sessions/${id}/questions/call_0_0`, alice.key, { answers: [{ selected: ["node"] }] });
    expect(answered.status, JSON.stringify(answered.json)).toBe(200);

    await logged(id, "plan/submitted");
    const planned = await call("POST", `/v1/sessions/${id}/plan`, alice.key, { approve: true });
    expect(planned.status, JSON.stringify(planned.json)).toBe(200);

    await logged(id, "approval/asked");
    const approved = await call("POST", `/v1/sessions/${id}/approvals/call_2_0`, alice.key, { decision: "allow_once" });
    expect(approved.status, JSON.stringify(approved.json)).toBe(200);
    await stack.loop.idle("acme", id);

    const log = await events(id);
    const question = log.find((e) => e.type === "question/answered");
    const plan = log.find((e) => e.type === "plan/decided");
    const approval = log.find((e) => e.type === "approval/decided");
    expect([question?.seq, plan?.seq, approval?.seq]).toEqual([answered.json.seq, planned.json.seq, approved.json.seq]);
    expect(payloadOf(question)).toMatchObject({ outcome: "answered", answeredBy: "acme", answeredByKey: "alice", answeredByKeyId: alice.id });
    expect(payloadOf(plan)).toMatchObject({ decision: "approve", decidedBy: "acme", decidedByKey: "alice", decidedByKeyId: alice.id });
    expect(payloadOf(approval)).toMatchObject({ decision: "allow_once", decidedBy: "acme", decidedByKey: "alice", decidedByKeyId: alice.id });

    // The audit list (any key of the tenant) shows each decision with the key's name and id.
    const audit = await call("GET", "/v1/audit", KEY_ACME);
    expect(audit.status).toBe(200);
    const decisions = (audit.json.records as Record<string, unknown>[]).filter((r) => r.session_id === id);
    expect(decisions).toEqual([
      expect.objectContaining({ actor: "api_key", key_id: alice.id, key_name: "alice", action: "approval.decide", details: { call_id: "call_2_0", decision: "allow_once", seq: approved.json.seq } }),
      expect.objectContaining({ actor: "api_key", key_id: alice.id, key_name: "alice", action: "plan.decide", details: { call_id: "", decision: "approve", seq: planned.json.seq } }),
      expect.objectContaining({ actor: "api_key", key_id: alice.id, key_name: "alice", action: "question.answer", details: { call_id: "call_0_0", seq: answered.json.seq } }),
    ]);
    // Another tenant's audit list does not show them.
    expect(((await call("GET", "/v1/audit", KEY_GLOBEX)).json.records as unknown[]).length).toBe(0);
  }, 60_000);
});
