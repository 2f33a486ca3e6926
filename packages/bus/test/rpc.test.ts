import { randomBytes } from "node:crypto";
import { headers as newHeaders } from "@nats-io/nats-core";
import { Bus, discoverMicro, endpoint, LlmRpc, LoopRpc, requestStream, RPC_HEADER, SandboxRpc, startService, TackError, type Rpc } from "@tack/bus";
import { BusError, CompleteRequest, CompleteStreamMessage, ExecRequest } from "@tack/proto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
let server: Bus;
let client: Bus;

beforeAll(async () => {
  const namespace = `t${randomBytes(5).toString("hex")}`;
  server = await Bus.connect({ url: NATS_URL, namespace, name: "rpc-test-server" });
  client = await Bus.connect({ url: NATS_URL, namespace, name: "rpc-test-client" });
});
afterAll(async () => {
  await client.close();
  await server.close();
});

describe("bus descriptors", () => {
  it("rpc - at() fills a parameterised route with a checked token; unknown parameters and bad tokens are refused naming the rpc", () => {
    expect(LoopRpc.SubmitMessage).toMatchObject({ subject: "loop.submit", queue: "loop", fullName: "tack.loop.v1.Loop/SubmitMessage", streaming: false });
    expect(LoopRpc.SubmitMessage.at({ session: "s1" })).toMatchObject({ subject: "loop.session.s1.submit", queue: "loop-owner" });
    expect(SandboxRpc.OpenStdio.at({ replica: "r1" }).subject).toBe("sandbox.replica.r1.stdio_open");
    expect(() => LoopRpc.SubmitMessage.at({ session: "a.b" })).toThrow(/invalid session "a.b"/);
    expect(() => (LoopRpc.CreateSession as Rpc).at({ session: "s1" })).toThrow(expect.objectContaining({ code: "bus.unknown_route", message: expect.stringContaining("tack.loop.v1.Loop/CreateSession has no subject with parameters { session }") }));
  });

  it("rpc - a request sent for another rpc than its subject serves is refused with bus.wrong_rpc naming both, not decoded as the wrong message", async () => {
    server.serve(LlmRpc.CheckModel, async (request) => ({ provider: request.model }));
    await server.nc.flush();
    // A caller whose descriptor puts CountTokens on llm.check (a version that disagrees on the subject).
    const confused = { ...LlmRpc.CountTokens, subject: LlmRpc.CheckModel.subject };
    await expect(client.request(confused, { request: undefined })).rejects.toMatchObject({
      code: "bus.wrong_rpc", message: expect.stringMatching(/serves tack\.llm\.v1\.Llm\/CheckModel, not tack\.llm\.v1\.Llm\/CountTokens/),
    });
    // Bytes that are no CheckModelRequest: bus.bad_request naming the rpc and its message, never a crash.
    const h = newHeaders();
    h.set(RPC_HEADER, LlmRpc.CheckModel.fullName);
    const reply = await client.nc.request(`${client.names.namespace}.llm.check`, new Uint8Array([0x0a, 0xff]), { timeout: 5_000, headers: h });
    expect(BusError.decode(reply.data)).toMatchObject({ code: "bus.bad_request", message: expect.stringContaining("tack.llm.v1.Llm/CheckModel request (tack.llm.v1.CheckModelRequest)") });
    // An older caller (no rpc header) is still served: old and new replicas interoperate.
    const old = await client.nc.request(`${client.names.namespace}.llm.check`, LlmRpc.CheckModel.requestType.encode({ model: "old" }).finish(), { timeout: 5_000 });
    expect(LlmRpc.CheckModel.responseType.decode(old.data)).toEqual({ provider: "old" });
  });

  it("rpc - a reply that is not the rpc's response is bus.bad_response naming the rpc", async () => {
    server.nc.subscribe(`${server.names.namespace}.llm.count`, { callback: (_e, msg) => { msg.respond(new Uint8Array([0x0a, 0xff])); } });
    await server.nc.flush();
    await expect(client.request(LlmRpc.CountTokens, { request: undefined })).rejects.toMatchObject({
      code: "bus.bad_response", message: expect.stringContaining("tack.llm.v1.Llm/CountTokens reply (tack.llm.v1.CountTokensResponse)"),
    });
  });

  it("rpc - an rpc asked of a replica that does not serve it fails at once with bus.no_responders naming the rpc, with or without heartbeats", async () => {
    const gone = SandboxRpc.Exec.at({ replica: "r-gone" });
    for (const options of [{ timeoutMs: 20_000 }, { timeoutMs: 20_000, silenceMs: 10_000 }]) {
      const started = Date.now();
      const error = await client.request(gone, ExecRequest.fromPartial({ sessionId: "s1", argv: ["true"] }), options).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(TackError);
      expect(error).toMatchObject({ code: "bus.no_responders", details: { rpc: "tack.sandbox.v1.Sandbox/Exec" }, message: expect.stringContaining(`${client.names.namespace}.sandbox.replica.r-gone.exec`) });
      expect(Date.now() - started).toBeLessThan(5_000);
    }
    await expect(requestStream(client, LlmRpc.Complete, CompleteRequest.fromPartial({}), () => undefined, () => true, { idleTimeoutMs: 20_000 }))
      .rejects.toMatchObject({ code: "bus.no_responders", details: { rpc: "tack.llm.v1.Llm/Complete" } });
  });

  it("rpc - a streaming rpc is served by bus.serve with a writer and its messages carry the rpc", async () => {
    server.serve(LlmRpc.Complete, async (request, writer) => {
      writer.send(CompleteStreamMessage.fromPartial({ index: 0, body: { $case: "done", value: { model: request.model } } }));
    });
    await server.nc.flush();
    const got: CompleteStreamMessage[] = [];
    await requestStream(client, LlmRpc.Complete, CompleteRequest.fromPartial({ model: "m" }), (m) => got.push(m), (m) => m.body?.$case === "done", { idleTimeoutMs: 5_000 });
    expect(got[0]?.body).toMatchObject({ $case: "done", value: { model: "m" } });
  });
});

describe("startService", () => {
  it("startService - warms up before subscribing, answers as soon as it resolves and is discoverable only then; stop waits for in-flight requests", async () => {
    const ns = `t${randomBytes(5).toString("hex")}`;
    const bus = await Bus.connect({ url: NATS_URL, namespace: ns, name: "svc" });
    const caller = await Bus.connect({ url: NATS_URL, namespace: ns, name: "svc-caller" });
    try {
      let release!: () => void;
      const held = new Promise<void>((resolve) => (release = resolve));
      let duringWarm: unknown;
      const service = await startService({
        bus, name: "svc-test", description: "test service",
        // While warming nothing is subscribed nor registered: callers see no responders, not a hang.
        warm: async () => {
          duringWarm = await caller.request(LlmRpc.CheckModel, { model: "early" }, { timeoutMs: 5_000 }).catch((e: unknown) => e);
          expect(await discoverMicro(caller, { service: "svc-test", waitMs: 200 })).toEqual([]);
        },
        endpoints: () => [
          endpoint(LlmRpc.CheckModel, async (request) => ({ provider: request.model })),
          endpoint(LlmRpc.EstimateCost, async () => {
            await held;
            return { costUsd: 1, priceWindow: "held" };
          }),
        ],
      });
      expect(duringWarm).toMatchObject({ code: "bus.no_responders" });
      // From another connection, straight after start: no gap between "started" and "serving".
      expect(await caller.request(LlmRpc.CheckModel, { model: "now" }, { timeoutMs: 2_000 })).toEqual({ provider: "now" });
      expect((await discoverMicro(caller, { service: "svc-test" })).length).toBe(1);
      const slow = caller.request(LlmRpc.EstimateCost, { model: "m", inputTokens: 1, outputTokens: 1 }, { timeoutMs: 10_000 });
      await expect.poll(() => service.inFlight()).toBe(1);
      let stopped = false;
      const stopping = service.stop().then(() => (stopped = true));
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(stopped).toBe(false);
      expect(service.signal.aborted).toBe(true);
      release();
      await stopping;
      expect(await slow).toEqual({ costUsd: 1, priceWindow: "held" });
      await expect(caller.request(LlmRpc.CheckModel, { model: "late" }, { timeoutMs: 2_000 })).rejects.toMatchObject({ code: "bus.no_responders" });
    } finally {
      await caller.close();
      await bus.close();
    }
  });
});
