import type { IncomingMessage, ServerResponse } from "node:http";

/** One HTTP request as it passes through interceptors to its handler. */
export interface Exchange {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly url: URL;
  /** The matched route pattern, e.g. `/v1/sessions/:id`; undefined when no route matched. */
  readonly route: string | undefined;
  /** Path parameters of the matched route. */
  readonly params: Readonly<Record<string, string>>;
  /** The caller's tenant, set by the auth interceptor. */
  tenant: string | undefined;
  /** The caller's key (its hash) and role, set by the auth interceptor. */
  caller?: { readonly keyHash: string; readonly role: "admin" | "member" };
}

/** The end of an interceptor chain: handles the exchange by writing its response. */
export type Handler = (exchange: Exchange) => Promise<void>;

/** A cross-cutting step around a handler (tracing, errors, auth); calls `next` to continue. */
export type Interceptor = (exchange: Exchange, next: () => Promise<void>) => Promise<void>;

/** Composes interceptors, outermost first, around `handler`. */
export function compose(interceptors: readonly Interceptor[], handler: Handler): Handler {
  return interceptors.reduceRight<Handler>((next, interceptor) => (exchange) => interceptor(exchange, () => next(exchange)), handler);
}

/** Writes a JSON response. */
export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const data = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json; charset=utf-8", "content-length": Buffer.byteLength(data), ...headers });
  res.end(data);
}
