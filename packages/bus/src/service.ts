// What every Tack service does around its handlers: serve its rpcs, count the requests in
// flight, announce itself only once it really serves, and stop without cutting a request short.
import type { Subscription } from "@nats-io/nats-core";
import type { Service } from "@nats-io/services";
import type { Bus, RequestContext, ServeOptions } from "./bus.js";
import type { Rpc } from "./descriptor.js";
import { registerMicro } from "./micro.js";
import type { StreamWriter } from "./stream.js";

/** One rpc a service serves and its handler (made with `endpoint`). */
export interface Endpoint {
  readonly rpc: Rpc;
  /** Subscribes the handler; `track` counts each request in flight. */
  serve(bus: Bus, track: <T>(run: Promise<T>) => Promise<T>): Subscription;
}

/** A unary or streaming rpc and its handler, for `startService`'s `endpoints`. */
export function endpoint<Req, Res>(rpc: Rpc<Req, Res, false, string>, handler: (request: Req, context: RequestContext) => Promise<NoInfer<Res>>, options?: ServeOptions): Endpoint;
export function endpoint<Req, Res>(rpc: Rpc<Req, Res, true, string>, handler: (request: Req, writer: StreamWriter<NoInfer<Res>>, context: RequestContext) => Promise<void>, options?: ServeOptions): Endpoint;
export function endpoint<Req, Res>(rpc: Rpc<Req, Res>, handler: (...args: never[]) => Promise<unknown>, options?: ServeOptions): Endpoint {
  return {
    rpc: rpc as Rpc,
    serve: (bus, track) => rpc.streaming
      ? bus.serve(rpc as Rpc<Req, Res, true, string>, (request, writer, context) => track((handler as (request: Req, writer: StreamWriter<Res>, context: RequestContext) => Promise<void>)(request, writer, context)), options)
      : bus.serve(rpc as Rpc<Req, Res, false, string>, (request, context) => track((handler as (request: Req, context: RequestContext) => Promise<Res>)(request, context)), options),
  };
}

/** How to start a service on a connected bus. */
export interface StartServiceOptions {
  readonly bus: Bus;
  /** The Tack service, e.g. `llm`: it registers as micro-service `tack-llm`. */
  readonly name: string;
  /** One line on what it does, shown by `$SRV.INFO`. */
  readonly description: string;
  /** Extra micro-service metadata (a replica id, a runtime). */
  readonly metadata?: Readonly<Record<string, string>>;
  /**
   * Work that must be done before the first request is taken, e.g. loading a tokenizer that
   * would otherwise block the event loop inside the first request. It runs before anything is
   * subscribed, so nobody is told the service is up while it would not answer promptly.
   */
  readonly warm?: () => Promise<void>;
  /** The rpcs it serves; `signal` aborts when the service stops (pass it to long handlers). */
  readonly endpoints: (signal: AbortSignal) => readonly Endpoint[];
}

/** A running service. */
export interface ServiceHandle {
  /** Aborted when `stop` begins. */
  readonly signal: AbortSignal;
  /** Requests (and other tracked work) still running. */
  inFlight(): number;
  /** Counts `run` as in flight until it settles (work started outside the endpoints, e.g. a background sweep). */
  track<T>(run: Promise<T>): Promise<T>;
  /**
   * Stops taking requests (unsubscribes every endpoint and leaves micro discovery), aborts
   * `signal` and waits for every tracked request to settle. The bus stays open: close it after.
   */
  stop(): Promise<void>;
}

/**
 * Starts a service: runs `warm`, subscribes its endpoints, makes sure the server knows every
 * subscription (a round trip) and only then registers micro-service `tack-<name>`, so that a
 * process that logs `ready` or answers `$SRV.PING` also answers its rpcs at once.
 */
export async function startService(options: StartServiceOptions): Promise<ServiceHandle> {
  const { bus } = options;
  await options.warm?.();
  const stopping = new AbortController();
  const running = new Set<Promise<unknown>>();
  const track = <T>(run: Promise<T>): Promise<T> => {
    running.add(run);
    void run.catch(() => undefined).finally(() => running.delete(run));
    return run;
  };
  const subscriptions = options.endpoints(stopping.signal).map((e) => e.serve(bus, track));
  await bus.nc.flush();
  let micro: Service | undefined = await registerMicro(bus, { service: options.name, description: options.description, metadata: options.metadata });
  let stopped: Promise<void> | undefined;
  return {
    signal: stopping.signal,
    inFlight: () => running.size,
    track,
    stop: () => (stopped ??= (async () => {
      for (const subscription of subscriptions) subscription.unsubscribe();
      const leaving = micro?.stop().catch(() => undefined);
      micro = undefined;
      stopping.abort();
      while (running.size) await Promise.allSettled([...running]);
      await leaving;
    })()),
  };
}
