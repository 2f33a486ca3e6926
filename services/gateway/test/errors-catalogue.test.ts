import { TackError } from "@tack/bus";
import { CATALOGUE, type ErrorCode } from "@tack/errors";
import type { Logger } from "@tack/telemetry";
import { describe, expect, it } from "vitest";
import { GatewayError, httpStatusOf, toHttpError } from "../src/errors.js";

const quiet: Logger = { info: () => undefined, warn: () => undefined, error: () => undefined, child: () => quiet };

describe("errors - statuses from the catalogue", () => {
  it("errors - every catalogued code that reaches the gateway is answered with the catalogue's HTTP status", () => {
    for (const code of Object.keys(CATALOGUE) as ErrorCode[]) {
      const { status, body } = toHttpError(new TackError(code, `failed: ${code}`), { log: quiet });
      expect(status, code).toBe(CATALOGUE[code].http);
      expect(body.error.code).toBe(code);
      // A caller's error keeps its message; a server failure gets a fixed sentence with a request id.
      if (status < 500) expect(body.error.message).toBe(`failed: ${code}`);
      else expect(body.error.message).toMatch(/\(request id [0-9a-f]{16}\)$/);
    }
  });

  it("errors - a code the catalogue does not hold is a failure behind the gateway (502); a GatewayError keeps its own status", () => {
    expect(httpStatusOf("loop.no_such_code")).toBe(502);
    expect(httpStatusOf("toString")).toBe(502);
    expect(toHttpError(new TackError("loop.no_such_code", "x"), { log: quiet }).status).toBe(502);
    expect(toHttpError(new GatewayError(400, "gateway.workspace_not_found", "no directory /srv/x"), { log: quiet }).status).toBe(400);
  });

  it("errors - the statuses the gateway answered before the catalogue are kept", () => {
    const before: [ErrorCode, number][] = [
      ["loop.unknown_mode", 400], ["loop.bad_sandbox_mode", 400], ["loop.bad_approval_policy", 400], ["loop.missing_model", 400],
      ["loop.bad_workspace", 400], ["loop.empty_message", 400], ["loop.unknown_session", 404], ["loop.session_exists", 409],
      ["loop.busy", 409], ["loop.session_busy", 409], ["loop.bad_budget", 400], ["loop.bad_decision", 400],
      ["loop.no_pending_approval", 404], ["loop.mode_change_refused", 409], ["loop.no_pending_question", 404],
      ["loop.no_pending_plan", 404], ["loop.bad_answer", 400], ["loop.mode_fixed", 409],
      ["llm.unknown_model", 400], ["llm.missing_key", 400], ["llm.bad_script", 400],
      ["bus.no_responders", 503], ["bus.unreachable", 503], ["bus.timeout", 504], ["bus.request_failed", 502], ["internal", 500],
      ["sandbox.docker_failed", 502], ["log.conflict", 502], ["llm.server_error", 502],
    ];
    expect(before.filter(([code, status]) => httpStatusOf(code) !== status)).toEqual([]);
  });

  it("errors - a service behind the gateway that cannot reach one it needs is a 503 with a sentence saying so", () => {
    const { status, body } = toHttpError(new TackError("loop.tools_unavailable", "no tools service answers on tack.tools.list", { retryable: true }), { log: quiet });
    expect(status).toBe(503);
    expect(body.error.message).toMatch(/^the loop service cannot serve this request right now; retry shortly, and start Tack with `tack up` if it persists \(request id [0-9a-f]{16}\)$/);
    expect(body.error.message).not.toContain("tack.tools.list");
    const own = toHttpError(new TackError("gateway.database_unavailable", "cannot open /var/lib/tack/index.db"), { log: quiet });
    expect(own.status).toBe(503);
    expect(own.body.error.message).toMatch(/^the gateway cannot serve this request right now; retry shortly/);
    expect(own.body.error.message).not.toContain("/var/lib");
  });
});
