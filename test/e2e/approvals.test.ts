// End to end: escalation and approval through every service process (the launcher `tack up`
// uses), the machine's NATS JetStream and real Docker sandboxes, decided over the HTTP API.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { APPROVAL_TEXT } from "@tack/loop-service";
import { ApiStack, type EventJson } from "./support/api-stack.js";

let stack: ApiStack;
const workspace = (name: string) => stack.workspace(name);
const api = (path: string, init?: RequestInit & { json?: unknown }) => stack.api(path, init);
const logWhen = (id: string, what: string, done: (e: EventJson[]) => boolean) => stack.logWhen(id, what, done);

/** A model that tries `touch x`, is denied, and retries once asking for workspace-write. */
const script = (name: string) => stack.script(name, [
  { tool_calls: [{ name: "bash", arguments: { command: "touch x" } }] },
  { tool_calls: [{ name: "bash", arguments: { command: "touch x", sandbox_permissions: "workspace-write", justification: "the user asked for the file x" } }] },
  { content: "Finished." },
]);

/** Starts a read-only session on a fresh workspace and runs the script up to the approval card. */
async function escalate(name: string): Promise<{ id: string; ws: string; log: EventJson[] }> {
  const ws = workspace(name);
  const created = await api("/v1/sessions", { method: "POST", json: { workspace: ws, model: script(name), sandbox_mode: "read-only" } });
  expect(created.status, await created.clone().text()).toBe(201);
  const { id } = (await created.json()) as { id: string };
  expect((await api(`/v1/sessions/${id}/messages`, { method: "POST", json: { text: "create the file x" } })).status).toBe(202);
  const log = await logWhen(id, "an approval to be asked", (e) => e.some((x) => x.type === "approval/asked"));
  return { id, ws, log };
}

beforeAll(async () => {
  stack = await ApiStack.launch("approvals");
}, 120_000);

afterAll(() => stack?.stop());

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
    await stack.tack.kill("loop", "SIGKILL");
    await stack.tack.start("loop");
    const decided = await api(`/v1/sessions/${id}/approvals/call_1_0`, { method: "POST", json: { decision: "allow_once" } });
    expect(decided.status, await decided.clone().text()).toBe(200);
    const done = await logWhen(id, "the turn to end", (e) => e.some((x) => x.type === "turn/end"));
    expect(done.some((e) => e.type === "session/recovered")).toBe(true);
    expect(existsSync(join(ws, "x"))).toBe(true);
    expect(done.map((e) => e.seq)).toEqual(done.map((_, i) => i + 1));
    expect(done.at(-1)!.turnEnd).toMatchObject({ reason: "completed" });
  });
});
