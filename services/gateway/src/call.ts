// What every operation of the gateway receives, whichever transport (REST or gRPC) carried it:
// its request as the generated tack.gateway.v1 message, decoded once by the transport; what it
// answers: its response message, which gRPC sends as it is and REST writes with the generated encoder.
import { gatewayV1 } from "@tack/proto";
import type { OperationSpec } from "./gen/contract.js";
import { REST_ENCODERS, type RestJson } from "./gen/rest-json.js";

/** The authenticated caller: its key (by hash, never the key), the key's name and role. */
export interface Caller {
  readonly keyHash: string;
  /** The key's name (the person or tool it was issued to): who decided, in the log and the audit trail. */
  readonly keyName: string;
  readonly role: "admin" | "member";
}

/** One call of an operation by an authenticated caller. */
export interface Call {
  /** The caller's tenant: the only tenant whose sessions, workspaces and keys it sees. */
  readonly tenant: string;
  readonly caller: Caller;
  /** How refusals name the operation: `GET /v1/admin/keys` over REST, `gRPC ListKeys` over gRPC. */
  readonly label: string;
}

/** What a unary operation answers: its response message (`tack.gateway.v1.<Rpc>Response` or the rpc's message) and extra REST headers. */
export interface Reply<Res> {
  readonly message: Res;
  readonly headers?: Readonly<Record<string, string>>;
}

/**
 * A unary operation of the contract, given its request message (`tack.gateway.v1.<Rpc>Request`,
 * validated, defaults applied; by default one naming a session by `id`), answering its response message.
 */
export type Operation<Req, Res> = (call: Call, request: Req) => Promise<Reply<Res>>;

/** What a transport sends for one call: the response message (gRPC) and its REST JSON text. */
export interface Answer {
  readonly message: unknown;
  readonly headers?: Readonly<Record<string, string>>;
  /** The message in its REST form as JSON text (the generated encoder's, once per reply object). */
  json(): string;
}

/** A unary operation bound to its request message's codec and its response message's REST encoder: what REST and gRPC dispatch to. */
export interface Endpoint {
  /** The request message's codec (checked against the contract's `requestType` by `endpointOf`). */
  readonly codec: unknown;
  /** The response message's REST encoder (checked against the contract's `responseType` by `endpointOf`). */
  readonly encoder: unknown;
  /** Decodes the request from its REST form (snake_case fields, validated, defaults applied) and runs the operation. */
  run(call: Call, request: unknown): Promise<Answer>;
}

/**
 * Binds an operation to its request message's codec and its response message's generated REST
 * encoder (`restX` of src/gen/rest-json.ts), so the operation's request and response types are
 * the messages': an operation answering another message does not compile.
 */
export function endpoint<Req, Res>(codec: { fromJSON(object: unknown): Req }, encoder: (message: Res) => RestJson, operation: Operation<Req, NoInfer<Res>>): Endpoint {
  // A reply an operation hands out again (GetSession's, while the session is unchanged) is encoded once.
  const texts = new WeakMap<Reply<Res>, string>();
  return {
    codec, encoder,
    run: async (call, request) => {
      const reply = await operation(call, codec.fromJSON(request));
      return {
        message: reply.message, headers: reply.headers,
        json: () => {
          let text = texts.get(reply);
          if (text === undefined) texts.set(reply, text = JSON.stringify(encoder(reply.message)));
          return text;
        },
      };
    },
  };
}

const MESSAGES = new Map(Object.entries(gatewayV1));
const ENCODERS = new Map<string, unknown>(Object.entries(REST_ENCODERS));

/** The endpoint of `spec`'s rpc; refuses a missing one, or one whose codec or encoder is not of the contract's request or response message. */
export function endpointOf(endpoints: Readonly<Record<string, Endpoint>>, spec: OperationSpec): Endpoint {
  const found = endpoints[spec.rpc];
  if (!found) throw new Error(`the contract's ${spec.rpc} has no operation`);
  if (found.codec !== MESSAGES.get(spec.requestType)) throw new Error(`the operation of ${spec.rpc} decodes another message than the contract's ${spec.requestType}; bind it with endpoint(gatewayV1.${spec.requestType}, …)`);
  if (found.encoder !== ENCODERS.get(spec.responseType)) throw new Error(`the operation of ${spec.rpc} encodes another message than the contract's ${spec.responseType}; bind it with endpoint(…, rest${spec.responseType}, …)`);
  return found;
}
