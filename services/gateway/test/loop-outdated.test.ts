// A gateway newer than its loops (a rolling upgrade in the wrong order): the loops run but do not
// serve an rpc the gateway calls. The caller is told which rpc and to upgrade the loops first
// (decision 0025), not "no loop service answers"; with no loop at all, that sentence stays.
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Bus, LoopRpc, type Rpc } from "@tack/bus";
import { GatewayStack } from "./real-loop.js";

const KEY_ACME = `acme-${randomBytes(16).toString("hex")}`;
const KEY_GLOBEX = `globex-${randomBytes(16).toString("hex")}`;

/**
 * The loop of this file is an older one: it serves no AnswerQuestion (neither route), as a loop
 * from before that rpc existed. Everything else it serves as usual.
 */
const serve = Bus.prototype.serve as (this: Bus, rpc: Rpc, ...rest: unknown[]) => ReturnType<Bus["track"]>;
Bus.prototype.serve = function (this: Bus, rpc: Rpc, ...rest: unknown[]) {
  if (rpc.fullName === LoopRpc.AnswerQuestion.fullName) return this.track(this.nc.subscribe(`${this.inboxPrefix}.not-served.${randomBytes(6).toString("hex")}`));
  return serve.call(this, rpc, ...rest);
} as typeof Bus.prototype.serve;

let stack: GatewayStack;

beforeAll(async () => {
  stack = await GatewayStack.start({ name: "loop-outdated", keys: { acme: KEY_ACME, globex: KEY_GLOBEX } });
});

afterAll(async () => {
  await stack?.stop();
});

async function call(method: string, path: string, body?: unknown) {
  const headers: Record<string, string> = { authorization: `Bearer ${KEY_ACME}` };
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(`${stack.gateway.url}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- error bodies, checked by the assertions that read them
  return { status: res.status, json: (text ? JSON.parse(text) : undefined) as any };
}

describe("a gateway newer than its loops", () => {
  it("loop outdated - an rpc the running loops do not serve is 503 gateway.loop_outdated naming the rpc and the upgrade order; without any loop it stays bus.no_responders", async () => {
    const created = await call("POST", "/v1/sessions", { workspace: stack.workspace, model: stack.loop.model });
    expect(created.status, JSON.stringify(created.json)).toBe(201);
    const id = created.json.id as string;

    const answered = await call("POST", `/v1/sessions/${id}/questions/call_0_0`, { answers: [{ selected: ["node"] }] });
    expect(answered.status, JSON.stringify(answered.json)).toBe(503);
    expect(answered.json.error).toMatchObject({
      code: "gateway.loop_outdated",
      message: `the loop service does not serve tack.loop.v1.Loop/AnswerQuestion yet: the loops may be older than this gateway; upgrade the loops first, then the gateways, and retry (request id ${answered.json.error.request_id})`,
    });

    // With no loop replica at all, nothing is outdated: the loop is not running.
    await stack.loop.stop();
    const alone = await call("POST", `/v1/sessions/${id}/questions/call_0_0`, { answers: [{ selected: ["node"] }] });
    expect(alone.status).toBe(503);
    expect(alone.json.error).toMatchObject({ code: "bus.no_responders", message: expect.stringMatching(/^no loop service answers; start Tack with `tack up`/) });
  });
});
