// The standard gRPC health service (grpc.health.v1) on the gateway's gRPC server, through a real
// grpc-js client: Check and Watch follow the gateway's own health check (the one behind
// GET /healthz), unknown service names are NOT_FOUND / SERVICE_UNKNOWN, and a stopping server
// reports NOT_SERVING. The full stack's answer (SERVING on a healthy gateway) is in contract.test.ts.
import { afterEach, describe, expect, it } from "vitest";
import { credentials, status as GrpcCode, type ServiceError } from "@grpc/grpc-js";
import { gatewayV1, healthV1 } from "@tack/proto";
import { logger } from "@tack/telemetry";
import { CONTRACT } from "../src/gen/contract.js";
import { REST_ENCODERS } from "../src/gen/rest-json.js";
import { startGrpc, type GrpcGateway } from "../src/grpc.js";
import type { Endpoint } from "../src/call.js";
import type { GatewayContext } from "../src/gateway-context.js";
import type { WorkspaceOperations } from "../src/workspaces.js";

const { SERVING, NOT_SERVING, SERVICE_UNKNOWN } = healthV1.HealthCheckResponse_ServingStatus;

let server: GrpcGateway | undefined;
let client: InstanceType<typeof healthV1.HealthClient> | undefined;

afterEach(async () => {
  client?.close();
  await server?.stop();
  server = undefined;
  client = undefined;
});

/** A gRPC server whose health is `healthy()`; the gateway operations are never called here. */
async function start(healthy: () => boolean): Promise<InstanceType<typeof healthV1.HealthClient>> {
  const run: Endpoint["run"] = async () => { throw new Error("not called in this test"); };
  const operations = Object.fromEntries(CONTRACT.operations.map((o) => [o.rpc, { codec: gatewayV1[o.requestType as keyof typeof gatewayV1], encoder: REST_ENCODERS[o.responseType as keyof typeof REST_ENCODERS], run }]));
  server = await startGrpc({
    context: {} as GatewayContext, operations, workspaces: {} as WorkspaceOperations, log: logger("gateway-health-test"),
    health: async () => ({ status: healthy() ? 200 : 503 }), healthWatchMs: 50,
  }, "127.0.0.1", 0);
  client = new healthV1.HealthClient(`127.0.0.1:${server.port}`, credentials.createInsecure());
  return client;
}

function check(c: InstanceType<typeof healthV1.HealthClient>, service: string): Promise<healthV1.HealthCheckResponse> {
  return new Promise((resolve, reject) => c.check({ service }, (error: ServiceError | null, value: healthV1.HealthCheckResponse) => (error ? reject(error) : resolve(value))));
}

describe("gRPC health", () => {
  it("grpc health - Check follows the gateway's health for the server and its service; another name is NOT_FOUND", async () => {
    let healthy = true;
    const c = await start(() => healthy);
    expect((await check(c, "")).status).toBe(SERVING);
    expect((await check(c, CONTRACT.service)).status).toBe(SERVING);
    healthy = false;
    expect((await check(c, "")).status).toBe(NOT_SERVING);
    const error = await check(c, "tack.nothing.v1.Nope").then(() => undefined, (e: ServiceError) => e);
    expect(error?.code).toBe(GrpcCode.NOT_FOUND);
    expect(error?.details).toContain(CONTRACT.service);
  });

  it("grpc health - Watch sends the status, then each change; an unknown name gets SERVICE_UNKNOWN", async () => {
    let healthy = true;
    const c = await start(() => healthy);
    const seen: healthV1.HealthCheckResponse_ServingStatus[] = [];
    const watch = c.watch({ service: "" });
    watch.on("data", (m: healthV1.HealthCheckResponse) => seen.push(m.status));
    watch.on("error", () => undefined);
    await expect.poll(() => seen, { timeout: 5_000 }).toEqual([SERVING]);
    healthy = false;
    await expect.poll(() => seen, { timeout: 5_000 }).toEqual([SERVING, NOT_SERVING]);
    healthy = true;
    await expect.poll(() => seen, { timeout: 5_000 }).toEqual([SERVING, NOT_SERVING, SERVING]);
    watch.cancel();

    const unknown: healthV1.HealthCheckResponse_ServingStatus[] = [];
    const other = c.watch({ service: "tack.nothing.v1.Nope" });
    other.on("data", (m: healthV1.HealthCheckResponse) => unknown.push(m.status));
    other.on("error", () => undefined);
    await expect.poll(() => unknown, { timeout: 5_000 }).toEqual([SERVICE_UNKNOWN]);
    other.cancel();
  });

  it("grpc health - a stopping server tells its watchers NOT_SERVING and ends their calls at once", async () => {
    const c = await start(() => true);
    const seen: healthV1.HealthCheckResponse_ServingStatus[] = [];
    const watch = c.watch({ service: "" });
    watch.on("data", (m: healthV1.HealthCheckResponse) => seen.push(m.status));
    watch.on("error", () => undefined);
    const ended = new Promise<void>((resolve) => watch.on("status", () => resolve()));
    await expect.poll(() => seen, { timeout: 5_000 }).toEqual([SERVING]);
    const started = Date.now();
    await server!.stop();
    server = undefined;
    await ended;
    expect(seen).toEqual([SERVING, NOT_SERVING]);
    // Not the 5 s grace period a call still open would hold the shutdown for.
    expect(Date.now() - started).toBeLessThan(4_500);
  });
});
