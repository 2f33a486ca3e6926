// The OpenAPI document as other tools take it, served by a real gateway: it validates as the
// version it declares (@apidevtools/swagger-parser), lints clean under Redocly CLI's recommended
// rules (test/redocly.yaml), and openapi-typescript generates types from it that a client
// compiles against with tsc and calls the gateway with. Everything runs offline.
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { promisify } from "node:util";
import SwaggerParser from "@apidevtools/swagger-parser";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Gateway } from "@tack/gateway-service";
import { GatewayStack } from "./real-loop.js";

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL("../../..", import.meta.url));
const bin = (name: string) => join(ROOT, "node_modules", ".bin", name);
/** The tools' own reports and update checks are off: the tests make no call beyond the gateway. */
const OFFLINE = { ...process.env, REDOCLY_TELEMETRY: "off", REDOCLY_SUPPRESS_UPDATE_NOTICE: "true", NO_COLOR: "1" };

const KEY_ACME = `acme-${randomBytes(16).toString("hex")}`;
const KEY_GLOBEX = `globex-${randomBytes(16).toString("hex")}`;

let stack: GatewayStack;
let gateway: Gateway;
let out: string;
/** The document as GET /v1/openapi.json serves it, and the file it was saved to. */
let served: { text: string; file: string };

beforeAll(async () => {
  stack = await GatewayStack.start({ name: "openapi-tools", keys: { acme: KEY_ACME, globex: KEY_GLOBEX } });
  ({ gateway } = stack);
  out = mkdtempSync(join(tmpdir(), "tack-openapi-tools-"));
  const res = await fetch(`${gateway.url}/v1/openapi.json`);
  expect(res.status).toBe(200);
  const text = await res.text();
  served = { text, file: join(out, "openapi.json") };
  writeFileSync(served.file, text);
});

afterAll(async () => {
  await stack?.stop();
  if (out) rmSync(out, { recursive: true, force: true });
});

/** The client compiled against the generated types: what it exports (see CLIENT). */
interface CompiledClient {
  createSession(base: string, key: string, workspace: string, model: string): Promise<{ status: number; id: string | undefined }>;
  getSession(base: string, key: string, id: string): Promise<{ status: number; workspace: string | undefined; code: string | undefined }>;
}

/**
 * A small client over fetch typed only by the generated `paths`: request bodies, path parameters
 * and each status's response body come from the document. The `@ts-expect-error` lines prove the
 * types are exact (tsc fails on an unused one), not `any`.
 */
const CLIENT = `import type { paths } from "./schema.js";

type Create = paths["/v1/sessions"]["post"];
type CreateBody = Create["requestBody"]["content"]["application/json"];
type Created = Create["responses"][201]["content"]["application/json"];
type Get = paths["/v1/sessions/{id}"]["get"];
type Detail = Get["responses"][200]["content"]["application/json"];
type Refusal = Get["responses"]["4XX"]["content"]["application/json"];

const headers = (key: string) => ({ authorization: \`Bearer \${key}\`, "content-type": "application/json" });

export async function createSession(base: string, key: string, workspace: string, model: string): Promise<{ status: number; id: string | undefined }> {
  const body: CreateBody = { workspace, model, title: "generated client" };
  const res = await fetch(\`\${base}/v1/sessions\`, { method: "POST", headers: headers(key), body: JSON.stringify(body) });
  const created = (await res.json()) as Created;
  return { status: res.status, id: created.id };
}

export async function getSession(base: string, key: string, id: Get["parameters"]["path"]["id"]): Promise<{ status: number; workspace: string | undefined; code: string | undefined }> {
  const res = await fetch(\`\${base}/v1/sessions/\${encodeURIComponent(id)}\`, { headers: headers(key) });
  if (res.ok) {
    const detail = (await res.json()) as Detail;
    return { status: res.status, workspace: detail.workspace, code: undefined };
  }
  const refusal = (await res.json()) as Refusal;
  return { status: res.status, workspace: undefined, code: refusal.error.code };
}

// @ts-expect-error workspace is a string
export const wrongType: CreateBody = { workspace: 42, model: "m" };
// @ts-expect-error a session has no field "colour"
export const unknownField: Detail = { colour: "red" };
`;

describe("openapi tools", () => {
  it("openapi - the served document validates as the OpenAPI 3.1.0 it declares (swagger-parser), the event stream described by a plain schema", async () => {
    const doc = JSON.parse(served.text) as { openapi: string; paths: Record<string, Record<string, { responses: Record<string, { content?: Record<string, Record<string, unknown>> }> }>> };
    expect(doc.openapi).toBe("3.1.0");
    // validate() dereferences the object it is given: a fresh parse of the served text.
    await expect(SwaggerParser.validate(JSON.parse(served.text))).resolves.toMatchObject({ openapi: "3.1.0" });
    const stream = doc.paths["/v1/sessions/{id}/events"]!.get!.responses["200"]!.content!["text/event-stream"]!;
    expect(Object.keys(stream).sort()).toEqual(["schema", "x-itemSchema"]);
    expect(stream.schema).toMatchObject({ type: "string" });
    expect(stream["x-itemSchema"]).toEqual({ $ref: "#/components/schemas/Event" });
  });

  it("openapi - Redocly CLI's recommended lint finds no error and no warning", async () => {
    const config = fileURLToPath(new URL("redocly.yaml", import.meta.url));
    const { stdout } = await run(bin("redocly"), ["lint", served.file, "--config", config, "--format=json"], { cwd: out, env: OFFLINE })
      .catch((error: { stdout?: string; stderr?: string }) => ({ stdout: error.stdout ?? "", stderr: error.stderr }));
    const report = JSON.parse(stdout) as { totals: { errors: number; warnings: number; ignored: number }; problems: { ruleId: string; message: string }[] };
    expect(report.problems.map((p) => `${p.ruleId}: ${p.message}`)).toEqual([]);
    expect(report.totals).toEqual({ errors: 0, warnings: 0, ignored: 0 });
  });

  it("openapi - a client typed by openapi-typescript's output compiles with tsc and calls the gateway", async () => {
    await run(bin("openapi-typescript"), [served.file, "--output", join(out, "schema.d.ts")], { cwd: out, env: OFFLINE });
    writeFileSync(join(out, "client.ts"), CLIENT);
    writeFileSync(join(out, "package.json"), JSON.stringify({ type: "module" }));
    writeFileSync(join(out, "tsconfig.json"), JSON.stringify({
      compilerOptions: { target: "es2022", module: "nodenext", moduleResolution: "nodenext", lib: ["es2022", "dom"], types: [], strict: true, outDir: "dist" },
      files: ["client.ts", "schema.d.ts"],
    }));
    const compiled = await run(bin("tsc"), ["-p", join(out, "tsconfig.json")], { cwd: out }).catch((error: { stdout?: string }) => ({ stdout: `tsc failed:\n${error.stdout}` }));
    expect(compiled.stdout).toBe("");

    const client = (await import(pathToFileURL(join(out, "dist", "client.js")).href)) as CompiledClient;
    const created = await client.createSession(gateway.url, KEY_ACME, stack.workspace, stack.loop.model);
    expect(created.status).toBe(201);
    expect(created.id).toMatch(/\S/);
    expect(await client.getSession(gateway.url, KEY_ACME, created.id!)).toEqual({ status: 200, workspace: stack.workspace, code: undefined });
    // Another tenant's key is refused with the document's 4XX body.
    const refused = await client.getSession(gateway.url, KEY_GLOBEX, created.id!);
    expect(refused.status).toBe(404);
    expect(refused.code).toMatch(/\S/);
  });

  it("openapi - the routes without a key answer the 431 the document gives them, in the shape it gives", async () => {
    const doc = JSON.parse(served.text) as { paths: Record<string, { get: { responses: Record<string, { content: { "application/json": { schema: { required: string[] } } } }> } }> };
    for (const path of ["/healthz", "/v1/openapi.json"]) {
      const documented = doc.paths[path]!.get.responses["431"]!.content["application/json"].schema;
      const res = await fetch(`${gateway.url}${path}`, { headers: { "x-padding": "p".repeat(20 * 1024) } });
      expect(res.status, path).toBe(431);
      const body = (await res.json()) as Record<string, unknown>;
      expect(Object.keys(body).sort(), path).toEqual([...documented.required].sort());
      expect(body.statusCode).toBe(431);
    }
  });
});
