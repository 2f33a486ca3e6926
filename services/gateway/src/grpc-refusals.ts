// grpc-js answers three mistakes of the caller with INTERNAL, a server failure, before any handler
// of ours runs: a `grpc-timeout` header that is no deadline, a message flagged compressed that
// does not decompress with the call's `grpc-encoding`, and bytes that are no message of the
// method's type (the health service; the gateway's own service decodes tolerantly, src/grpc.ts).
// Its server interceptors cannot see these (the base call sends them itself), so the base call's
// sendStatus is wrapped once: those three become INVALID_ARGUMENT with the catalogue's code and a
// message saying what to fix. test/fuzz-spelling.test.ts fails if a grpc-js upgrade moves them.
import { Metadata, status as GrpcCode, type StatusObject } from "@grpc/grpc-js";
import { BaseServerInterceptingCall } from "@grpc/grpc-js/build/src/server-interceptors.js";

/** grpc-js's own INTERNAL details for a caller's mistake, and what the caller is told instead. */
const REFUSALS: readonly { readonly match: RegExp; readonly message: (found: RegExpExecArray) => string }[] = [
  {
    match: /^Invalid grpc-timeout value "(.*)"$/s,
    message: (found) => `the grpc-timeout header ${JSON.stringify(found[1]!.slice(0, 40))} is not a deadline (up to 8 digits and a unit H, M, S, m, u or n, as in 30S); send a valid one or none`,
  },
  {
    match: /^Failed to decompress message$/,
    message: () => "the request message is flagged compressed but does not decompress with the call's grpc-encoding; send it uncompressed (flag 0) or compressed with the encoding grpc-encoding names (gzip or deflate)",
  },
  {
    match: /^Error deserializing request/,
    message: () => "the request is not a valid message of the method's type; encode it with the service's protobuf definitions",
  },
];

let installed = false;

/** Rewords grpc-js's INTERNAL answers to a caller's mistakes as INVALID_ARGUMENT (once per process). */
export function installGrpcRefusals(): void {
  if (installed) return;
  installed = true;
  const prototype = BaseServerInterceptingCall.prototype as unknown as { sendStatus(status: Partial<StatusObject>): void };
  const send = prototype.sendStatus;
  prototype.sendStatus = function (this: unknown, status: Partial<StatusObject>) {
    send.call(this, status.code === GrpcCode.INTERNAL ? refusalOf(status) : status);
  };
}

/** The INVALID_ARGUMENT form of one of grpc-js's own INTERNAL answers; any other status unchanged. */
export function refusalOf(status: Partial<StatusObject>): Partial<StatusObject> {
  if (status.metadata?.get("tack-error-code").length) return status;
  for (const refusal of REFUSALS) {
    const found = refusal.match.exec(status.details ?? "");
    if (!found) continue;
    const metadata = new Metadata();
    metadata.set("tack-error-code", "gateway.invalid_request");
    return { code: GrpcCode.INVALID_ARGUMENT, details: refusal.message(found), metadata };
  }
  return status;
}
