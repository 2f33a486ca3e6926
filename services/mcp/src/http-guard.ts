// HTTP MCP servers are reached from this service's host, next to NATS, the database and the
// metadata endpoint: every request goes through the egress guard web_fetch uses (@tack/egress,
// imported, not copied). The URL is checked, its host resolved once and every address classified;
// the connection is pinned to the checked addresses, and only the configured origin is fetched.
import { TackError } from "@tack/bus";
import { checkUrl, GuardError, parseAllowList, pinnedLookup, resolveDestination, systemResolver, type GuardPolicy, type Resolver } from "@tack/egress";
import type { FetchLike } from "@modelcontextprotocol/sdk/shared/transport.js";
import { Agent, fetch as undiciFetch } from "undici";

/** The guard of HTTP servers: web_fetch's policy (allowlisted CIDRs) and resolver. */
export interface HttpGuard {
  readonly policy: GuardPolicy;
  readonly resolve: Resolver;
}

/**
 * The guard with `allow` (CIDRs or addresses, comma/space separated; `TACK_MCP_HTTP_ALLOW`)
 * allowed on top of the public internet. Loopback and private addresses are refused unless
 * listed. A bad entry fails with `mcp.invalid_options` naming it.
 */
export function httpGuard(allow: string | readonly string[] = "", resolve: Resolver = systemResolver): HttpGuard {
  try {
    return { policy: { allow: parseAllowList(allow) }, resolve };
  } catch (error) {
    throw new TackError("mcp.invalid_options", `TACK_MCP_HTTP_ALLOW: ${(error as Error).message}`, { cause: error });
  }
}

/**
 * Checks that `url` may be reached under `guard` without connecting anywhere (the address is
 * resolved and classified only). Fails with `mcp.http_refused` naming the rule.
 */
export async function checkHttpServer(url: string, guard: HttpGuard): Promise<void> {
  try {
    await resolveDestination(checkUrl(url), guard.policy, guard.resolve);
  } catch (error) {
    throw refusal(url, error);
  }
}

function refusal(url: string, error: unknown): TackError {
  if (error instanceof GuardError) {
    return new TackError("mcp.http_refused", `MCP server URL ${url} is refused (rule ${error.rule}): ${error.message.replace(/web_fetch/g, "MCP over HTTP")}; an operator can allow an internal address with TACK_MCP_HTTP_ALLOW`, { cause: error });
  }
  return TackError.from(error);
}

/**
 * A fetch for one server's transport: only `origin`'s URLs, each request's host resolved and
 * checked, the connection pinned to the checked addresses, redirects not followed.
 */
export function guardedFetch(guard: HttpGuard, configured: string): FetchLike {
  const origin = new URL(configured).origin;
  return async (input, init) => {
    const url = checkUrl(String(input));
    if (url.origin !== origin) throw new TackError("mcp.http_refused", `MCP server at ${origin} asked for ${url.origin}; only the configured origin is reached`);
    let destination;
    try {
      destination = await resolveDestination(url, guard.policy, guard.resolve);
    } catch (error) {
      throw refusal(url.href, error);
    }
    const agent = new Agent({ connect: { lookup: pinnedLookup(destination) } });
    try {
      const response = await undiciFetch(url, { ...(init as Record<string, unknown>), redirect: "manual", dispatcher: agent } as Parameters<typeof undiciFetch>[1]);
      // A graceful close: the agent goes once the body (a JSON reply or an SSE stream) has been read.
      void agent.close().catch(() => undefined);
      return response as unknown as Response;
    } catch (error) {
      await agent.close().catch(() => undefined);
      throw error;
    }
  };
}
