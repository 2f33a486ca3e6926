// Operations are bound to their generated request messages: the dispatcher decodes the validated
// REST form once into the message, and a binding to another message than the contract's is refused.
import { describe, expect, it } from "vitest";
import { gatewayV1 } from "@tack/proto";
import { endpoint, endpointOf, type Call } from "../src/call.js";
import { CONTRACT } from "../src/gen/contract.js";

const call: Call = { tenant: "t1", caller: { keyHash: "h", keyName: "k", role: "member" }, label: "test" };
const spec = (rpc: string) => CONTRACT.operations.find((o) => o.rpc === rpc)!;

describe("endpoints", () => {
  it("an operation gets its request message: snake_case REST fields decoded, optional ones absent as undefined", async () => {
    const seen: gatewayV1.CreateSessionRequest[] = [];
    const bound = endpoint(gatewayV1.CreateSessionRequest, async (_call, request) => {
      seen.push(request);
      return { body: {} };
    });
    await bound.run(call, { workspace_id: "ws_0123456789abcdef0123", model: "scripted:/x.json", mode: "standard", plan_mode: true, approval_policy: "ask", budget_usd: 2.5 });
    expect(seen[0]).toMatchObject({ workspaceId: "ws_0123456789abcdef0123", model: "scripted:/x.json", planMode: true, approvalPolicy: "ask", budgetUsd: 2.5, title: "" });
    expect(seen[0]!.workspace).toBeUndefined();
    expect(seen[0]!.sandboxMode).toBeUndefined();
  });

  it("every rpc of the contract finds its endpoint; one bound to another message, or none, is refused naming the rpc", () => {
    const run = async () => ({ body: {} });
    const right = endpoint(gatewayV1.SubmitMessageRequest, run);
    expect(endpointOf({ SubmitMessage: right }, spec("SubmitMessage"))).toBe(right);
    expect(() => endpointOf({ SubmitMessage: endpoint(gatewayV1.CancelTurnRequest, run) }, spec("SubmitMessage"))).toThrow(/SubmitMessage decodes another message than the contract's SubmitMessageRequest/);
    expect(() => endpointOf({}, spec("SubmitMessage"))).toThrow(/the contract's SubmitMessage has no operation/);
  });
});
