import type { IncomingMessage, ServerResponse } from "node:http";

// Routes outside the contract that write their own responses (the web UI's static files,
// src/ui.ts) keep this small interface; `rawRoutes` (rest.ts) mounts them on Fastify.

/** One HTTP request as a raw route handler sees it. */
export interface Exchange {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly url: URL;
  /** The matched route pattern, e.g. `/assets/:file`. */
  readonly route: string | undefined;
  /** Path parameters of the matched route. */
  readonly params: Readonly<Record<string, string>>;
  /** Raw routes need no API key: always undefined. */
  tenant: string | undefined;
}

/** A raw route handler: writes the whole response, or throws (a GatewayError) before writing anything. */
export type Handler = (exchange: Exchange) => Promise<void>;
