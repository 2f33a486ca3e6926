import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { context, propagation, trace, TraceFlags } from "@opentelemetry/api";
import { Bus, LlmRpc, MAX_BUS_PAYLOAD, TackError } from "@tack/bus";
import { ensurePropagation } from "@tack/telemetry";

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
let server: Bus;
let client: Bus;

beforeAll(async () => {
  ensurePropagation();
  const namespace = `t${randomBytes(5).toString("hex")}`;
  server = await Bus.connect({ url: NATS_URL, namespace, name: "bus-test-server" });
  client = await Bus.connect({ url: NATS_URL, namespace, name: "bus-test-client" });
});
afterAll(async () => {
  await client.close();
  await server.close();
});

describe("bus", () => {
  it("bus - a request gets the typed reply; a thrown TackError arrives with its code and details", async () => {
    let traceparent: string | undefined;
    server.serve(LlmRpc.CheckModel, async (req, ctx) => {
      traceparent = ctx.headers?.get("traceparent");
      if (req.model === "bad") throw new TackError("llm.unknown_model", "unknown model bad", { details: { model: "bad" } });
      return { provider: `p:${req.model}` };
    });
    await server.nc.flush();
    expect(await client.request(LlmRpc.CheckModel, { model: "x" })).toEqual({ provider: "p:x" });
    const err = await client.request(LlmRpc.CheckModel, { model: "bad" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TackError);
    expect(err).toMatchObject({ code: "llm.unknown_model", message: "unknown model bad", details: { model: "bad" } });

    // The caller's trace context crosses the bus in a W3C traceparent header.
    const traceId = randomBytes(16).toString("hex");
    const parent = trace.setSpanContext(context.active(), { traceId, spanId: randomBytes(8).toString("hex"), traceFlags: TraceFlags.SAMPLED, isRemote: true });
    await context.with(parent, () => client.request(LlmRpc.CheckModel, { model: "y" }));
    expect(traceparent).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));
    expect(propagation.fields()).toContain("traceparent");
  });

  it("bus - no responders and timeouts are typed, retryable errors naming the rpc and the subject", async () => {
    await expect(client.request(LlmRpc.CountTokens, { request: undefined }))
      .rejects.toMatchObject({ code: "bus.no_responders", retryable: true, message: expect.stringContaining(`tack.llm.v1.Llm/CountTokens on ${client.names.namespace}.llm.count`) });
    server.serve(LlmRpc.EstimateCost, () => new Promise((r) => setTimeout(() => r({ costUsd: 0, priceWindow: "late" }), 500)));
    await server.nc.flush();
    await expect(client.request(LlmRpc.EstimateCost, { model: "x", inputTokens: 1, outputTokens: 1 }, { timeoutMs: 100 }))
      .rejects.toMatchObject({ code: "bus.timeout", retryable: true, message: expect.stringContaining("tack.llm.v1.Llm/EstimateCost") });
  });

  it("bus - an oversized payload is refused before it is sent", async () => {
    await expect(client.request(LlmRpc.CheckModel, { model: "x".repeat(MAX_BUS_PAYLOAD + 1) }))
      .rejects.toMatchObject({ code: "bus.payload_too_large", message: expect.stringContaining("object store") });
  });

  it("bus - an unreachable NATS fails with a one-line error that says how to fix it", async () => {
    await expect(Bus.connect({ url: "nats://127.0.0.1:1", name: "nowhere" }))
      .rejects.toMatchObject({ code: "bus.unreachable", message: expect.stringMatching(/NATS is unreachable at nats:\/\/127.0.0.1:1 .*start it with `tack up` or point NATS_URL/) });
  });

  it("bus - names are derived from a validated namespace", async () => {
    expect(() => client.names.logSubject("local", "s1")).not.toThrow();
    await expect(Bus.connect({ url: NATS_URL, namespace: "Bad Namespace", name: "x" })).rejects.toThrow(/invalid namespace "Bad Namespace": use 1-64 lowercase letters/);
  });
});
