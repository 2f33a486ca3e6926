// Fuzzing: over a thousand generated malformed requests across every REST and gRPC operation of
// the contract (wrong types, huge values, bad UTF-8, truncated bodies and messages, bad ids, other
// tenants' ids, bad keys), each of which must be refused with a 4xx (or a caller's gRPC status)
// and a specific message, never a 5xx; the gateway must still be healthy afterwards, and nothing
// may have been written: the index's tables, the session log and the loop see no change.
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import SQLite from "better-sqlite3";
import { credentials, Metadata, type Client, type ServiceError } from "@grpc/grpc-js";
import { jetstreamManager } from "@nats-io/jetstream";
import { Bus } from "@tack/bus";
import { gatewayV1 } from "@tack/proto";
import { CONTRACT, MAX_BODY_BYTES, type Gateway, type OperationSpec } from "@tack/gateway-service";
import { GatewayStack, type RealLoop } from "./real-loop.js";
import { seededRandom } from "@tack/testkit";

const KEY_ACME = `acme-${randomBytes(16).toString("hex")}`;
const KEY_GLOBEX = `globex-${randomBytes(16).toString("hex")}`;

let stack: GatewayStack;
let bus: Bus;
let loop: RealLoop;
let gateway: Gateway;
let client: Client;
let dir: string;
let workspace: string;
let own: string;
let foreign: string;

const random = seededRandom(11);

beforeAll(async () => {
  stack = await GatewayStack.start({
    name: "fuzz", keys: { acme: KEY_ACME, globex: KEY_GLOBEX }, globexRole: "member", grpc: true,
    // No rate limit in the way: every malformed request must be refused for what it is.
    policy: { requests_per_minute: 1_000_000 },
  });
  ({ bus, loop, gateway, dir, workspace } = stack);
  client = new gatewayV1.GatewayClient(`127.0.0.1:${gateway.grpcPort}`, credentials.createInsecure(), { "grpc.max_send_message_length": 64 * 1024 * 1024 });
  const create = async (key: string) => {
    const res = await fetch(`${gateway.url}/v1/sessions`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify({ workspace, model: loop.model }) });
    expect(res.status).toBe(201);
    return ((await res.json()) as { id: string }).id;
  };
  own = await create(KEY_ACME);
  foreign = await create(KEY_GLOBEX);
  const posted = await fetch(`${gateway.url}/v1/sessions/${own}/messages`, { method: "POST", headers: { authorization: `Bearer ${KEY_ACME}`, "content-type": "application/json" }, body: JSON.stringify({ text: "hello" }) });
  expect(posted.status).toBe(202);
  // The turn the message started ends before the cases run, so the log holds still while they do.
  await loop.idle("acme", own);
});

afterAll(async () => {
  client?.close();
  await stack?.stop();
});

/** What must not change: every table of the index, the log stream, and what the loop was asked. */
async function snapshot(): Promise<string> {
  const sqlite = new SQLite(join(dir, "index.db"), { readonly: true });
  try {
    const tables = Object.fromEntries(["tenants", "api_keys", "sessions", "audit", "workspaces"].map((t) => [t, sqlite.prepare(`select * from ${t} order by 1`).all()]));
    const jsm = await jetstreamManager(bus.nc);
    const { state } = await jsm.streams.info(bus.names.logStream);
    return JSON.stringify({ tables, log: [state.messages, state.last_seq], loop: loop.subjects.length });
  } finally {
    sqlite.close();
  }
}

/** A valid body for each operation that takes one; the cases break it. */
const VALID: Record<string, Record<string, unknown>> = {
  CreateSession: { workspace: "/tmp", model: "scripted:/abs/hello.json" },
  SubmitMessage: { text: "hi" },
  DecideApproval: { decision: "reject" },
  AnswerQuestion: { answers: [{ selected: ["a"], other: "" }] },
  DecidePlan: { approve: false },
  SetPlanMode: { on: true },
  SetSessionMode: { mode: "code" },
  SetSandboxMode: { mode: "read-only" },
  ArchiveSession: { archived: true },
  CompactSession: { instructions: "keep the file names" },
  CreateKey: { name: "k" },
  // Every case breaks the body, the key or the id, so no fork is made; an empty bundle is no session.
  ForkSession: { turn: 1 },
  ImportSession: { format: "tack.session-bundle/v1", events: [] },
};

interface RestCase {
  readonly what: string;
  readonly method: string;
  readonly path: string;
  readonly headers: Record<string, string>;
  readonly body?: string | Buffer;
}

const fill = (spec: OperationSpec, ids: Record<string, string>) => spec.path.replace(/\{(\w+)\}/g, (_, name: string) => encodeURIComponent(ids[name] ?? "x"));
const auth = (key = KEY_ACME) => ({ authorization: `Bearer ${key}` });

/** Values of the wrong JSON type for a schema type. */
function wrongTypes(type: unknown): unknown[] {
  const all: unknown[] = [12345, -1.5, true, null, {}, [], "text", [1, "a"], { nested: { deep: [] } }];
  const ok = (v: unknown) => (type === "string" && typeof v === "string") || (type === "boolean" && typeof v === "boolean")
    || ((type === "integer" || type === "number") && typeof v === "number") || (type === "array" && Array.isArray(v));
  return all.filter((v) => !ok(v));
}

/** Breaks a JSON body's bytes: invalid UTF-8 inside a string. */
function badUtf8(json: string): Buffer {
  const quote = json.indexOf('"', 1);
  const at = quote > 0 ? quote + 1 : 1;
  return Buffer.concat([Buffer.from(json.slice(0, at)), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from(json.slice(at))]);
}

function restCases(): RestCase[] {
  const cases: RestCase[] = [];
  const BAD_IDS = ["nope", "..", "x".repeat(300), "s0123456789ab", "%00", "a.b.c", "é", foreign];
  for (const spec of CONTRACT.operations) {
    const ids = { id: spec.path.startsWith("/v1/sessions/") ? own : "nope", call_id: "call_x" };
    const valid = VALID[spec.rpc];
    const json = valid ? JSON.stringify(valid) : undefined;
    const jsonHeaders = { ...auth(), "content-type": "application/json" };
    const base = { method: spec.method, path: fill(spec, ids) };
    // Keys: none, unknown, malformed, another scheme.
    for (const headers of [{}, auth("wrong-key"), { authorization: "Bearer" }, { authorization: `Basic ${Buffer.from("a:b").toString("base64")}` }, { authorization: `Bearer ${"k".repeat(5000)}` }]) {
      cases.push({ what: `${spec.rpc}: bad key`, ...base, headers, ...(json ? { body: json } : {}) });
    }
    // Ids that do not exist for this key, another tenant's included.
    if (spec.path.includes("{id}")) {
      const other = spec.path.startsWith("/v1/sessions/") ? BAD_IDS : ["nope", "ws_0123456789abcdef0123", "x".repeat(300), "..", foreign];
      for (const id of other) cases.push({ what: `${spec.rpc}: id ${id.slice(0, 20)}`, method: spec.method, path: fill(spec, { ...ids, id }), headers: jsonHeaders, ...(json ? { body: json } : {}) });
    }
    if (spec.schemas.body && valid) {
      const properties = spec.schemas.body.properties as Record<string, { type?: string; maxLength?: number; enum?: string[]; pattern?: string; items?: { maxLength?: number } }>;
      const required = (spec.schemas.body.required as string[] | undefined) ?? [];
      for (const [field, schema] of Object.entries(properties)) {
        for (const value of wrongTypes(schema.type)) cases.push({ what: `${spec.rpc}: ${field} = ${JSON.stringify(value)}`, ...base, headers: jsonHeaders, body: JSON.stringify({ ...valid, [field]: value }) });
        if (schema.maxLength) cases.push({ what: `${spec.rpc}: ${field} too long`, ...base, headers: jsonHeaders, body: JSON.stringify({ ...valid, [field]: `/${"y".repeat(schema.maxLength)}` }) });
        if (schema.enum || schema.pattern) {
          // `\S` (a text that must not be blank) refuses only blank values.
          for (const value of schema.pattern === "\\S" ? ["", " ", "\n\t "] : ["", " ", "\u0000", "INVALID VALUE", "../../etc"]) cases.push({ what: `${spec.rpc}: ${field} = ${JSON.stringify(value)}`, ...base, headers: jsonHeaders, body: JSON.stringify({ ...valid, [field]: value }) });
        }
        if (required.includes(field)) {
          const rest = Object.fromEntries(Object.entries(valid).filter(([k]) => k !== field));
          cases.push({ what: `${spec.rpc}: without ${field}`, ...base, headers: jsonHeaders, body: JSON.stringify(rest) });
        }
      }
      for (const value of [[], "x", 1, null, true, [valid]]) cases.push({ what: `${spec.rpc}: body ${JSON.stringify(value).slice(0, 20)}`, ...base, headers: jsonHeaders, body: JSON.stringify(value) });
      cases.push({ what: `${spec.rpc}: unknown key`, ...base, headers: jsonHeaders, body: JSON.stringify({ ...valid, [`extra_${Math.floor(random() * 1000)}`]: 1 }) });
      // Truncated at several points, and bad UTF-8, and a body over the limit.
      for (let i = 0; i < 6; i++) {
        const cut = 1 + Math.floor(random() * (json!.length - 1));
        cases.push({ what: `${spec.rpc}: cut at ${cut}`, ...base, headers: jsonHeaders, body: json!.slice(0, cut) });
      }
      cases.push({ what: `${spec.rpc}: bad UTF-8`, ...base, headers: jsonHeaders, body: badUtf8(json!) });
      cases.push({ what: `${spec.rpc}: garbage`, ...base, headers: jsonHeaders, body: randomBytes(200) });
      cases.push({ what: `${spec.rpc}: empty body`, ...base, headers: jsonHeaders, body: "" });
      cases.push({ what: `${spec.rpc}: over 1 MiB`, ...base, headers: jsonHeaders, body: JSON.stringify({ ...valid, pad: "z".repeat(MAX_BODY_BYTES) }) });
    } else if (spec.method === "POST" && spec.rpc !== "CreateWorkspace") {
      // Operations without a body schema still refuse a body that is not JSON.
      cases.push({ what: `${spec.rpc}: garbage body`, ...base, path: fill(spec, { ...ids, id: foreign }), headers: jsonHeaders, body: "{" });
    }
    const query = spec.schemas.querystring?.properties as Record<string, { type?: string }> | undefined;
    if (query && spec.method === "GET") {
      const BAD: Record<string, string[]> = {
        limit: ["-1", "0", "201", "abc", "1e400", "1.5", "99999999999999999999"], offset: ["-1", "x", "1.5"], archived: ["maybe", "2"],
        created_before: ["nope", "2025-13", "x".repeat(300)], created_after: ["yesterday"], cursor: ["!!", "abc", "W10", "x".repeat(500)],
        workspace: ["x".repeat(5000)], from: ["0", "-1", "abc", "1.5", "9".repeat(30)], follow: ["maybe", "2"], refresh: ["true"],
      };
      for (const name of Object.keys(query)) {
        for (const value of BAD[name] ?? []) {
          // refresh=true is refused to member keys (403); any other key would probe the providers.
          const key = name === "refresh" ? KEY_GLOBEX : KEY_ACME;
          cases.push({ what: `${spec.rpc}: ?${name}=${value.slice(0, 20)}`, method: "GET", path: `${base.path}?${name}=${encodeURIComponent(value)}${spec.rpc === "StreamEvents" ? "&follow=0" : ""}`, headers: auth(key) });
        }
      }
    }
    if (spec.rpc === "StreamEvents") {
      for (const id of ["x", "-1", "1.5", "9".repeat(30)]) cases.push({ what: `StreamEvents: Last-Event-ID ${id}`, method: "GET", path: `${base.path}?follow=0`, headers: { ...auth(), "last-event-id": id } });
    }
    if (spec.rpc === "CreateWorkspace") {
      cases.push({ what: "CreateWorkspace: text body", method: "POST", path: spec.path, headers: { ...auth(), "content-type": "text/plain" }, body: "not a tar" });
      cases.push({ what: "CreateWorkspace: JSON body", method: "POST", path: spec.path, headers: { ...auth(), "content-type": "application/json" }, body: "{}" });
      cases.push({ what: "CreateWorkspace: long title", method: "POST", path: `${spec.path}?title=${"t".repeat(201)}`, headers: auth() });
    }
    if (spec.path.startsWith("/v1/admin/") && spec.method !== "GET") {
      cases.push({ what: `${spec.rpc}: member key`, ...base, path: fill(spec, { id: "0123456789ab" }), headers: { ...auth(KEY_GLOBEX), "content-type": "application/json" }, ...(json ? { body: json } : {}) });
    }
  }
  cases.push({ what: "unknown route", method: "GET", path: "/v1/nothing", headers: auth() });
  cases.push({ what: "bad %-escape", method: "GET", path: "/v1/sessions/%zz", headers: auth() });
  cases.push({ what: "wrong method", method: "PUT", path: "/v1/sessions", headers: auth() });
  cases.push({ what: "a foreign key creating a key of acme", method: "POST", path: "/v1/admin/keys", headers: { ...auth(), "content-type": "application/json" }, body: JSON.stringify({ tenant: "globex" }) });
  return cases;
}

/** Runs `work` over `items`, `width` at a time. */
async function pool<T>(items: readonly T[], width: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < items.length) await work(items[next++]!);
  }));
}

const CALLER_STATUSES = new Set([3, 5, 7, 8, 9, 11, 12, 16]);
const GRPC_ENCODERS = gatewayV1 as unknown as Record<string, { encode(message: unknown): { finish(): Uint8Array }; fromPartial(object: unknown): unknown }>;

interface GrpcCase {
  readonly what: string;
  readonly rpc: string;
  readonly stream: boolean;
  /** Raw request bytes (a message, or garbage). */
  readonly bytes: Buffer;
  readonly key: string | null;
}

function grpcCases(): GrpcCase[] {
  const cases: GrpcCase[] = [];
  const encode = (type: string, message: unknown) => Buffer.from(GRPC_ENCODERS[type]!.encode(GRPC_ENCODERS[type]!.fromPartial(message)).finish());
  const camel = (name: string) => name.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
  for (const spec of CONTRACT.operations) {
    const stream = spec.serverStreaming;
    const valid = { id: spec.path.startsWith("/v1/sessions/") ? own : "nope", callId: "call_x", ...Object.fromEntries(Object.entries(VALID[spec.rpc] ?? {}).map(([k, v]) => [camel(k), v])) };
    if (spec.rpc === "StreamEvents") Object.assign(valid, { follow: "0" });
    const good = encode(spec.requestType, valid);
    for (const key of [null, "wrong-key", "Bearer"]) cases.push({ what: `${spec.rpc}: key ${key}`, rpc: spec.rpc, stream, bytes: good, key: key === "Bearer" ? "" : key });
    // Bytes that are no message of the type: an invalid wire type, a length past the end, cut messages.
    cases.push({ what: `${spec.rpc}: wire type 7`, rpc: spec.rpc, stream, bytes: Buffer.from([0x0f, 0x01]), key: KEY_ACME });
    cases.push({ what: `${spec.rpc}: length past the end`, rpc: spec.rpc, stream, bytes: Buffer.from([0x0a, 0x7f, 0x41]), key: KEY_ACME });
    const long = encode(spec.requestType, { ...valid, id: `${own}${"z".repeat(300)}` });
    // A message without length-delimited fields cannot be cut into an invalid one.
    if (long.length > 8) for (let i = 0; i < 3; i++) cases.push({ what: `${spec.rpc}: cut message`, rpc: spec.rpc, stream, bytes: long.subarray(0, 2 + Math.floor(random() * (long.length - 3))), key: KEY_ACME });
    if (spec.path.includes("{id}")) {
      for (const id of ["", "nope", "..", "x".repeat(10_000), "\u0000", "a.b", foreign, "ws_0123456789abcdef0123"]) {
        cases.push({ what: `${spec.rpc}: id ${JSON.stringify(id.slice(0, 12))}`, rpc: spec.rpc, stream, bytes: encode(spec.requestType, { ...valid, id }), key: KEY_ACME });
      }
    }
    const properties = { ...(spec.schemas.body?.properties as object | undefined), ...(spec.schemas.querystring?.properties as object | undefined) } as Record<string, { type?: string; maxLength?: number; enum?: string[]; pattern?: string }>;
    for (const [field, schema] of Object.entries(properties)) {
      if (schema.type === "string" && (schema.maxLength || schema.pattern || schema.enum)) {
        const values = [`/${"h".repeat((schema.maxLength ?? 100_000) + 1)}`, ...(schema.pattern === "\\S" ? ["  \n"] : schema.pattern || schema.enum ? ["INVALID VALUE", " ", "\u0000x"] : [])];
        for (const value of values) cases.push({ what: `${spec.rpc}: ${field} = ${value.slice(0, 16)}`, rpc: spec.rpc, stream, bytes: encode(spec.requestType, { ...valid, [camel(field)]: value }), key: KEY_ACME });
      }
      if (schema.type === "integer" && field !== "offset") {
        for (const value of [100_000, 4_294_967_295]) cases.push({ what: `${spec.rpc}: ${field} = ${value}`, rpc: spec.rpc, stream, bytes: encode(spec.requestType, { ...valid, [camel(field)]: value }), key: KEY_ACME });
      }
    }
    // Bad UTF-8 inside the id string: decoded leniently, then not found.
    if (spec.path.includes("{id}")) {
      const bytes = Buffer.concat([Buffer.from([0x0a, 4]), Buffer.from([0xff, 0xfe, 0xc3, 0x28])]);
      cases.push({ what: `${spec.rpc}: id of bad UTF-8`, rpc: spec.rpc, stream, bytes, key: KEY_ACME });
    }
  }
  return cases;
}

/** Sends raw bytes to a method and resolves with the status it ends with. */
function grpcSend(c: GrpcCase): Promise<{ code: number; details: string; metadata: Metadata }> {
  const path = `/${CONTRACT.service}/${c.rpc}`;
  const metadata = new Metadata();
  if (c.key !== null) metadata.set("authorization", c.key === "" ? "Bearer" : `Bearer ${c.key}`);
  const identity = (b: Buffer) => b;
  return new Promise((resolve) => {
    if (!c.stream) {
      client.makeUnaryRequest(path, identity, identity, c.bytes, metadata, {}, (error: ServiceError | null) => {
        resolve(error ? { code: error.code, details: error.details, metadata: error.metadata } : { code: 0, details: "", metadata: new Metadata() });
      });
      return;
    }
    const call = client.makeServerStreamRequest(path, identity, identity, c.bytes, metadata, {});
    call.on("data", () => undefined);
    call.on("error", (error: ServiceError) => resolve({ code: error.code, details: error.details, metadata: error.metadata }));
    call.on("end", () => resolve({ code: 0, details: "", metadata: new Metadata() }));
  });
}

describe("fuzz", () => {
  it("fuzz - over 1,000 malformed REST and gRPC requests: each a 4xx (or a caller's gRPC status) with a specific message, no 5xx, no crash, nothing written", async () => {
    const before = await snapshot();
    const rest = restCases();
    const grpc = grpcCases();
    const problems: string[] = [];
    await pool(rest, 8, async (c) => {
      const res = await fetch(`${gateway.url}${c.path}`, { method: c.method, headers: c.headers, body: c.body });
      const text = await res.text();
      let error: { code?: string; message?: string } | undefined;
      try {
        error = (JSON.parse(text) as { error?: { code?: string; message?: string } }).error;
      } catch {
        error = undefined;
      }
      if (res.status < 400 || res.status >= 500) problems.push(`REST ${c.what}: ${res.status} ${text.slice(0, 200)}`);
      else if (!error?.code || !/^[a-z]+\.[a-z_]+$/.test(error.code) || !error.message || error.message.length < 15) problems.push(`REST ${c.what}: ${res.status} without a specific error: ${text.slice(0, 200)}`);
    });
    await pool(grpc, 8, async (c) => {
      const { code, details, metadata } = await grpcSend(c);
      const tackCode = metadata.get("tack-error-code")[0];
      if (!CALLER_STATUSES.has(code)) problems.push(`gRPC ${c.what}: status ${code} ${details.slice(0, 200)}`);
      // RESOURCE_EXHAUSTED from grpc-js itself (a message over the size limit) carries no Tack code.
      else if (code !== 8 && (typeof tackCode !== "string" || details.length < 15)) problems.push(`gRPC ${c.what}: status ${code} without a specific error: ${details}`);
    });
    expect(problems).toEqual([]);
    expect(rest.length + grpc.length).toBeGreaterThanOrEqual(1_000);
    // Still serving, and nothing was written anywhere.
    expect((await fetch(`${gateway.url}/healthz`)).status).toBe(200);
    expect(await snapshot()).toBe(before);
    const get = await fetch(`${gateway.url}/v1/sessions/${own}`, { headers: auth() });
    expect(get.status).toBe(200);
    console.log(`fuzz: ${rest.length} REST and ${grpc.length} gRPC malformed requests refused`);
  }, 240_000);
});
