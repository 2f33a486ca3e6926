import { z } from "zod";
import { DecideApprovalRequest, DecideApprovalResponse } from "@tack/proto";
import { readJson } from "./body.js";
import { sendJson, type Handler } from "./http.js";
import { requestLoop, requireSession, type GatewayContext } from "./sessions.js";

const DecideBody = z.strictObject({
  decision: z.enum(["allow_once", "reject"], {
    error: (issue) => (issue.input === undefined ? "is required: allow_once or reject" : `must be "allow_once" or "reject", got ${JSON.stringify(issue.input)}`),
  }),
});

/**
 * `POST /v1/sessions/:id/approvals/:call_id`: answers the pending approval of a tool call with
 * `allow_once` or `reject`, decided by the caller's tenant; 200 with the seq of the logged
 * `approval/decided`, 404 (`loop.no_pending_approval`) when that call is not waiting.
 */
export function decideApproval(context: GatewayContext): Handler {
  return async (exchange) => {
    const row = await requireSession(context, exchange);
    const { decision } = await readJson(exchange.req, DecideBody);
    const { names } = context.bus;
    const request = DecideApprovalRequest.fromPartial({ tenant: row.tenant, sessionId: row.id, callId: exchange.params.call_id!, decision, decidedBy: exchange.tenant! });
    const response = await requestLoop(context, { owner: names.loopSessionDecide(row.id), any: names.loopDecide }, DecideApprovalRequest, request, DecideApprovalResponse);
    await context.index.touchSession(row.id);
    sendJson(exchange.res, 200, { seq: response.seq });
  };
}

const AnswersBody = z.strictObject({
  answers: z.array(z.strictObject({
    selected: z.array(z.string({ error: "must be a string: the label of an option" })).default([]),
    other: z.string({ error: "must be a string: the answer in your own words" }).max(10_000, "must be at most 10,000 characters").default(""),
  }), { error: (issue) => (issue.input === undefined ? "is required: one {selected, other} per question, in order" : "must be an array of {selected, other}") }).min(1, "must hold one answer per question").max(4, "must hold at most 4 answers (a call asks at most 4 questions)"),
});

/**
 * `POST /v1/sessions/:id/questions/:call_id`: answers the pending ask_user_question call, one
 * `{selected: [labels], other}` per question in order, answered by the caller's tenant; 200 with
 * the seq of the logged `question/answered`, 400 (`loop.bad_answer`) when an answer does not fit
 * its question, 404 (`loop.no_pending_question`) when that call is not waiting.
 */
export function answerQuestion(context: GatewayContext): Handler {
  return async (exchange) => {
    const row = await requireSession(context, exchange);
    const { answers } = await readJson(exchange.req, AnswersBody);
    const request = DecideApprovalRequest.fromPartial({
      tenant: row.tenant, sessionId: row.id, callId: exchange.params.call_id!, decision: "", decidedBy: exchange.tenant!, kind: "question", answers: { answers },
    });
    const response = await decide(context, row.id, request);
    await context.index.touchSession(row.id);
    sendJson(exchange.res, 200, { seq: response.seq });
  };
}

const PlanBody = z.strictObject({
  approve: z.boolean({ error: (issue) => (issue.input === undefined ? "is required: true to approve the plan, false to reject it" : "must be true or false") }),
  feedback: z.string({ error: "must be a string" }).max(10_000, "must be at most 10,000 characters").default(""),
  call_id: z.string({ error: "must be a string: the call id of the exit_plan_mode call" }).optional(),
});

/**
 * `POST /v1/sessions/:id/plan`: approves or rejects the plan waiting for review (the
 * exit_plan_mode call `call_id`, or the one waiting), decided by the caller's tenant; approval
 * ends plan mode, `feedback` goes to the model. 200 with the seq of the logged `plan/decided`,
 * 404 (`loop.no_pending_plan`) when no plan waits.
 */
export function decidePlan(context: GatewayContext): Handler {
  return async (exchange) => {
    const row = await requireSession(context, exchange);
    const { approve, feedback, call_id } = await readJson(exchange.req, PlanBody);
    const request = DecideApprovalRequest.fromPartial({
      tenant: row.tenant, sessionId: row.id, callId: call_id ?? "", decision: approve ? "approve" : "reject", decidedBy: exchange.tenant!, kind: "plan", feedback,
    });
    const response = await decide(context, row.id, request);
    await context.index.touchSession(row.id);
    sendJson(exchange.res, 200, { seq: response.seq });
  };
}

function decide(context: GatewayContext, sessionId: string, request: DecideApprovalRequest): Promise<DecideApprovalResponse> {
  const { names } = context.bus;
  return requestLoop(context, { owner: names.loopSessionDecide(sessionId), any: names.loopDecide }, DecideApprovalRequest, request, DecideApprovalResponse);
}
