// End to end: a model that views images reads a PNG in a real sandbox workspace, and the image
// reaches it. Every service as its own process, the machine's NATS JetStream, real Docker, and a
// local server speaking the Anthropic Messages API in place of Anthropic.
import { randomBytes } from "node:crypto";
import { chownSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Bus } from "@tack/bus";
import { launch, type Launched } from "@tack/cli";
import { removeNamespace, waitFor } from "@tack/testkit";
import { sseJson } from "./support/sse.js";

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const namespace = `e2e${randomBytes(4).toString("hex")}`;
const work = mkdtempSync(join(tmpdir(), "tack-e2e-images-"));
const stateDir = join(work, "data");
// A 320x200 PNG header and random bytes: what reaches the model must be these exact bytes.
const png = Buffer.concat([
  Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13, 0x49, 0x48, 0x44, 0x52, 0, 0, 1, 0x40, 0, 0, 0, 0xc8]),
  randomBytes(300 * 1024),
]);
let tack: Launched;
let anthropic: Server;
const bodies: Array<{ messages: Array<{ role: string; content: Array<Record<string, unknown>> }> }> = [];

/** The Messages API stream of one reply: a read of shot.png, or (once a tool result came back) a text. */
function reply(toolUse: boolean): string {
  const events: object[] = [
    { type: "message_start", message: { model: "claude-test", usage: { input_tokens: 10, output_tokens: 1 } } },
    toolUse
      ? { type: "content_block_start", index: 0, content_block: { type: "tool_use", id: "toolu_img", name: "read", input: {} } }
      : { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
    toolUse
      ? { type: "content_block_delta", index: 0, delta: { type: "input_json_delta", partial_json: '{"path":"shot.png"}' } }
      : { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "A picture." } },
    { type: "content_block_stop", index: 0 },
    { type: "message_delta", delta: { stop_reason: toolUse ? "tool_use" : "end_turn" }, usage: { output_tokens: 5 } },
    { type: "message_stop" },
  ];
  return events.map((e) => `event: ${(e as { type: string }).type}\ndata: ${JSON.stringify(e)}\n\n`).join("");
}

async function api(path: string, json?: unknown): Promise<Response> {
  return fetch(`${tack.gatewayUrl}${path}`, {
    method: json === undefined ? "GET" : "POST",
    headers: { authorization: `Bearer ${tack.apiKey}`, ...(json === undefined ? {} : { "content-type": "application/json" }) },
    body: json === undefined ? undefined : JSON.stringify(json),
  });
}

beforeAll(async () => {
  anthropic = createServer((req, res) => {
    let raw = "";
    req.on("data", (c: Buffer) => { raw += c.toString(); });
    req.on("end", () => {
      const body = JSON.parse(raw) as (typeof bodies)[number];
      bodies.push(body);
      const answered = body.messages.some((m) => m.content.some((b) => b.type === "tool_result"));
      res.writeHead(200, { "content-type": "text/event-stream" }).end(reply(!answered));
    });
  });
  await new Promise<void>((r) => anthropic.listen(0, "127.0.0.1", r));
  const baseUrl = `http://127.0.0.1:${(anthropic.address() as { port: number }).port}`;
  tack = await launch({
    dataDir: stateDir, natsUrl: NATS_URL, namespace,
    env: { TACK_LEASE_TTL_MS: "2000", TACK_STATE_DIR: stateDir, ANTHROPIC_API_KEY: "sk-ant-e2e", ANTHROPIC_BASE_URL: baseUrl },
  });
}, 120_000);

afterAll(async () => {
  await tack?.stop();
  const bus = await Bus.connect({ url: NATS_URL, namespace, name: "e2e-images-cleanup" });
  await removeNamespace(bus.nc, namespace);
  await bus.close();
  anthropic?.close();
  rmSync(work, { recursive: true, force: true });
});

describe("end to end: images", () => {
  it("e2e images - the model calls read on a PNG in the sandbox and the next request holds the image in the tool_result", async () => {
    const ws = join(work, "ws");
    mkdirSync(ws, { recursive: true });
    writeFileSync(join(ws, "shot.png"), png);
    if (process.getuid?.() === 0) {
      chownSync(ws, 1000, 1000);
      chownSync(join(ws, "shot.png"), 1000, 1000);
    }
    const created = await api("/v1/sessions", { workspace: ws, model: "anthropic:claude-sonnet-4-5" });
    expect(created.status, await created.clone().text()).toBe(201);
    const { id } = (await created.json()) as { id: string };
    expect((await api(`/v1/sessions/${id}/messages`, { text: "what is in shot.png?" })).status).toBe(202);
    const log = await waitFor(`turn 1 of ${id} to end`, async () => {
      const text = await (await api(`/v1/sessions/${id}/events?follow=0`)).text();
      const events = sseJson<{ type: string } & Record<string, unknown>>(text);
      if (events.some((e) => e.type === "turn/end")) return events;
      throw new Error(`log so far: ${events.map((e) => e.type).join(", ")}`);
    }, { timeoutMs: 90_000 });
    expect(log.at(-1)).toMatchObject({ turnEnd: { reason: "completed" } });
    const result = log.find((e) => e.type === "tool/result")!.toolResult as Record<string, unknown>;
    expect(result).toMatchObject({ content: "[image: shot.png, PNG 320x200, 300 KB]", images: [{ mimeType: "image/png", width: 320, height: 200 }] });

    expect(bodies).toHaveLength(2);
    const toolResult = bodies[1]!.messages.flatMap((m) => m.content).find((b) => b.type === "tool_result")!;
    expect(toolResult).toMatchObject({
      tool_use_id: "toolu_img",
      content: [
        { type: "text", text: "[image: shot.png, PNG 320x200, 300 KB]" },
        { type: "image", source: { type: "base64", media_type: "image/png", data: png.toString("base64") } },
      ],
    });
  }, 120_000);
});
