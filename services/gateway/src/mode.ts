import { SANDBOX_MODES } from "@tack/config";
import { z } from "zod";
import { SetSandboxModeRequest, SetSandboxModeResponse } from "@tack/proto";
import { readJson } from "./body.js";
import { sendJson, type Handler } from "./http.js";
import { requestLoop, requireSession, type GatewayContext } from "./sessions.js";

const SandboxModeBody = z.strictObject({
  mode: z.enum(SANDBOX_MODES, {
    error: (issue) => (issue.input === undefined ? `is required: ${SANDBOX_MODES.join(", ")}` : `must be one of ${SANDBOX_MODES.join(", ")}, got ${JSON.stringify(issue.input)}`),
  }),
});

/**
 * `POST /v1/sessions/:id/sandbox_mode`: changes the session's sandbox mode, changed by the
 * caller's tenant; 200 with the seq of the logged `sandbox/mode` (0 when it already was that
 * mode), 409 while a turn runs (`loop.busy`) or a process started under a wider mode still runs
 * (`loop.mode_change_refused`).
 */
export function setSandboxMode(context: GatewayContext): Handler {
  return async (exchange) => {
    const row = await requireSession(context, exchange);
    const { mode } = await readJson(exchange.req, SandboxModeBody);
    context.policy.checkSandboxMode(exchange.tenant!, mode);
    const { names } = context.bus;
    const request = SetSandboxModeRequest.fromPartial({ tenant: row.tenant, sessionId: row.id, mode, changedBy: exchange.tenant! });
    const response = await requestLoop(context, { owner: names.loopSessionMode(row.id), any: names.loopMode }, SetSandboxModeRequest, request, SetSandboxModeResponse);
    await context.index.setSandboxMode(row.id, mode);
    sendJson(exchange.res, 200, { seq: response.seq, sandbox_mode: mode });
  };
}
