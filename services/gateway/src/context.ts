import { deriveRequest, readAll, type ModelRequest } from "@tack/log";
import { LlmRpc } from "@tack/bus";
import { CompleteRequest, type Event, type gatewayV1 } from "@tack/proto";
import type { Operation } from "./call.js";
import { requireSession, type GatewayContext } from "./gateway-context.js";

function completeRequest(sessionId: string, r: ModelRequest): CompleteRequest {
  return CompleteRequest.fromPartial({
    sessionId, model: r.model, systemPrompt: r.systemPrompt, tools: [...r.tools], messages: [...r.messages], temperature: r.temperature, maxTokens: r.maxTokens,
  });
}

/**
 * `GetContext`: what the next request puts in front of the model, in tokens of
 * the model's tokenizer, by part (system prompt / tools / conversation), calibrated by the
 * input tokens the provider reported for the last call.
 */
export function sessionContext(context: GatewayContext): Operation<gatewayV1.GetContextRequest, gatewayV1.GetContextResponse> {
  return async (call, request) => {
    const row = await requireSession(context, call, request.id);
    const { bus } = context;
    const events = await readAll(bus.nc, bus.names, { tenant: row.tenant, sessionId: row.id });
    if (!events.some((e) => e.payload?.$case === "requestHeader")) {
      return { message: { session: row.id, tokenizer: "", tokens: undefined, calibration: undefined, estimatedTotal: 0, note: "no model request yet: the context is measured from the first request/header on" } };
    }
    const count = async (upTo: readonly Event[]) => {
      const r = await bus.request(LlmRpc.CountTokens, { request: completeRequest(row.id, deriveRequest(upTo)) });
      return r;
    };
    const now = await count(events);
    const total = now.systemPromptTokens + now.toolsTokens + now.conversationTokens;
    // Calibrate with the last reported usage: the request it answered is the log up to that step's assistant message.
    let calibration: gatewayV1.ContextCalibration | undefined;
    const lastUsage = [...events].reverse().find((e) => e.payload?.$case === "usage");
    if (lastUsage?.payload?.$case === "usage" && lastUsage.payload.value.usage) {
      const u = lastUsage.payload.value.usage;
      const reported = u.inputMissTokens + u.inputHitTokens;
      const answer = [...events].reverse().find((e) => e.seq < lastUsage.seq && e.payload?.$case === "assistantMessage");
      const then = await count(events.filter((e) => e.seq < (answer?.seq ?? lastUsage.seq)));
      const counted = then.systemPromptTokens + then.toolsTokens + then.conversationTokens;
      if (reported > 0 && counted > 0) calibration = { reportedInputTokens: reported, countedTokens: counted, ratio: Math.round((reported / counted) * 1000) / 1000 };
    }
    return { message: {
      session: row.id,
      tokenizer: now.tokenizer,
      tokens: { systemPrompt: now.systemPromptTokens, tools: now.toolsTokens, conversation: now.conversationTokens, total },
      calibration,
      estimatedTotal: calibration ? Math.round(total * calibration.ratio) : total,
      note: "",
    } };
  };
}
