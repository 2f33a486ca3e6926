import { propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from "@opentelemetry/api";
import type { Interceptor } from "./http.js";

const tracer = trace.getTracer("@tack/gateway");

/**
 * Wraps a request in a SERVER span `gateway <METHOD> <route>`, continuing the caller's
 * `traceparent` when there is one, so that the bus requests the handler makes are its children.
 */
export const traceRequest: Interceptor = async (exchange, next) => {
  const parent = propagation.extract(ROOT_CONTEXT, exchange.req.headers);
  const method = exchange.req.method ?? "GET";
  const route = exchange.route ?? "(unmatched)";
  const attributes = { "http.request.method": method, "http.route": route, "url.path": exchange.url.pathname };
  await tracer.startActiveSpan(`gateway ${method} ${route}`, { kind: SpanKind.SERVER, attributes }, parent, async (span) => {
    try {
      await next();
    } finally {
      const status = exchange.res.statusCode;
      span.setAttribute("http.response.status_code", status);
      if (exchange.tenant) span.setAttribute("tack.tenant", exchange.tenant);
      if (exchange.params.id) span.setAttribute("tack.session_id", exchange.params.id);
      if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
      span.end();
    }
  });
};
