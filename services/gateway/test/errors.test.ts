import { TackError } from "@tack/bus";
import type { Logger } from "@tack/telemetry";
import { describe, expect, it } from "vitest";
import { errorSpec, GRPC_STATUS_NUMBERS } from "@tack/errors";
import { errorReply, GatewayError, grpcStatusOf, toHttpError } from "../src/errors.js";

/** A logger that keeps its records, to check what the operator sees. */
function capture(): Logger & { records: { level: string; message: string; fields: Record<string, unknown> }[] } {
  const records: { level: string; message: string; fields: Record<string, unknown> }[] = [];
  const keep = (level: string) => (message: string, fields: Record<string, unknown> = {}) => { records.push({ level, message, fields }); };
  const log = { records, info: keep("info"), warn: keep("warn"), error: keep("error"), child: () => log };
  return log;
}

// What internal failures look like: bus subjects, host paths and stack text in message and details.
const INTERNAL = new TackError("sandbox.exec_failed", "request on tack.sandbox.exec failed: ENOENT /work/secret/path\n    at exec (/work/main/services/sandbox/src/exec.ts:12:3)", {
  details: { subject: "tack.sandbox.exec", path: "/work/secret/path" },
});

describe("errors", () => {
  it("errors - a 5xx body carries a fixed sentence and a request id, not the subject, path or stack of the failure", () => {
    const log = capture();
    const { status, body } = toHttpError(INTERNAL, { log });
    expect(status).toBe(502);
    const text = JSON.stringify(body);
    for (const leak of ["tack.sandbox.exec", "/work/secret/path", "exec.ts", "    at ", "ENOENT"]) expect(text).not.toContain(leak);
    expect(body.error.details).toBeUndefined();
    expect(body.error.request_id).toMatch(/^[0-9a-f]{16}$/);
    expect(body.error).toEqual({
      code: "sandbox.exec_failed",
      message: `the sandbox service failed to handle the request; retry, and give the operator the request id if it persists (request id ${body.error.request_id})`,
      request_id: body.error.request_id,
    });
    // The operator finds the whole failure in the log under the same id.
    expect(log.records).toEqual([{ level: "error", message: "request failed", fields: expect.objectContaining({
      status: 502, code: "sandbox.exec_failed", request_id: body.error.request_id, error: INTERNAL.message, details: INTERNAL.details,
    }) }]);
  });

  it("errors - each bus failure gets its own sentence naming the service by the subject, never the subject", () => {
    const cases: [TackError, number, string][] = [
      [new TackError("bus.timeout", "no reply on tack.loop.create within 30000 ms", { details: { subject: "tack.loop.create" } }), 504, "the loop service did not answer in time; retry"],
      [new TackError("bus.no_responders", "no service answers on tack.loop.session.s1.submit", { details: { subject: "tack.loop.session.s1.submit" } }), 503, "no loop service answers; start Tack with `tack up`"],
      [new TackError("bus.unreachable", "cannot connect to nats://10.0.0.7:4222"), 503, "the gateway cannot reach the message bus; retry shortly, and ask the operator to check NATS if it persists"],
      [new TackError("bus.request_failed", "request on ns.llm.count failed: boom", { details: { subject: "ns.llm.count" } }), 502, "the request to the llm service failed on the way; retry"],
      [new TackError("bus.timeout", "no reply on x.secret.place", { details: { subject: "x.secret.place" } }), 504, "a Tack service behind the gateway did not answer in time; retry"],
      [TackError.from(new Error("ENOENT: open '/work/secret/path'")), 500, "the gateway failed unexpectedly; retry, and give the operator the request id if it persists"],
      [new GatewayError(503, "gateway.unavailable", "database /var/lib/tack/tack.db is locked"), 503, "the gateway cannot serve this request right now; retry shortly"],
    ];
    for (const [error, status, sentence] of cases) {
      const answer = toHttpError(error, { log: capture() });
      expect(answer.status).toBe(status);
      expect(answer.body.error.message).toBe(`${sentence} (request id ${answer.body.error.request_id})`);
      expect(JSON.stringify(answer.body)).not.toMatch(/tack\.loop|ns\.llm|x\.secret|nats:\/\/|\/work\/secret|\/var\/lib/);
    }
  });

  it("errors - caller errors (4xx) keep their message and details, and are not logged", () => {
    const log = capture();
    const refused = toHttpError(new TackError("llm.bad_script", "script /srv/x.json is outside the script directories (/srv/examples)", { details: { file: "/srv/x.json" } }), { log });
    expect(refused).toEqual({ status: 400, body: { error: { code: "llm.bad_script", message: "script /srv/x.json is outside the script directories (/srv/examples)", details: { file: "/srv/x.json" } } } });
    expect(toHttpError(new GatewayError(404, "gateway.session_not_found", "no session s1"), { log }).body.error.message).toBe("no session s1");
    expect(log.records).toEqual([]);
  });

  it("errors - errorReply answers an internal failure with the safe body and logs it with the route", () => {
    const log = capture();
    const answer = errorReply(INTERNAL, { log, fields: { method: "POST", route: "/v1/sessions" } });
    expect(answer.status).toBe(502);
    const text = JSON.stringify(answer.body);
    expect(text).not.toContain("tack.sandbox.exec");
    expect(text).not.toContain("/work/secret/path");
    expect(log.records).toHaveLength(1);
    expect(log.records[0]!.fields).toMatchObject({ method: "POST", route: "/v1/sessions", request_id: answer.body.error.request_id, error: INTERNAL.message });
  });

  it("errors - refusals carry their REST headers and the catalogue's gRPC status", () => {
    expect(errorReply(new GatewayError(401, "gateway.missing_api_key", "missing API key")).headers["www-authenticate"]).toMatch(/^Bearer/);
    expect(errorReply(new GatewayError(429, "gateway.limit_exceeded", "slow down", { details: { retry_after_seconds: "7" } })).headers["retry-after"]).toBe("7");
    expect(errorReply(new GatewayError(413, "gateway.body_too_large", "too big")).headers.connection).toBe("close");
    expect(grpcStatusOf(new GatewayError(404, "gateway.session_not_found", "no session"))).toBe(5);
    expect(grpcStatusOf(new TackError("loop.busy", "a turn runs"))).toBe(GRPC_STATUS_NUMBERS[errorSpec("loop.busy")!.grpc]);
    // A code the catalogue lacks is a failure behind the gateway: 502, UNAVAILABLE.
    expect(grpcStatusOf(INTERNAL)).toBe(GRPC_STATUS_NUMBERS.UNAVAILABLE);
  });
});
