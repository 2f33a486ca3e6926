// @tack/client/grpc against a real gateway's gRPC listener (the real loop with a scripted model on
// the machine's NATS JetStream): typed unary calls, refusals as the REST client's TackApiError,
// and an event stream that a TCP proxy cuts mid-session and that resumes with every event once.
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TackApiError } from "@tack/client";
import { TackGrpcClient } from "@tack/client/grpc";
import { readAll } from "@tack/log";
import type { Event } from "@tack/proto";
import { CuttableProxy } from "@tack/testkit";
import { GatewayStack } from "../../../services/gateway/test/real-loop.js";

const KEY = `acme-${randomBytes(16).toString("hex")}`;
let stack: GatewayStack;
let address: string;
let client: TackGrpcClient;

beforeAll(async () => {
  stack = await GatewayStack.start({ name: "client-grpc", keys: { acme: KEY, globex: `globex-${randomBytes(16).toString("hex")}` }, grpc: true });
  address = `127.0.0.1:${stack.gateway.grpcPort}`;
  client = new TackGrpcClient({ address, apiKey: KEY });
});

afterAll(async () => {
  client?.close();
  await stack?.stop();
});

async function failure(promise: Promise<unknown>): Promise<TackApiError> {
  const outcome = await promise.then(() => undefined, (e: unknown) => e);
  if (!(outcome instanceof TackApiError)) throw new Error(`expected a TackApiError, got ${String(outcome)}`);
  return outcome;
}

describe("@tack/client/grpc against a real gateway", () => {
  it("grpc client - typed calls create, message and read a session; the log streams to its end", async () => {
    const created = await client.call("createSession", { workspace: stack.workspace, model: stack.loop.model, title: "over grpc" });
    expect(created.title).toBe("over grpc");
    await client.call("submitMessage", { id: created.id, text: "hello over gRPC" });
    await stack.loop.idle("acme", created.id);
    const detail = await client.call("getSession", { id: created.id });
    expect(detail.id).toBe(created.id);
    const events: Event[] = [];
    for await (const event of client.events(created.id, { follow: false })) events.push(event);
    const logged = await readAll(stack.bus.nc, stack.bus.names, { tenant: "acme", sessionId: created.id });
    expect(events.map((e) => e.seq)).toEqual(logged.map((e) => e.seq));
    expect(events.map((e) => e.type)).toContain("user/message");
    expect(events.at(-1)!.seq).toBe(detail.lastSeq);
  });

  it("grpc client - refusals are the REST client's errors: code, HTTP status and message", async () => {
    const missing = await failure(client.call("getSession", { id: "s-no-such-session" }));
    expect(missing).toMatchObject({ status: 404, code: "gateway.session_not_found" });
    expect(missing.message).toContain("s-no-such-session");
    const badKey = new TackGrpcClient({ address, apiKey: "not-a-key" });
    try {
      expect(await failure(badKey.call("listSessions", {}))).toMatchObject({ status: 401 });
    } finally {
      badKey.close();
    }
    // Nothing listens there: no answer at all, retryable.
    const nowhere = new TackGrpcClient({ address: "127.0.0.1:1", apiKey: KEY, timeoutMs: 2_000 });
    try {
      const unreachable = await failure(nowhere.call("listSessions", {}));
      expect(unreachable).toMatchObject({ status: 0, code: "client.unreachable" });
      expect(unreachable.retryable).toBe(true);
    } finally {
      nowhere.close();
    }
  });

  it("grpc client - a followed stream cut by the network resumes from the last seq: every event once, in order", async () => {
    const proxy = await CuttableProxy.start(address);
    const viaProxy = new TackGrpcClient({ address: proxy.address, apiKey: KEY });
    try {
      const created = await client.call("createSession", { workspace: stack.workspace, model: stack.loop.model, title: "cut" });
      await client.call("submitMessage", { id: created.id, text: "first" });
      const seen: Event[] = [];
      const states: string[] = [];
      let cuts = 0;
      const stop = AbortSignal.timeout(60_000);
      for await (const event of viaProxy.events(created.id, { signal: stop, reconnect: { initialDelayMs: 50 }, onState: (s) => states.push(s.state) })) {
        seen.push(event);
        if (event.type === "turn/end") {
          if (cuts === 0) {
            // The stream is cut after the first turn; the second turn's events arrive over a new connection.
            cuts += proxy.cut();
            await client.call("submitMessage", { id: created.id, text: "second" });
          } else break;
        }
      }
      expect(cuts).toBeGreaterThan(0);
      expect(states).toContain("reconnecting");
      const logged = await readAll(stack.bus.nc, stack.bus.names, { tenant: "acme", sessionId: created.id });
      const upTo = seen.at(-1)!.seq;
      expect(seen.map((e) => e.seq)).toEqual(logged.filter((e) => e.seq <= upTo).map((e) => e.seq));
      expect(seen.filter((e) => e.type === "turn/end")).toHaveLength(2);
    } finally {
      viaProxy.close();
      await proxy.close();
    }
  });
});
