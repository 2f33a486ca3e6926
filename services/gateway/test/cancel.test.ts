// CancelTurn, ForkSession and ImportSession against the real services (the launcher `tack up` uses, real Docker sandboxes): a
// scripted turn whose bash call sleeps is cancelled over the API while the call runs; the call
// finishes, and the turn ends with `turn/end` reason `cancelled` instead of taking its next step.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiStack } from "../../../test/e2e/support/api-stack.js";

let stack: ApiStack;

beforeAll(async () => {
  stack = await ApiStack.launch("cancel");
}, 180_000);

afterAll(() => stack?.stop());

describe("cancel", () => {
  it("cancel - a running turn ends with reason cancelled at its next step boundary; an idle session has nothing to cancel", async () => {
    const model = stack.script("slow", [
      { tool_calls: [{ name: "bash", arguments: { command: "sleep 3; echo slept" } }] },
      { content: "this step must not be taken" },
    ]);
    const id = await stack.session(stack.workspace("slow"), model);
    const idle = await stack.json("POST", `/v1/sessions/${id}/cancel`);
    expect(idle).toEqual({ status: 200, body: { cancelled: false, turn: 0 } });

    expect((await stack.json("POST", `/v1/sessions/${id}/messages`, { text: "sleep a while" })).status).toBe(202);
    await stack.logWhen(id, "the bash call to start", (e) => e.some((x) => x.type === "tool/call"));
    const cancelled = await stack.json("POST", `/v1/sessions/${id}/cancel`);
    expect(cancelled).toEqual({ status: 200, body: { cancelled: true, turn: 1 } });

    const log = await stack.logWhen(id, "the turn to end", (e) => e.some((x) => x.type === "turn/end"));
    const end = log.find((e) => e.type === "turn/end") as unknown as { turnEnd: { turn: number; reason: string } };
    expect(end.turnEnd).toMatchObject({ turn: 1, reason: "cancelled" });
    // The call that was running finished; no later step asked the model again.
    const result = log.find((e) => e.type === "tool/result") as unknown as { toolResult: { content: string } };
    expect(result.toolResult.content).toContain("slept");
    expect(log.filter((e) => e.type === "assistant/message")).toHaveLength(1);
    expect(JSON.stringify(log)).not.toContain("this step must not be taken");

    const after = await stack.json("POST", `/v1/sessions/${id}/cancel`);
    expect(after).toEqual({ status: 200, body: { cancelled: false, turn: 0 } });
    const foreign = await stack.json("POST", "/v1/sessions/nope/cancel");
    expect(foreign.status).toBe(404);
  }, 120_000);

  it("fork and import - a new session copies the log up to a turn's end, written by the loop; a bundle imports into a new session; nothing runs again", async () => {
    const model = stack.script("two-turns", [
      { tool_calls: [{ name: "bash", arguments: { command: "echo one >> ran.txt; echo one" } }] },
      { content: "first done" },
      { content: "second done" },
    ]);
    const ws = stack.workspace("copied");
    const id = await stack.session(ws, model);
    expect((await stack.json("POST", `/v1/sessions/${id}/messages`, { text: "turn one" })).status).toBe(202);
    await stack.logWhen(id, "turn 1 to end", (e) => e.some((x) => x.type === "turn/end"));
    expect((await stack.json("POST", `/v1/sessions/${id}/messages`, { text: "turn two" })).status).toBe(202);
    const source = await stack.logWhen(id, "turn 2 to end", (e) => e.filter((x) => x.type === "turn/end").length === 2);

    const notEnded = await stack.json("POST", `/v1/sessions/${id}/fork`, { turn: 3 });
    expect(notEnded.status).toBe(400);
    expect(notEnded.body.error.message).toContain("has no ended turn 3; fork at one of its ended turns (1, 2)");

    const fork = await stack.json("POST", `/v1/sessions/${id}/fork`, { turn: 1 });
    expect(fork.status, JSON.stringify(fork.body)).toBe(201);
    expect(fork.body).toMatchObject({ workspace: ws, model, title: `${id} (fork)`, archived: false });
    const forked = await stack.events(fork.body.id);
    const firstEnd = source.findIndex((e) => e.type === "turn/end");
    expect(forked.map((e) => e.type)).toEqual(source.slice(0, firstEnd + 1).map((e) => e.type));
    expect(forked.map((e) => e.seq)).toEqual(forked.map((_, i) => i + 1));
    expect((forked[0] as unknown as { sessionCreated: { sessionId: string } }).sessionCreated.sessionId).toBe(fork.body.id);
    expect((await stack.json("GET", `/v1/sessions/${fork.body.id}`)).body).toMatchObject({ id: fork.body.id, last_seq: forked.length });

    const bundle = await stack.json("GET", `/v1/sessions/${id}/export`);
    expect(bundle.status).toBe(200);
    const imported = await stack.json("POST", "/v1/sessions/import", bundle.body);
    expect(imported.status, JSON.stringify(imported.body)).toBe(201);
    const copy = await stack.events(imported.body.id);
    expect(copy.map((e) => e.type)).toEqual(source.map((e) => e.type));
    expect(copy.filter((e) => e.type === "assistant/message").length).toBe(source.filter((e) => e.type === "assistant/message").length);
    // The bash call ran once, for the source; neither copy ran it again.
    const { readFileSync } = await import("node:fs");
    const { join } = await import("node:path");
    expect(readFileSync(join(ws, "ran.txt"), "utf8")).toBe("one\n");

    const broken = await stack.json("POST", "/v1/sessions/import", { ...bundle.body, events: bundle.body.events.slice(0, -1) });
    expect(broken.status).toBe(400);
    expect(broken.body.error.code).toBe("loop.bad_copy");
    expect(broken.body.error.message).toContain("has no turn/end");
  }, 120_000);
});
