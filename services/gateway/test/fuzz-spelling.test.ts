// Fuzzing how requests are spelled, not what they ask: over 5,000 REST and gRPC requests, from a
// seeded PRNG (FUZZ_SEED picks another run; a failure prints the seed and the case), with the
// path %-encoded letter by letter, slashes encoded, double encoding, `..` and `.` segments,
// overlong UTF-8 and NUL, absolute-form targets (`GET http://host/v1/...`), odd content types and
// charsets, huge headers, bad JSON, and gRPC calls with odd paths, content types, timeouts,
// compression flags and framing. No answer may be a 5xx (or a gRPC INTERNAL, UNKNOWN, UNAVAILABLE
// or DATA_LOSS), and no protected route may answer without a valid key, however it is spelled.
// FUZZ_PROBLEMS=<file> writes every problem found there.
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { connect as h2connect, constants as h2 } from "node:http2";
import { connect as netConnect } from "node:net";
import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Bus, ToolsRpc } from "@tack/bus";
import { gatewayV1, WebSearchHealthResponse } from "@tack/proto";
import { CONTRACT, OPEN_ROUTES, type Gateway } from "@tack/gateway-service";
import { GatewayStack } from "./real-loop.js";
import { seededRandom } from "@tack/testkit";

const KEY_ACME = `acme-${randomBytes(16).toString("hex")}`;
const KEY_GLOBEX = `globex-${randomBytes(16).toString("hex")}`;
const SEED = Number(process.env.FUZZ_SEED ?? 20261207);

let stack: GatewayStack;
let gateway: Gateway;
let responder: Bus;
let own: string;

const random = seededRandom(SEED);
const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
const chance = (p: number) => random() < p;

beforeAll(async () => {
  stack = await GatewayStack.start({
    name: "fuzz-spelling", keys: { acme: KEY_ACME, globex: KEY_GLOBEX }, globexRole: "member", grpc: true,
    policy: { requests_per_minute: 1_000_000 },
  });
  gateway = stack.gateway;
  // The tools service's web search health: the route the report reached without a key.
  responder = await Bus.connect({ url: process.env.NATS_URL ?? "nats://127.0.0.1:4222", namespace: stack.namespace, name: "fuzz-spelling-tools" });
  responder.serve(ToolsRpc.WebSearchHealth, async () => WebSearchHealthResponse.fromPartial({ selected: "brave", providers: [] }));
  await responder.nc.flush();
  const created = await fetch(`${gateway.url}/v1/sessions`, {
    method: "POST", headers: { authorization: `Bearer ${KEY_ACME}`, "content-type": "application/json" }, body: JSON.stringify({ workspace: stack.workspace, model: stack.loop.model }),
  });
  expect(created.status).toBe(201);
  own = ((await created.json()) as { id: string }).id;
}, 60_000);

afterAll(async () => {
  await responder?.close();
  await stack?.stop();
});

// --- REST -----------------------------------------------------------------------------------

/** Operations whose valid requests would need services this stack does not run (the sandbox), or run the scripted model dry. */
const NO_VALID_TARGET = new Set(["CreateWorkspace", "DeleteSession", "CompactSession", "SubmitMessage", "ForkSession"]);

interface Target {
  readonly method: string;
  readonly route: string;
  readonly path: string;
  readonly open: boolean;
  readonly rpc?: string;
}

function targets(): Target[] {
  const out: Target[] = OPEN_ROUTES.map((r) => ({ method: r.method, route: r.route, path: r.route, open: true }));
  for (const spec of CONTRACT.operations) {
    const id = spec.path.startsWith("/v1/sessions/") && !NO_VALID_TARGET.has(spec.rpc) ? own : "s_nope0123456789";
    const path = spec.path.replace("{id}", id).replace("{call_id}", "call_x");
    out.push({ method: spec.method, route: spec.route, path: spec.rpc === "StreamEvents" ? `${path}?follow=0` : path, open: false, rpc: spec.rpc });
  }
  return out;
}

const hex = (c: string) => [...Buffer.from(c, "utf8")].map((b) => `%${b.toString(16).padStart(2, "0")}`).map((e) => (chance(0.5) ? e.toUpperCase() : e.toLowerCase())).join("");

/** Respells a path: each way keeps (or plainly breaks) what it names; the gateway must treat both alike. */
function respell(path: string): string {
  const [bare, query] = path.split("?") as [string, string | undefined];
  let p = bare;
  const ways = 1 + Math.floor(random() * 3);
  for (let i = 0; i < ways; i++) {
    const at = 1 + Math.floor(random() * Math.max(1, p.length - 1));
    switch (Math.floor(random() * 13)) {
      case 0: // %-encode letters
        p = [...p].map((c) => (/[a-z0-9]/i.test(c) && chance(0.3) ? hex(c) : c)).join("");
        break;
      case 1: // an encoded slash
        p = p.replace(/\//g, (s, offset: number) => (offset > 0 && chance(0.4) ? pick(["%2F", "%2f"]) : s));
        break;
      case 2: // double encoding
        p = [...p].map((c) => (/[a-z]/i.test(c) && chance(0.2) ? `%25${c.charCodeAt(0).toString(16)}` : c)).join("");
        break;
      case 3: // a `..` segment that cancels out, or climbs above the root
        p = chance(0.5) ? `${p.slice(0, p.indexOf("/", 1) > 0 ? p.indexOf("/", 1) : p.length)}/x/..${p.slice(p.indexOf("/", 1) > 0 ? p.indexOf("/", 1) : p.length)}` : `/..${p}`;
        break;
      case 4: // encoded dots
        p = `/${pick(["%2e%2e", "%2E%2E", ".%2e", "%2e"])}${p}`;
        break;
      case 5: // overlong UTF-8 for a slash or a letter
        p = p.replace(/\/|v/g, (c) => (chance(0.5) ? (c === "/" ? pick(["%C0%AF", "%E0%80%AF", "%c0%af"]) : pick(["%C1%B6", "%E0%81%B6"])) : c));
        break;
      case 6: // NUL
        p = `${p.slice(0, at)}${pick(["%00", "%2500", "\u0000"])}${p.slice(at)}`;
        break;
      case 7: // doubled or trailing slashes, a dot segment
        p = pick([`/${p}`, `${p}/`, p.replace("/", "//"), p.replace("/", "/./")]);
        break;
      case 8: // matrix parameters, fragments, a backslash
        p = pick([`${p};x=1`, `${p}#frag`, p.replace(/\//g, (s, o: number) => (o > 0 && chance(0.3) ? "\\" : s)), `${p}%3Fa=1`]);
        break;
      case 9: // raw bytes: UTF-8 and latin1 letters, bad %-escapes
        p = `${p.slice(0, at)}${pick(["é", "\u00ff", "%", "%g1", "%c3", "%ff%fe", "\u202e"])}${p.slice(at)}`;
        break;
      case 10: // case
        p = chance(0.5) ? p.toUpperCase() : p.replace(/v1/, "V1");
        break;
      case 11: // very long
        p = `${p}/${"a".repeat(1 + Math.floor(random() * 9000))}`;
        break;
      default: // as it is
        break;
    }
  }
  if (query !== undefined) p += `?${query}`;
  if (chance(0.15)) p += `${query === undefined ? "?" : "&"}${pick(["limit=%31", "a=%00", "follow=0&follow=1", "x=%zz", "%61=1", `pad=${"q".repeat(3000)}`])}`;
  return p;
}

/** An absolute-form request target for a path. */
function absolute(path: string): string {
  return `${pick(["http", "HTTP", "https", "ftp"])}://${pick([`127.0.0.1:${new URL(gateway.url).port}`, "localhost", "evil.invalid", "user:pw@127.0.0.1"])}${path}`;
}

const CONTENT_TYPES = [
  undefined, "application/json", "application/json; charset=utf-8", "application/json;charset=UTF-8", 'application/json; charset="utf-8"',
  "APPLICATION/JSON", "application/json; charset=latin1", "application/json; charset=iso-8859-1", "application/json; charset=utf-16",
  "application/json; charset=", "application/json; boundary=x", "application/vnd.api+json", "text/plain", "text/plain;charset=UTF-8",
  "application/x-www-form-urlencoded", "multipart/form-data; boundary=----x", "application/x-tar", "application/octet-stream", "",
  ";;;", "application/json\u0000", "application/json, text/plain", "*/*", "json",
];

/** A request body: valid JSON of many kinds, or bytes that are not. */
function body(): Buffer | undefined {
  switch (Math.floor(random() * 14)) {
    case 0: return undefined;
    case 1: return Buffer.alloc(0);
    case 2: return Buffer.from(JSON.stringify({ decision: "reject", text: "hi", on: true, mode: "code", name: "k", approve: false, answers: [{ selected: ["a"] }] }));
    case 3: return Buffer.from("{\"text\": \"caf\u00e9\"}", "latin1");
    case 4: return Buffer.from(`\ufeff${JSON.stringify({ text: "bom" })}`, "utf8");
    case 5: return Buffer.from(JSON.stringify({ text: "utf16" }), "utf16le");
    case 6: return Buffer.from(`${"[".repeat(100_000)}${"]".repeat(100_000)}`);
    case 7: return Buffer.from("{\"text\": \"unterminated");
    case 8: return randomBytes(1 + Math.floor(random() * 300));
    case 9: return Buffer.from(`{"text": "${"\\u0000".repeat(50)}", "n": 1e999999}`);
    case 10: return Buffer.from("text=hi&decision=reject");
    case 11: return Buffer.from(JSON.stringify({ __proto__: { admin: true }, constructor: { prototype: { x: 1 } }, text: "proto" }));
    case 12: return Buffer.from("null");
    default: return Buffer.from(JSON.stringify([{ text: "array" }]));
  }
}

interface RestCase {
  readonly what: string;
  readonly target: Target;
  readonly keyed: boolean;
  readonly request: Buffer;
}

function restCase(index: number, all: readonly Target[]): RestCase {
  const target = pick(all);
  const method = chance(0.8) ? target.method : pick(["GET", "POST", "DELETE", "PUT", "PATCH", "OPTIONS", "HEAD", "get", "TRACE", "CONNECT"]);
  // A valid upload would need the sandbox service, which this stack does not run.
  const keyed = chance(0.5) && target.rpc !== "CreateWorkspace";
  const spelled = chance(0.85) ? respell(target.path) : target.path;
  const line = chance(0.12) ? absolute(spelled) : spelled;
  const headers: string[] = [`Host: ${pick(["127.0.0.1", "localhost", "evil.invalid", ""])}`, "Connection: close"];
  if (keyed) headers.push(`Authorization: Bearer ${KEY_ACME}`);
  else {
    const bad = pick([undefined, "Bearer wrong", "Bearer", `Basic ${Buffer.from(`u:${KEY_ACME}`).toString("base64")}`, `Bearer ${KEY_ACME}x`, `bearer  ${"k".repeat(3000)}`]);
    if (bad !== undefined) headers.push(`Authorization: ${bad}`);
  }
  const type = pick(CONTENT_TYPES);
  if (type !== undefined) headers.push(`Content-Type: ${type}`);
  if (chance(0.05)) headers.push(`X-Huge: ${"h".repeat(pick([8_000, 20_000, 70_000]))}`);
  if (chance(0.03)) for (let i = 0; i < 150; i++) headers.push(`X-Many-${i}: ${i}`);
  if (chance(0.05)) headers.push("Content-Type: text/plain");
  if (chance(0.03) && target.rpc !== "CreateWorkspace") headers.push(`Authorization: Bearer ${KEY_GLOBEX}`);
  const payload = body();
  if (payload !== undefined) headers.push(`Content-Length: ${payload.length}`);
  const head = Buffer.from(`${method} ${line} HTTP/1.1\r\n${headers.join("\r\n")}\r\n\r\n`, "latin1");
  // Node keeps the first of two Authorization headers: the request carries a key when that one is valid.
  const first = headers.find((h) => h.startsWith("Authorization: "));
  const carriesKey = first === `Authorization: Bearer ${KEY_ACME}` || first === `Authorization: Bearer ${KEY_GLOBEX}`;
  const what = `#${index} ${method} ${JSON.stringify(line.slice(0, 160))} key=${carriesKey} type=${JSON.stringify(type)} body=${payload?.length ?? "none"}`;
  return { what, target, keyed: carriesKey, request: Buffer.concat([head, payload ?? Buffer.alloc(0)]) };
}

/** Sends raw bytes and resolves with the status line's code (0: the connection closed without an answer). */
function rawHttp(port: number, request: Buffer): Promise<{ status: number; head: string }> {
  return new Promise((resolve) => {
    const socket = netConnect(port, "127.0.0.1");
    let received = Buffer.alloc(0);
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      socket.destroy();
      const head = received.toString("latin1");
      const status = /^HTTP\/1\.[01] (\d{3})/.exec(head);
      resolve({ status: status ? Number(status[1]) : 0, head: head.slice(0, 600) });
    };
    socket.on("data", (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      // The status and headers are all a case needs; an event stream would not end on its own.
      const end = received.indexOf("\r\n\r\n");
      if (end >= 0 && received.length > end + 4 + 200) finish();
    });
    socket.on("end", finish);
    socket.on("close", finish);
    socket.on("error", finish);
    socket.setTimeout(20_000, finish);
    socket.write(request);
  });
}

// --- gRPC -----------------------------------------------------------------------------------

const ENCODERS = gatewayV1 as unknown as Record<string, { encode(message: unknown): { finish(): Uint8Array }; fromPartial(object: unknown): unknown }>;
/** Statuses a server answers for its own failures: what must never come from a caller's request. */
const SERVER_STATUSES = new Set([2, 13, 14, 15]);
const OPEN_GRPC = new Set(["/grpc.health.v1.Health/Check"]);

interface GrpcCase {
  readonly what: string;
  readonly path: string;
  readonly headers: Record<string, string>;
  readonly frames: Buffer;
  readonly keyed: boolean;
  readonly protectedMethod: boolean;
}

function frame(flag: number, message: Buffer, declared = message.length): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt8(flag, 0);
  head.writeUInt32BE(declared, 1);
  return Buffer.concat([head, message]);
}

function grpcCase(index: number): GrpcCase {
  const spec = pick(CONTRACT.operations);
  const id = spec.path.startsWith("/v1/sessions/") && !NO_VALID_TARGET.has(spec.rpc) ? own : "s_nope0123456789";
  const message = Buffer.from(ENCODERS[spec.requestType]!.encode(ENCODERS[spec.requestType]!.fromPartial({ id, callId: "call_x", follow: "0", text: "hi", decision: "reject" })).finish());
  let path = chance(0.1) ? "/grpc.health.v1.Health/Check" : `/${CONTRACT.service}/${spec.rpc}`;
  const health = path.startsWith("/grpc.health");
  if (chance(0.5)) {
    path = pick([
      () => [...path].map((c, i) => (i > 0 && /[a-z]/i.test(c) && chance(0.3) ? hex(c) : c)).join(""),
      () => path.toLowerCase(),
      () => `/${path}`,
      () => `/x/..${path}`,
      () => path.replace(/\/([^/]+)$/, "%2F$1"),
      () => `${path}%00`,
      () => `${path}/`,
      () => `/${CONTRACT.service}/NoSuchMethod`,
      () => `http://127.0.0.1${path}`,
      () => path.replace("v1", "%C1%B6" + "1"),
    ])();
  }
  const keyed = chance(0.5) && spec.rpc !== "CreateWorkspace";
  const headers: Record<string, string> = {
    [h2.HTTP2_HEADER_METHOD]: pick(["POST", "POST", "POST", "GET", "PUT"]),
    [h2.HTTP2_HEADER_PATH]: path,
  };
  const type = pick(["application/grpc", "application/grpc", "application/grpc+proto", "application/grpc+json", "application/grpc; charset=latin1", "text/plain", "application/json", undefined]);
  if (type !== undefined) headers[h2.HTTP2_HEADER_CONTENT_TYPE] = type;
  if (chance(0.9)) headers.te = "trailers";
  if (keyed) headers.authorization = `Bearer ${KEY_ACME}`;
  else if (chance(0.5)) headers.authorization = pick(["Bearer wrong", "Bearer", "Basic eDp5"]);
  const encoding = pick([undefined, undefined, "identity", "gzip", "deflate", "br", "x-unknown"]);
  if (encoding !== undefined) headers["grpc-encoding"] = encoding;
  if (chance(0.1)) headers["grpc-timeout"] = pick(["1S", "abc", "999999999H", "-1m", "1", "5n", ""]);
  if (chance(0.05)) headers["x-huge"] = "h".repeat(pick([4_000, 15_000]));
  if (chance(0.05)) headers["grpc-accept-encoding"] = "gzip, \u00ff";
  let frames: Buffer;
  switch (Math.floor(random() * 11)) {
    case 0: frames = frame(1, message); break; // flagged compressed, but not
    case 1: frames = frame(1, gzipSync(message)); break; // compressed (right only with gzip)
    case 2: frames = frame(1, randomBytes(40)); break; // compressed garbage
    case 3: frames = frame(pick([2, 0x80, 0xff]), message); break; // an undefined flag
    case 4: frames = frame(0, message, message.length + 100); break; // longer than sent
    case 5: frames = Buffer.concat([frame(0, message), frame(0, message)]); break; // two messages for a unary call
    case 6: frames = frame(0, message).subarray(0, 3); break; // a cut header
    case 7: frames = Buffer.alloc(0); break; // no message at all
    case 8: frames = frame(0, randomBytes(1 + Math.floor(random() * 60))); break; // garbage
    case 9: frames = frame(0, Buffer.alloc(0)); break; // empty message
    default: frames = frame(0, message); break;
  }
  const what = `#${index} ${headers[h2.HTTP2_HEADER_METHOD]} ${JSON.stringify(path)} type=${type} key=${keyed} encoding=${encoding} timeout=${headers["grpc-timeout"]} frames=${frames.subarray(0, 5).toString("hex")}+${frames.length}`;
  return { what, path, headers, frames, keyed, protectedMethod: !health };
}

/** Sends a gRPC case on its own connection; the HTTP status and the grpc-status (headers or trailers). */
function grpcSend(port: number, c: GrpcCase): Promise<{ http: number; grpc: number | undefined; message: string; reset?: string }> {
  return new Promise((resolve) => {
    const session = h2connect(`http://127.0.0.1:${port}`);
    let http = 0;
    let grpc: number | undefined;
    let message = "";
    let done = false;
    const finish = (reset?: string) => {
      if (done) return;
      done = true;
      session.destroy();
      resolve({ http, grpc, message, ...(reset ? { reset } : {}) });
    };
    session.on("error", (error) => finish(`session: ${error.message}`));
    const read = (headers: Record<string, unknown>) => {
      if (headers[":status"] !== undefined) http = Number(headers[":status"]);
      if (headers["grpc-status"] !== undefined) grpc = Number(headers["grpc-status"]);
      if (headers["grpc-message"] !== undefined) message = String(headers["grpc-message"]);
    };
    let stream;
    try {
      stream = session.request(c.headers, { endStream: false });
    } catch (error) {
      finish(`request refused by the client: ${(error as Error).message}`);
      return;
    }
    stream.on("response", (headers) => {
      read(headers);
      if (grpc !== undefined) finish();
    });
    stream.on("trailers", (trailers) => {
      read(trailers);
      finish();
    });
    stream.on("data", () => undefined);
    stream.on("end", () => finish());
    stream.on("close", () => finish(http === 0 ? `stream closed (code ${stream.rstCode})` : undefined));
    stream.on("error", (error) => finish(`stream: ${error.message}`));
    stream.setTimeout(20_000, () => finish("timed out"));
    stream.end(c.frames);
  });
}

/** Runs `work` over `items`, `width` at a time. */
async function pool<T>(items: readonly T[], width: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < items.length) await work(items[next++]!);
  }));
}

/** One raw HTTP/1.1 request; its status and JSON error body. */
async function raw(method: string, target: string, headers: Record<string, string> = {}, payload?: string) {
  const lines = [`${method} ${target} HTTP/1.1`, "Host: 127.0.0.1", "Connection: close", ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)];
  if (payload !== undefined) lines.push(`Content-Length: ${Buffer.byteLength(payload)}`);
  const request = Buffer.from(`${lines.join("\r\n")}\r\n\r\n${payload ?? ""}`, "latin1");
  const socket = netConnect(Number(new URL(gateway.url).port), "127.0.0.1");
  // Written, not ended: a client that half-closes may lose an answer still being prepared.
  socket.write(request);
  const chunks: Buffer[] = [];
  for await (const chunk of socket) chunks.push(chunk as Buffer);
  const text = Buffer.concat(chunks).toString("utf8");
  const body = text.slice(text.indexOf("\r\n\r\n") + 4);
  const json = /"error"/.test(body) ? (JSON.parse(body.slice(body.indexOf("{"), body.lastIndexOf("}") + 1)) as { error: { code: string; message: string } }) : undefined;
  return { status: Number(/^HTTP\/1\.1 (\d+)/.exec(text)?.[1] ?? 0), error: json?.error, text };
}

describe("spellings - the reported cases", () => {
  it("spellings - a route spelled with %-escapes needs the key like any other; without one, an unknown path is 401, not 404; with one, 404", async () => {
    const key = { authorization: `Bearer ${KEY_ACME}` };
    for (const target of ["/%761/web/search/health", "/v%31/web/search/health", "/%76%31/sessions", "/v1/s%65ssions", `/v1/sessions/${own}/%74odos`, "/v1/audit", `http://127.0.0.1/v1/sessions`]) {
      const without = await raw("GET", target);
      expect(without.status, target).toBe(401);
      expect(without.error?.code, target).toBe("gateway.missing_api_key");
      expect((await raw("GET", target, key)).status, target).toBe(200);
    }
    for (const target of ["/v1/nothing", "/nothing", "/v1%2Fsessions", "/v1/x/../sessions", "/%2e%2e/v1/sessions"]) {
      expect((await raw("GET", target)).status, target).toBe(401);
      const keyed = await raw("GET", target, key);
      expect(keyed.status, target).toBe(404);
      expect(keyed.error?.code).toBe("gateway.route_not_found");
    }
    // The open routes stay open, however spelled.
    expect((await raw("GET", "/health%7A")).status).toBe(200);
    expect((await raw("GET", "/v1/openapi.json")).status).toBe(200);
  });

  it("spellings - a JSON body with another content type (text/plain, a latin1 charset, none, one that is no media type) is 415 gateway.unsupported_media_type naming what was sent and what is taken", async () => {
    const key = { authorization: `Bearer ${KEY_ACME}` };
    const body = JSON.stringify({ text: "hi" });
    const path = `/v1/sessions/${own}/messages`;
    for (const [type, shown] of [["text/plain;charset=UTF-8", '"text/plain;charset=UTF-8"'], ["application/json; charset=latin1", '"application/json; charset=latin1"'], [undefined, "none"], [";;;", '";;;"'], ["application/x-www-form-urlencoded", '"application/x-www-form-urlencoded"']] as const) {
      const answer = await raw("POST", path, { ...key, ...(type === undefined ? {} : { "Content-Type": type }) }, body);
      expect(answer.status, String(type)).toBe(415);
      expect(answer.error?.code).toBe("gateway.unsupported_media_type");
      expect(answer.error?.message).toBe(`the request body's content type is ${shown}, which this route does not take; send Content-Type: application/json (with charset=utf-8 or no charset)`);
    }
    // JSON in UTF-8, with or without the charset (any case, quoted), is taken; an empty body needs no type.
    for (const type of ["application/json", "application/json; charset=utf-8", 'Application/JSON;Charset="UTF-8"']) {
      expect((await raw("POST", `/v1/sessions/${own}/plan_mode`, { ...key, "Content-Type": type }, JSON.stringify({ on: false }))).status, type).toBe(200);
    }
    expect((await raw("POST", `/v1/sessions/${own}/cancel`, { ...key, "Content-Type": "text/plain" }, "")).status).toBe(200);
    // Nested deeper than the gateway validates: refused as malformed, not a stack overflow.
    const deep = await raw("POST", "/v1/sessions", { ...key, "Content-Type": "application/json" }, `${"[".repeat(5000)}${"]".repeat(5000)}`);
    expect(deep.status).toBe(400);
    expect(deep.error?.message).toContain("nested more than 64");
  });

  it("spellings - gRPC: a grpc-timeout that is no deadline and a compressed message that does not decompress are INVALID_ARGUMENT with a message, not INTERNAL", async () => {
    const path = `/${CONTRACT.service}/GetSession`;
    const message = Buffer.from(gatewayV1.GetSessionRequest.encode({ id: own }).finish());
    const base = { [h2.HTTP2_HEADER_METHOD]: "POST", [h2.HTTP2_HEADER_PATH]: path, [h2.HTTP2_HEADER_CONTENT_TYPE]: "application/grpc", te: "trailers", authorization: `Bearer ${KEY_ACME}` };
    const send = (headers: Record<string, string>, frames: Buffer) => grpcSend(gateway.grpcPort!, { what: "", path, headers, frames, keyed: true, protectedMethod: true });
    expect(await send(base, frame(0, message))).toMatchObject({ http: 200, grpc: 0 });
    const timeout = await send({ ...base, "grpc-timeout": "abc" }, frame(0, message));
    expect(timeout.grpc).toBe(3);
    expect(decodeURIComponent(timeout.message)).toContain('the grpc-timeout header "abc" is not a deadline');
    const compressed = await send({ ...base, "grpc-encoding": "gzip" }, frame(1, randomBytes(30)));
    expect(compressed.grpc).toBe(3);
    expect(decodeURIComponent(compressed.message)).toContain("does not decompress");
    expect(await send({ ...base, "grpc-encoding": "gzip" }, frame(1, gzipSync(message)))).toMatchObject({ grpc: 0 });
    const health = await send({ ...base, [h2.HTTP2_HEADER_PATH]: "/grpc.health.v1.Health/Check" }, frame(0, Buffer.from([0x0a, 0x7f, 0x41])));
    expect(health.grpc).toBe(3);
  });
});

describe("fuzz - spellings", () => {
  it("fuzz spelling - 5,000+ REST and gRPC requests with odd encodings, content types, targets, headers and framing: no 5xx and no protected route answers without a key", async () => {
    const port = Number(new URL(gateway.url).port);
    const all = targets();
    const rest = Array.from({ length: 4_000 }, (_, i) => restCase(i, all));
    const grpc = Array.from({ length: 1_200 }, (_, i) => grpcCase(i));
    // The report's own spellings, every time.
    for (const path of ["/%761/web/search/health", "/%76%31/sessions", "/v%31/audit", "/%2576%31/sessions", `/v1/sessions/${own}/%65vents?follow=0`]) {
      rest.push({ what: `report: GET ${path}`, target: all.find((t) => t.rpc === "ListSessions")!, keyed: false, request: Buffer.from(`GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`) });
    }
    const problems: string[] = [];
    const statuses = new Map<number, number>();
    await pool(rest, 8, async (c) => {
      const { status, head } = await rawHttp(port, c.request);
      statuses.set(status, (statuses.get(status) ?? 0) + 1);
      if (status === 0 || status >= 500) problems.push(`REST ${c.what}: ${status} ${head.split("\r\n\r\n")[1]?.slice(0, 200) ?? ""}`);
      // Without the key, a protected route's spelling must not reach it, nor learn the route map.
      else if (!c.keyed && !c.target.open && ![400, 401, 414, 431].includes(status) && !(status === 405 && c.request.subarray(0, 8).toString() === "CONNECT ")) problems.push(`REST ${c.what}: answered ${status} without a key`);
    });
    const grpcCodes = new Map<string, number>();
    const grpcPort = gateway.grpcPort!;
    await pool(grpc, 8, async (c) => {
      const answer = await grpcSend(grpcPort, c);
      const label = answer.reset ? "reset" : `${answer.http}/${answer.grpc}`;
      grpcCodes.set(label, (grpcCodes.get(label) ?? 0) + 1);
      if (answer.http >= 500 || (answer.grpc !== undefined && SERVER_STATUSES.has(answer.grpc))) problems.push(`gRPC ${c.what}: HTTP ${answer.http} grpc-status ${answer.grpc} ${answer.message.slice(0, 200)}`);
      // A request HTTP/2 itself refuses (a :path that is no path, say) is reset: a refusal, not a server failure.
      else if (answer.reset && answer.reset !== "timed out" && !/NGHTTP2_PROTOCOL_ERROR|NGHTTP2_REFUSED_STREAM|stream closed \(code [18]\)/i.test(answer.reset)) problems.push(`gRPC ${c.what}: ${answer.reset}`);
      else if (answer.reset === "timed out") problems.push(`gRPC ${c.what}: no answer in 20 s`);
      else if (!c.keyed && c.protectedMethod && !OPEN_GRPC.has(c.path) && answer.grpc === 0) problems.push(`gRPC ${c.what}: OK without a key`);
    });
    console.log(`fuzz spelling (seed ${SEED}): ${rest.length} REST (statuses ${JSON.stringify(Object.fromEntries([...statuses].sort()))}), ${grpc.length} gRPC (${JSON.stringify(Object.fromEntries([...grpcCodes].sort()))})`);
    if (process.env.FUZZ_PROBLEMS) writeFileSync(process.env.FUZZ_PROBLEMS, problems.join("\n"));
    expect(problems.slice(0, 40), `seed ${SEED}: ${problems.length} problems`).toEqual([]);
    expect(rest.length + grpc.length).toBeGreaterThanOrEqual(5_000);
    expect((await fetch(`${gateway.url}/healthz`)).status).toBe(200);
  }, 300_000);
});
