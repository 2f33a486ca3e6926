import type { Subscription } from "@nats-io/nats-core";
import { assertToken, DEFAULT_SILENCE_MS, endpoint, TackError, type Bus, type Endpoint, type Rpc } from "@tack/bus";
import type { Ownership } from "./ownership.js";
import type { SessionRuntime } from "./session.js";

/** A request addressed to one session. */
export interface SessionAddressed {
  tenant: string;
  sessionId: string;
}

/** What a route's `unowned` handler may do with a session no process serves. */
export interface Unowned {
  /** Claims the session (waiting out an expiring lease), loads and recovers it. */
  claim(): Promise<SessionRuntime>;
  readonly ownership: Ownership;
}

/**
 * One per-session rpc: served on its owner route (`.at({ session })`, queue group `loop-owner`)
 * by the replica that owns the session, and on its queue-group route (group `loop`) by any
 * replica, which forwards it to a warm owner or handles it itself.
 */
export interface RouteSpec<Req extends SessionAddressed, Res> {
  /** The rpc's generated descriptor, e.g. `LoopRpc.SubmitMessage`. */
  readonly rpc: Rpc<Req, Res, false, "session">;
  /** Handles the call for a session this process owns. */
  owned(runtime: SessionRuntime, req: Req): Promise<Res>;
  /**
   * Handles the call for a session no process serves; by default the session is claimed, `owned`
   * handles the call and the session is then left warm for the idle release.
   */
  unowned?(req: Req & SessionAddressed, tenant: string, via: Unowned): Promise<Res>;
}

/** A route with its types closed over: what the router's table holds. */
export interface SessionRoute {
  serveOwner(bus: Bus, runtime: SessionRuntime): Subscription;
  /** The queue-group endpoint every replica serves (started with the service). */
  any(bus: Bus, ownership: Ownership, leaseTtlMs: number): Endpoint;
}

/** Declares a per-session rpc for the router's table. */
export function route<Req extends SessionAddressed, Res>(spec: RouteSpec<Req, Res>): SessionRoute {
  const { rpc } = spec;
  return {
    serveOwner: (bus, runtime) => bus.serve(rpc.at({ session: runtime.sessionId }), (req) => spec.owned(runtime, req)),
    any: (bus, ownership, leaseTtlMs) => endpoint(rpc, async (req) => {
      const tenant = req.tenant || "local";
      assertToken("session id", req.sessionId);
      assertToken("tenant", tenant);
      const forwarded = await viaOwner(bus, ownership, tenant, rpc, req);
      if (forwarded) return forwarded;
      const claim = () => ownership.acquire(tenant, req.sessionId, leaseTtlMs + 1_000);
      if (spec.unowned) return spec.unowned(req, tenant, { claim, ownership });
      const runtime = await claim();
      try {
        return await spec.owned(runtime, req);
      } finally {
        ownership.forget(runtime);
      }
    }),
  };
}

/**
 * A queue-group request for a session another replica keeps warm goes to that owner's route
 * (it holds the lease, so claiming would only wait it out); undefined when no other process
 * serves the session, so the caller claims it.
 */
async function viaOwner<Req extends SessionAddressed, Res>(bus: Bus, ownership: Ownership, tenant: string, rpc: Rpc<Req, Res, false, "session">, req: Req): Promise<Res | undefined> {
  if (ownership.holds(tenant, req.sessionId)) return undefined;
  try {
    return await bus.request(rpc.at({ session: req.sessionId }), req, { timeoutMs: 5 * 60_000, silenceMs: DEFAULT_SILENCE_MS });
  } catch (error) {
    if (error instanceof TackError && (error.code === "bus.no_responders" || error.code === "bus.worker_lost")) return undefined;
    throw error;
  }
}

/**
 * The loop's per-session rpcs: gives their queue-group endpoints to the service, and opens a
 * session's owner routes when this process comes to own it (`Ownership` calls `serveOwned`).
 */
export class SessionRouter {
  readonly #bus: Bus;
  readonly #routes: readonly SessionRoute[];

  constructor(bus: Bus, routes: readonly SessionRoute[]) {
    this.#bus = bus;
    this.#routes = routes;
  }

  /** Opens the owner subjects of a session this process just came to own. */
  serveOwned(runtime: SessionRuntime): Subscription[] {
    return this.#routes.map((r) => r.serveOwner(this.#bus, runtime));
  }

  /** The queue-group endpoints every replica serves, for `startService`. */
  endpoints(ownership: Ownership, leaseTtlMs: number): Endpoint[] {
    return this.#routes.map((r) => r.any(this.#bus, ownership, leaseTtlMs));
  }
}
