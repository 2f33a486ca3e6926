// What a descriptor lets both ends check: that a request and its reply are for the rpc the
// subject serves (RPC_HEADER), and that they decode; each failure names the rpc.
import type { Msg } from "@nats-io/nats-core";
import { RPC_HEADER, type Codec } from "./bus.js";
import type { Rpc } from "./descriptor.js";
import { TackError } from "./errors.js";

/**
 * Decodes a request served for `rpc` (undefined: served by subject alone): one sent for another
 * rpc is `bus.wrong_rpc`, one that does not decode `bus.bad_request`, both naming the rpc.
 */
export function decodeRequest<Req>(msg: Msg, codec: Codec<Req>, rpc: Rpc | undefined): Req {
  const asked = msg.headers?.get(RPC_HEADER) ?? "";
  if (rpc && asked && asked !== rpc.fullName) {
    throw new TackError("bus.wrong_rpc", `${msg.subject} serves ${rpc.fullName}, not ${asked}: the caller's descriptor and this replica disagree on the subject; run one version of Tack's services, or regenerate the descriptors (make gen)`, {
      details: { subject: msg.subject, rpc: rpc.fullName, asked },
    });
  }
  try {
    return codec.decode(msg.data);
  } catch (error) {
    const what = rpc ? `${rpc.fullName} request (${rpc.requestName})` : "request";
    throw new TackError("bus.bad_request", `malformed ${what} on ${msg.subject}: ${(error as Error).message}`, { cause: error, details: { subject: msg.subject, ...(rpc ? { rpc: rpc.fullName } : {}) } });
  }
}

/** Decodes the reply of a request for `rpc`: a reply of another rpc is `bus.wrong_rpc`, an undecodable one `bus.bad_response`. */
export function decodeReply<Res>(msg: Msg, codec: Codec<Res>, rpc: Rpc | undefined, subject: string): Res {
  const answered = msg.headers?.get(RPC_HEADER) ?? "";
  if (rpc && answered && answered !== rpc.fullName) {
    throw new TackError("bus.wrong_rpc", `asked ${rpc.fullName} on ${subject} but the replica there answered as ${answered}: it serves another rpc on that subject; run one version of Tack's services`, {
      details: { subject, rpc: rpc.fullName, answered },
    });
  }
  try {
    return codec.decode(msg.data);
  } catch (error) {
    const what = rpc ? `${rpc.fullName} reply (${rpc.responseName})` : "reply";
    throw new TackError("bus.bad_response", `malformed ${what} on ${subject}: ${(error as Error).message}; the replica serving it speaks another version of the message`, {
      cause: error, details: { subject, ...(rpc ? { rpc: rpc.fullName } : {}) },
    });
  }
}
