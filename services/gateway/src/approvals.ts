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
