import { LoopRpc, type Rpc } from "@tack/bus";
import { AnswerQuestionRequest, DecideApprovalRequest, DecidePlanRequest, type gatewayV1 } from "@tack/proto";
import { callerActor, callerKeyId, type DecisionAction } from "./audit.js";
import type { Call, Operation } from "./call.js";
import { requestLoop, requireSession, type GatewayContext } from "./gateway-context.js";

// Who decided is the authenticated key: its tenant (`decided_by`), name and id, taken from the
// call, never from the request body; the loop logs them with the decision and the gateway
// records the decision in the audit trail.

/**
 * `DecideApproval`: answers the pending approval of a tool call with `allow_once` or `reject`,
 * decided by the caller's key; the seq of the logged `approval/decided`, 404
 * (`loop.no_pending_approval`) when that call is not waiting.
 */
export function decideApproval(context: GatewayContext): Operation<gatewayV1.DecideApprovalRequest, gatewayV1.DecisionResponse> {
  return async (call, body) => {
    const row = await requireSession(context, call, body.id);
    const request = DecideApprovalRequest.fromPartial({ tenant: row.tenant, sessionId: row.id, callId: body.callId, decision: body.decision, ...decider(call) });
    const seq = await decide(context, call, row.id, DECIDE_APPROVAL, request, "approval.decide", { call_id: request.callId, decision: request.decision });
    return { message: { seq } };
  };
}

/**
 * `AnswerQuestion`: answers the pending ask_user_question call, one `{selected: [labels], other}`
 * per question in order, answered by the caller's key; the seq of the logged
 * `question/answered`, 400 (`loop.bad_answer`) when an answer does not fit its question, 404
 * (`loop.no_pending_question`) when that call is not waiting.
 */
export function answerQuestion(context: GatewayContext): Operation<gatewayV1.AnswerQuestionRequest, gatewayV1.DecisionResponse> {
  return async (call, body) => {
    const row = await requireSession(context, call, body.id);
    const answers = body.answers.map((a) => ({ selected: a.selected, other: a.other }));
    const request = AnswerQuestionRequest.fromPartial({ tenant: row.tenant, sessionId: row.id, callId: body.callId, answers, ...decider(call) });
    const seq = await decide(context, call, row.id, ANSWER_QUESTION, request, "question.answer", { call_id: request.callId });
    return { message: { seq } };
  };
}

/**
 * `DecidePlan`: approves or rejects the plan waiting for review (the exit_plan_mode call
 * `call_id`, or the one waiting), decided by the caller's key; approval ends plan mode,
 * `feedback` goes to the model. The seq of the logged `plan/decided`, 404 (`loop.no_pending_plan`)
 * when no plan waits.
 */
export function decidePlan(context: GatewayContext): Operation<gatewayV1.DecidePlanRequest, gatewayV1.DecisionResponse> {
  return async (call, body) => {
    const row = await requireSession(context, call, body.id);
    const request = DecidePlanRequest.fromPartial({ tenant: row.tenant, sessionId: row.id, callId: body.callId ?? "", approve: body.approve, feedback: body.feedback, ...decider(call) });
    const seq = await decide(context, call, row.id, DECIDE_PLAN, request, "plan.decide", { call_id: request.callId, decision: request.approve ? "approve" : "reject" });
    return { message: { seq } };
  };
}

/** A loop rpc that records a person's decision (one rpc per kind of decision): its reply is the logged event's seq. */
type LoopDecision<Req> = Rpc<Req, { seq: number }, false, "session">;
const DECIDE_APPROVAL: LoopDecision<DecideApprovalRequest> = LoopRpc.DecideApproval;
const ANSWER_QUESTION: LoopDecision<AnswerQuestionRequest> = LoopRpc.AnswerQuestion;
const DECIDE_PLAN: LoopDecision<DecidePlanRequest> = LoopRpc.DecidePlan;

/** Who decides, from the authenticated call: the tenant as before, and the key's name and id. */
function decider(call: Call): Pick<DecideApprovalRequest, "decidedBy" | "decidedByKey" | "decidedByKeyId"> {
  return { decidedBy: call.tenant, decidedByKey: call.caller.keyName, decidedByKeyId: callerKeyId(call) };
}

/** Asks the loop to log the decision, then records it in the audit trail with the logged event's seq. */
async function decide<Req>(
  context: GatewayContext, call: Call, sessionId: string, rpc: LoopDecision<Req>, request: Req, action: DecisionAction, details: Record<string, unknown>,
): Promise<number> {
  const response = await requestLoop(context, rpc, sessionId, request);
  await context.index.touchSession(sessionId);
  await context.audit.recordDecision(call.tenant, sessionId, callerActor(call), action, { ...details, seq: response.seq });
  return response.seq;
}
