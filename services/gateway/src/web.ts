import { ToolsRpc } from "@tack/bus";
import type { gatewayV1 } from "@tack/proto";
import { GatewayError } from "./errors.js";
import type { Operation } from "./call.js";
import type { GatewayContext } from "./gateway-context.js";

/**
 * `WebSearchHealth` (`GET /v1/web/search/health`): each web_search provider as the tools service sees it (has a
 * key, is the one calls go to, did its last call or probe work, and what was seen). Answers
 * from the tools service's recent states; `?refresh=true` (admin keys only, since a probe can
 * cost a paid query) probes every configured provider now.
 */
export function webSearchHealth(context: GatewayContext): Operation<gatewayV1.WebSearchHealthRequest, gatewayV1.WebSearchHealthResponse> {
  return async (call, request) => {
    const refresh = ["1", "true"].includes(request.refresh);
    if (refresh && call.caller.role !== "admin") {
      throw new GatewayError(403, "gateway.forbidden", "refresh=true probes the providers (a probe may cost a query) and needs an admin key; leave it out to read the recent states", {
        details: { role_needed: "admin", role: call.caller.role },
      });
    }
    const { bus } = context;
    // Probes run side by side, each within its 15 s limit.
    const health = await bus.request(ToolsRpc.WebSearchHealth, { refresh }, { timeoutMs: 30_000 });
    return { message: {
      selected: health.selected || undefined,
      selectionError: health.selectionError || undefined,
      providers: health.providers.map((p) => ({
        id: p.id, name: p.name, configured: p.configured, selected: p.selected, healthy: p.healthy, detail: p.detail,
        checkedAt: new Date(p.checkedAtMs).toISOString(),
      })),
    } };
  };
}
