import { randomBytes } from "node:crypto";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Bus, LlmRpc, LoopRpc, SandboxRpc } from "@tack/bus";
import { deriveRequest, readAll, SpillBucket } from "@tack/log";
import { CompleteRequest, CreateSessionRequest, Event, ExecResponse, ImageRef, Role } from "@tack/proto";
import { startLoopService, type LoopService } from "@tack/loop-service";
import { startToolsService, type ToolsService } from "@tack/tools-service";
import { removeNamespace, waitFor } from "@tack/testkit";

// An image `read` returns, through the real loop, the real tools service and real NATS (log
// stream and spill object store). Scripted on the bus: the model, and the sandbox, which answers
// read's script for shot.png as a container holding a 640x480 PNG would.
const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const namespace = `t${randomBytes(5).toString("hex")}`;
const workspace = mkdtempSync(join(tmpdir(), "tack-images-"));
const png = Buffer.concat([
  Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13, 0x49, 0x48, 0x44, 0x52, 0, 0, 2, 0x80, 0, 0, 1, 0xe0]),
  randomBytes(30_000),
]);
let bus: Bus;
let tools: ToolsService;
let loop: LoopService;
const requests: CompleteRequest[] = [];

beforeAll(async () => {
  bus = await Bus.connect({ url: NATS_URL, namespace, name: "images-test" });
  bus.serve(LlmRpc.Complete, async (req, w) => {
    requests.push(req);
    const toolCalls = requests.length === 1 ? [{ id: "img_1", name: "read", arguments: JSON.stringify({ path: "shot.png" }) }] : [];
    w.send({ index: 0, body: { $case: "done", value: {
      content: toolCalls.length ? "" : "a chart", reasoningContent: "", toolCalls, finishReason: toolCalls.length ? "tool_calls" : "stop",
      usage: undefined, model: "scripted", costUsd: 0, priceWindow: "",
    } } });
  });
  bus.serve(LlmRpc.CheckModel, async () => ({ provider: "scripted" }));
  bus.serve(SandboxRpc.EnsureSandbox, async () => ({ containerId: "scripted", created: false, runtime: "scripted" }));
  bus.serve(SandboxRpc.Exec, async (req) => {
    if (req.argv[3] !== "read" || req.argv[4] !== "shot.png") {
      return ExecResponse.fromPartial({ exitCode: 127, stderr: Buffer.from(`unexpected command ${req.argv.join(" ")}`) });
    }
    return ExecResponse.fromPartial({ exitCode: 0, stdout: Buffer.from(`image ${png.length}\n${png.toString("base64")}`) });
  });
  tools = await startToolsService({ natsUrl: NATS_URL, namespace });
  loop = await startLoopService({ natsUrl: NATS_URL, namespace });
});

afterAll(async () => {
  await loop.stop();
  await tools.stop();
  await removeNamespace(bus.nc, namespace);
  await bus.close();
});

describe("images", () => {
  it("images - read of a PNG: the bytes go to the spill bucket, tool/result and the next request carry a reference, never the bytes", async () => {
    const { sessionId } = await bus.request(LoopRpc.CreateSession, CreateSessionRequest.fromPartial({ model: "scripted:x", workspace }));
    await bus.request(LoopRpc.SubmitMessage, { tenant: "local", sessionId, text: "what is in shot.png?" });
    const address = { tenant: "local", sessionId };
    const events = await waitFor("turn/end", async () => {
      const all = await readAll(bus.nc, bus.names, address);
      return all.some((e) => e.type === "turn/end") && all;
    }, { timeoutMs: 20_000, intervalMs: 50 });

    const ref: ImageRef = { mimeType: "image/png", object: `local.${sessionId}.img_1.image1`, bytes: png.length, width: 640, height: 480 };
    const result = events.flatMap((e) => (e.payload?.$case === "toolResult" ? [e.payload.value] : []))[0]!;
    expect(result).toMatchObject({ callId: "img_1", isError: false, content: `[image: shot.png, PNG 640x480, ${Math.round(png.length / 1024)} KB]`, images: [ref] });
    // The log holds the reference only.
    expect(Event.encode(events.find((e) => e.payload?.$case === "toolResult")!).finish().length).toBeLessThan(500);
    const stored = await (await SpillBucket.open(bus.nc, bus.names))!.get(address, "img_1.image1");
    expect(Buffer.from(stored!).equals(png)).toBe(true);

    // The request the model got carries the same reference on the tool's message, as the log derives it.
    const sent = requests[1]!.messages.find((m) => m.role === Role.ROLE_TOOL)!;
    expect(sent).toMatchObject({ toolCallId: "img_1", images: [ref] });
    expect(deriveRequest(events).messages.find((m) => m.role === Role.ROLE_TOOL)!.images).toEqual([ref]);
  });
});
