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

const PlanModeBody = z.strictObject({
  on: z.boolean({ error: (issue) => (issue.input === undefined ? "is required: true to enter plan mode, false to leave it" : "must be true or false") }),
});

/**
 * `POST /v1/sessions/:id/plan_mode`: turns plan mode on (tools that can write are refused until
 * a plan is approved) or off, changed by the caller's tenant; 200 with the seq of the logged
 * `plan/mode` (0 when it already was).
 */
export function setPlanMode(context: GatewayContext): Handler {
  return async (exchange) => {
    const row = await requireSession(context, exchange);
    const { on } = await readJson(exchange.req, PlanModeBody);
    const response = await changeMode(context, row.tenant, row.id, { setting: "plan", mode: on ? "on" : "off", changedBy: exchange.tenant! });
    sendJson(exchange.res, 200, { seq: response.seq, plan_mode: on });
  };
}

const SessionModeBody = z.strictObject({
  mode: z.string({ error: (issue) => (issue.input === undefined ? "is required: standard, code, minimal or creator" : "must be a string") }).regex(/^[a-z][a-z0-9_-]{0,31}$/, "must be a mode name such as standard or code"),
});

/**
 * `POST /v1/sessions/:id/mode`: changes the session's mode (the tools it has), only before its
 * first message; 200 with the seq of the logged `session/mode` (0 when it already was that mode),
 * 409 (`loop.mode_fixed`) once the session has messages, 400 for a mode the tools service lacks.
 */
export function setSessionMode(context: GatewayContext): Handler {
  return async (exchange) => {
    const row = await requireSession(context, exchange);
    const { mode } = await readJson(exchange.req, SessionModeBody);
    const response = await changeMode(context, row.tenant, row.id, { setting: "session", mode, changedBy: exchange.tenant! });
    await context.index.setMode(row.id, mode);
    sendJson(exchange.res, 200, { seq: response.seq, mode });
  };
}

function changeMode(context: GatewayContext, tenant: string, sessionId: string, change: { setting: string; mode: string; changedBy: string }): Promise<SetSandboxModeResponse> {
  const { names } = context.bus;
  const request = SetSandboxModeRequest.fromPartial({ tenant, sessionId, ...change });
  return requestLoop(context, { owner: names.loopSessionMode(sessionId), any: names.loopMode }, SetSandboxModeRequest, request, SetSandboxModeResponse);
}
