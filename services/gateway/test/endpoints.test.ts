// Operations are bound to their generated request and response messages: the dispatcher decodes
// the validated REST form once into the request message, the operation answers its response
// message (gRPC sends it, REST writes it with the generated encoder), and a binding to another
// message than the contract's is refused.
import { describe, expect, it } from "vitest";
import { gatewayV1 } from "@tack/proto";
import { endpoint, endpointOf, type Call, type Operation } from "../src/call.js";
import { CONTRACT } from "../src/gen/contract.js";
import { restCancelTurnResponse, restGetContextResponse, restSession, restSubmitMessageResponse, restTenantPolicy } from "../src/gen/rest-json.js";

const call: Call = { tenant: "t1", caller: { keyHash: "h", keyName: "k", role: "member" }, label: "test" };
const spec = (rpc: string) => CONTRACT.operations.find((o) => o.rpc === rpc)!;
const session: gatewayV1.Session = {
  id: "s1", tenant: "t1", title: "", model: "m", mode: "standard", workspace: "/w", sandboxMode: "workspace-write", approvalPolicy: "ask",
  subject: "x", createdAt: "2026-01-01T00:00:00.000Z", updatedAt: "2026-01-01T00:00:00.000Z", archived: false, planMode: undefined,
};

describe("endpoints", () => {
  it("an operation gets its request message: snake_case REST fields decoded, optional ones absent as undefined", async () => {
    const seen: gatewayV1.CreateSessionRequest[] = [];
    const bound = endpoint(gatewayV1.CreateSessionRequest, restSession, async (_call, request) => {
      seen.push(request);
      return { message: session };
    });
    await bound.run(call, { workspace_id: "ws_0123456789abcdef0123", model: "scripted:/x.json", mode: "standard", plan_mode: true, approval_policy: "ask", budget_usd: 2.5 });
    expect(seen[0]).toMatchObject({ workspaceId: "ws_0123456789abcdef0123", model: "scripted:/x.json", planMode: true, approvalPolicy: "ask", budgetUsd: 2.5, title: "" });
    expect(seen[0]!.workspace).toBeUndefined();
    expect(seen[0]!.sandboxMode).toBeUndefined();
  });

  it("every rpc of the contract finds its endpoint; one bound to another message, or none, is refused naming the rpc", () => {
    const run = async () => ({ message: { seq: 1, turn: 1 } });
    const right = endpoint(gatewayV1.SubmitMessageRequest, restSubmitMessageResponse, run);
    expect(endpointOf({ SubmitMessage: right }, spec("SubmitMessage"))).toBe(right);
    expect(() => endpointOf({ SubmitMessage: endpoint(gatewayV1.CancelTurnRequest, restSubmitMessageResponse, run) }, spec("SubmitMessage"))).toThrow(/SubmitMessage decodes another message than the contract's SubmitMessageRequest/);
    const cancelled = async () => ({ message: { cancelled: true, turn: 1 } });
    expect(() => endpointOf({ SubmitMessage: endpoint(gatewayV1.SubmitMessageRequest, restCancelTurnResponse, cancelled) }, spec("SubmitMessage"))).toThrow(/SubmitMessage encodes another message than the contract's SubmitMessageResponse/);
    expect(() => endpointOf({}, spec("SubmitMessage"))).toThrow(/the contract's SubmitMessage has no operation/);
  });

  it("an operation answering another message, or a message with a REST name or a missing field, does not compile", () => {
    const cancel: Operation<gatewayV1.SubmitMessageRequest, gatewayV1.CancelTurnResponse> = async () => ({ message: { cancelled: false, turn: 0 } });
    // @ts-expect-error the encoder writes SubmitMessageResponse; the operation answers CancelTurnResponse
    endpoint(gatewayV1.SubmitMessageRequest, restSubmitMessageResponse, cancel);
    // @ts-expect-error a REST (snake_case) name is no field of the message
    const snake: Operation<gatewayV1.GetContextRequest, gatewayV1.GetContextResponse> = async () => ({ message: { session: "s", tokenizer: "", tokens: undefined, calibration: undefined, estimated_total: 0, note: "" } });
    // @ts-expect-error `turn` is missing
    const partial: Operation<gatewayV1.SubmitMessageRequest, gatewayV1.SubmitMessageResponse> = async () => ({ message: { seq: 1 } });
    expect([snake, partial]).toHaveLength(2);
  });

  it("the REST body is the generated encoder's: nulls and omissions as the API has them, encoded once per reply", async () => {
    const reply = { message: { session: "s1", tokenizer: "", tokens: undefined, calibration: undefined, estimatedTotal: 0, note: "no model request yet" } };
    const bound = endpoint(gatewayV1.GetContextRequest, restGetContextResponse, async () => reply);
    const answer = await bound.run(call, { id: "s1" });
    expect(answer.message).toBe(reply.message);
    expect(answer.json()).toBe('{"session":"s1","tokens":null,"note":"no model request yet"}');
    const measured = restGetContextResponse({ ...reply.message, tokenizer: "cl100k", tokens: { systemPrompt: 1, tools: 2, conversation: 3, total: 6 }, estimatedTotal: 6, note: "" });
    expect(JSON.stringify(measured)).toBe('{"session":"s1","tokenizer":"cl100k","tokens":{"system_prompt":1,"tools":2,"conversation":3,"total":6},"calibration":null,"estimated_total":6}');
  });

  it("a tenant's model_providers: null when any provider may be used, an empty list when none may", () => {
    const policy = { workspaceRoots: [], maxSandboxMode: "read-only", maxSessions: 1, maxSandboxes: 1, maxEventStreams: 1, requestsPerMinute: 1, budgetUsd: undefined };
    expect(restTenantPolicy({ ...policy, modelProviders: [], anyModelProvider: true })).toMatchObject({ budget_usd: null, model_providers: null });
    expect(restTenantPolicy({ ...policy, modelProviders: [], anyModelProvider: false })).toMatchObject({ model_providers: [] });
    expect(restTenantPolicy({ ...policy, modelProviders: [], anyModelProvider: false })).not.toHaveProperty("any_model_provider");
  });
});
