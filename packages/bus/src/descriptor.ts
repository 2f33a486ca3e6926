// Typed descriptors of the bus's rpcs. The descriptors themselves are generated from the proto
// services (gen/descriptors.ts, by scripts/gen-bus.mjs); see docs/decisions/0022-bus-descriptors.md.
import type { Codec } from "./bus.js";
import { TackError } from "./errors.js";
import { assertToken } from "./subjects.js";

/** One subject an rpc is served on: a template below the namespace, e.g. `loop.session.{session}.submit`. */
export interface RpcRoute {
  readonly subject: string;
  readonly queue: string;
  /** The `{param}` names of `subject`, in order. */
  readonly params: readonly string[];
}

/**
 * One rpc of a proto service on the bus: what `bus.serve` and `bus.request` take. `subject` and
 * `queue` are those of the queue-group route (any replica); `at({ session })` gives the same rpc
 * on a parameterised route (one owner or replica).
 */
export interface Rpc<Req = unknown, Res = unknown, Stream extends boolean = boolean, Param extends string = string> {
  /** `tack.loop.v1.Loop/SubmitMessage`: names the rpc and its version in errors. */
  readonly fullName: string;
  /** Whether the reply is a stream of responses (served with a writer, asked with `requestStream(bus, rpc, …)`). */
  readonly streaming: Stream;
  readonly requestType: Codec<Req>;
  /** Full proto name of the request message, e.g. `tack.loop.v1.SubmitMessageRequest`. */
  readonly requestName: string;
  readonly responseType: Codec<Res>;
  readonly responseName: string;
  /** The subject below the namespace this descriptor addresses (`loop.submit`, or `loop.session.s1.submit` after `at`). */
  readonly subject: string;
  /** The queue group its servers join. */
  readonly queue: string;
  /** Every route of the rpc, the queue-group route first. */
  readonly routes: readonly RpcRoute[];
  /**
   * The rpc on the route whose parameters are exactly the keys of `params` (each a subject
   * token), e.g. `LoopRpc.SubmitMessage.at({ session: id })` → `loop.session.<id>.submit`.
   */
  at(params: Readonly<Record<Param, string>>): Rpc<Req, Res, Stream, never>;
}

/** The wire subject of `rpc` in namespace `namespace`. */
export function rpcSubject(namespace: string, rpc: Pick<Rpc, "subject">): string {
  return `${namespace}.${rpc.subject}`;
}

/**
 * Every subject `rpc` is served on in `namespace`, its queue-group route first and each
 * `{param}` as `*` (`<ns>.loop.submit`, `<ns>.loop.session.*.submit`): what a NATS permission
 * grants for the rpc.
 */
export function rpcSubjectPatterns(namespace: string, rpc: Pick<Rpc, "routes">): string[] {
  return rpc.routes.map((r) => `${namespace}.${r.subject.replace(/\{[a-z_]+\}/g, "*")}`);
}

/** Builds a descriptor (used by the generated code). */
export function defineRpc<Req, Res, Stream extends boolean, Param extends string>(spec: {
  readonly fullName: string;
  readonly streaming: Stream;
  readonly requestType: Codec<Req>;
  readonly requestName: string;
  readonly responseType: Codec<Res>;
  readonly responseName: string;
  readonly routes: readonly RpcRoute[];
}): Rpc<Req, Res, Stream, Param> {
  const [first] = spec.routes;
  if (!first) throw new Error(`${spec.fullName} has no route`);
  return bound(spec, first.subject, first.queue);
}

function bound<Req, Res, Stream extends boolean, Param extends string>(
  spec: Parameters<typeof defineRpc<Req, Res, Stream, Param>>[0],
  subject: string,
  queue: string,
): Rpc<Req, Res, Stream, Param> {
  return {
    ...spec,
    subject,
    queue,
    at(params) {
      const keys = Object.keys(params).sort();
      const route = spec.routes.find((r) => r.params.length === keys.length && [...r.params].sort().every((p, i) => p === keys[i]));
      if (!route) {
        const known = spec.routes.filter((r) => r.params.length).map((r) => `{ ${r.params.join(", ")} }`);
        throw new TackError("bus.unknown_route", `${spec.fullName} has no subject with parameters { ${keys.join(", ")} }; it takes ${known.length ? known.join(" or ") : "none"}`, { details: { rpc: spec.fullName } });
      }
      const values = params as Readonly<Record<string, string>>;
      for (const p of route.params) assertToken(p, values[p] ?? "");
      return bound<Req, Res, Stream, never>(spec, route.subject.replace(/\{([a-z_]+)\}/g, (_, p: string) => values[p] ?? ""), route.queue);
    },
  };
}
