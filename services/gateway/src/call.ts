// What every operation of the gateway receives, whichever transport (REST or gRPC) carried it:
// its request as the generated tack.gateway.v1 message, decoded once by the transport.
import { gatewayV1 } from "@tack/proto";
import type { OperationSpec } from "./gen/contract.js";

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

/** What a unary operation answers: the JSON body (the proto response message in its REST form) and extra REST headers. */
export interface Reply {
  readonly body: unknown;
  readonly headers?: Readonly<Record<string, string>>;
  /** `JSON.stringify(body)`, when the operation already has it (REST sends it as is). */
  readonly json?: string;
}

/**
 * A unary operation of the contract, given its request message (`tack.gateway.v1.<Rpc>Request`,
 * validated, defaults applied); by default one naming a session by `id`.
 */
export type Operation<Req = { readonly id: string }> = (call: Call, request: Req) => Promise<Reply>;

/** A unary operation bound to the generated codec of its request message: what REST and gRPC dispatch to. */
export interface Endpoint {
  /** The request message's codec (checked against the contract's `requestType` by `endpointOf`). */
  readonly codec: unknown;
  /** Decodes the request from its REST form (snake_case fields, validated, defaults applied) and runs the operation. */
  run(call: Call, request: unknown): Promise<Reply>;
}

/** Binds an operation to its request message's codec, so the operation's request type is the message's. */
export function endpoint<Req>(codec: { fromJSON(object: unknown): Req }, operation: Operation<Req>): Endpoint {
  return { codec, run: (call, request) => operation(call, codec.fromJSON(request)) };
}

const MESSAGES = new Map(Object.entries(gatewayV1));

/** The endpoint of `spec`'s rpc; refuses a missing one, or one whose codec is not the contract's request message. */
export function endpointOf(endpoints: Readonly<Record<string, Endpoint>>, spec: OperationSpec): Endpoint {
  const found = endpoints[spec.rpc];
  if (!found) throw new Error(`the contract's ${spec.rpc} has no operation`);
  if (found.codec !== MESSAGES.get(spec.requestType)) throw new Error(`the operation of ${spec.rpc} decodes another message than the contract's ${spec.requestType}; bind it with endpoint(gatewayV1.${spec.requestType}, …)`);
  return found;
}

/** The generated codec of a tack.gateway.v1 message by name (a contract's `responseType`). */
export function messageCodec(name: string): { fromJSON(object: unknown): unknown } {
  const codec = MESSAGES.get(name);
  if (typeof codec !== "object" || !("fromJSON" in codec)) throw new Error(`no message ${name} in tack.gateway.v1`);
  return { fromJSON: (object) => codec.fromJSON(object) };
}
