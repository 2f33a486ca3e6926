import { DecideApprovalRequest, DecideApprovalResponse } from "@tack/proto";
import type { Operation } from "./call.js";
import { requestLoop, requireSession, type GatewayContext } from "./sessions.js";

/**
 * `DecideApproval`: answers the pending approval of a tool call with `allow_once` or `reject`,
 * decided by the caller's tenant; the seq of the logged `approval/decided`, 404
 * (`loop.no_pending_approval`) when that call is not waiting.
 */
export function decideApproval(context: GatewayContext): Operation {
  return async (call, body) => {
    const row = await requireSession(context, call, body.id);
    const request = DecideApprovalRequest.fromPartial({ tenant: row.tenant, sessionId: row.id, callId: body.call_id as string, decision: body.decision as string, decidedBy: call.tenant });
    const response = await decide(context, row.id, request);
    await context.index.touchSession(row.id);
    return { body: { seq: response.seq } };
  };
}

/**
 * `AnswerQuestion`: answers the pending ask_user_question call, one `{selected: [labels], other}`
 * per question in order, answered by the caller's tenant; the seq of the logged
 * `question/answered`, 400 (`loop.bad_answer`) when an answer does not fit its question, 404
 * (`loop.no_pending_question`) when that call is not waiting.
 */
export function answerQuestion(context: GatewayContext): Operation {
  return async (call, body) => {
    const row = await requireSession(context, call, body.id);
    const answers = (body.answers as { selected?: string[]; other?: string }[]).map((a) => ({ selected: a.selected ?? [], other: a.other ?? "" }));
    const request = DecideApprovalRequest.fromPartial({
      tenant: row.tenant, sessionId: row.id, callId: body.call_id as string, decision: "", decidedBy: call.tenant, kind: "question", answers: { answers },
    });
    const response = await decide(context, row.id, request);
    await context.index.touchSession(row.id);
    return { body: { seq: response.seq } };
  };
}

/**
 * `DecidePlan`: approves or rejects the plan waiting for review (the exit_plan_mode call
 * `call_id`, or the one waiting), decided by the caller's tenant; approval ends plan mode,
 * `feedback` goes to the model. The seq of the logged `plan/decided`, 404 (`loop.no_pending_plan`)
 * when no plan waits.
 */
export function decidePlan(context: GatewayContext): Operation {
  return async (call, body) => {
    const row = await requireSession(context, call, body.id);
    const request = DecideApprovalRequest.fromPartial({
      tenant: row.tenant, sessionId: row.id, callId: (body.call_id as string | undefined) ?? "", decision: body.approve === true ? "approve" : "reject",
      decidedBy: call.tenant, kind: "plan", feedback: (body.feedback as string | undefined) ?? "",
    });
    const response = await decide(context, row.id, request);
    await context.index.touchSession(row.id);
    return { body: { seq: response.seq } };
  };
}

function decide(context: GatewayContext, sessionId: string, request: DecideApprovalRequest): Promise<DecideApprovalResponse> {
  const { names } = context.bus;
  return requestLoop(context, { owner: names.loopSessionDecide(sessionId), any: names.loopDecide }, DecideApprovalRequest, request, DecideApprovalResponse);
}
