import { LoopRpc } from "@tack/bus";
import { SetPlanModeRequest, SetSandboxModeRequest, SetSessionModeRequest, type gatewayV1 } from "@tack/proto";
import type { Operation } from "./call.js";
import { sandboxModeField } from "./validation.js";
import { requestLoop, requireSession, type GatewayContext } from "./gateway-context.js";

/**
 * `SetSandboxMode`: changes the session's sandbox mode, changed by the caller's tenant; the seq
 * of the logged `sandbox/mode` (0 when it already was that mode), 409 while a turn runs
 * (`loop.busy`) or a process started under a wider mode still runs (`loop.mode_change_refused`).
 */
export function setSandboxMode(context: GatewayContext): Operation<gatewayV1.SetSandboxModeRequest, gatewayV1.SetSandboxModeResponse> {
  return async (call, body) => {
    const row = await requireSession(context, call, body.id);
    const mode = sandboxModeField("mode", body.mode);
    context.policy.checkSandboxMode(call.tenant, mode);
    const request = SetSandboxModeRequest.fromPartial({ tenant: row.tenant, sessionId: row.id, mode, changedBy: call.tenant });
    const response = await requestLoop(context, LoopRpc.SetSandboxMode, row.id, request);
    await context.index.setSandboxMode(row.id, mode);
    return { message: { seq: response.seq, sandboxMode: mode } };
  };
}

/**
 * `SetPlanMode`: turns plan mode on (tools that can write are refused until a plan is approved)
 * or off, changed by the caller's tenant; the seq of the logged `plan/mode` (0 when it already was).
 */
export function setPlanMode(context: GatewayContext): Operation<gatewayV1.SetPlanModeRequest, gatewayV1.SetPlanModeResponse> {
  return async (call, body) => {
    const row = await requireSession(context, call, body.id);
    const { on } = body;
    const request = SetPlanModeRequest.fromPartial({ tenant: row.tenant, sessionId: row.id, on, changedBy: call.tenant });
    const response = await requestLoop(context, LoopRpc.SetPlanMode, row.id, request);
    return { message: { seq: response.seq, planMode: on } };
  };
}

/**
 * `SetSessionMode`: changes the session's mode (the tools it has), only before its first
 * message; the seq of the logged `session/mode` (0 when it already was that mode), 409
 * (`loop.mode_fixed`) once the session has messages, 400 for a mode the tools service lacks.
 */
export function setSessionMode(context: GatewayContext): Operation<gatewayV1.SetSessionModeRequest, gatewayV1.SetSessionModeResponse> {
  return async (call, body) => {
    const row = await requireSession(context, call, body.id);
    const { mode } = body;
    const request = SetSessionModeRequest.fromPartial({ tenant: row.tenant, sessionId: row.id, mode, changedBy: call.tenant });
    const response = await requestLoop(context, LoopRpc.SetSessionMode, row.id, request);
    await context.index.setMode(row.id, mode);
    return { message: { seq: response.seq, mode } };
  };
}
