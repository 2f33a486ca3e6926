// Request validation from the JSON Schemas generated out of the gateway's proto contract
// (src/gen/contract.ts, by scripts/gen-gateway.mjs): Fastify's ajv compiler checks REST requests,
// the same compiled schemas check gRPC requests, and every refusal is worded alike, naming each
// field and what it must be (the `@error` annotations of the proto give a field its own words).
import AjvCompiler from "@fastify/ajv-compiler";
import { isSandboxMode, SANDBOX_MODES, type SandboxMode } from "@tack/config";
import type { FastifySchemaCompiler } from "fastify";
import { CONTRACT, type JsonSchema } from "./gen/contract.js";
import { GatewayError } from "./errors.js";

/** One ajv refusal, as much of it as the messages use (ajv's `ErrorObject` with `verbose`). */
export interface SchemaIssue {
  readonly keyword: string;
  readonly instancePath: string;
  readonly params: Record<string, unknown>;
  readonly parentSchema?: Record<string, unknown>;
  readonly data?: unknown;
}


// Bodies are JSON: no type coercion (a "5" is not a number). Query strings and path parameters
// are text: coerced to the schema's integer or boolean. Both check every field (`allErrors`), so
// a refusal names all that is wrong; the body limit (1 MiB) and the schemas' maxItems bound the work.
const COMMON = { allErrors: true, verbose: true, useDefaults: true, removeAdditional: false, keywords: ["x-errors", "x-required"] };
const buildBody = AjvCompiler()({}, { customOptions: { ...COMMON, coerceTypes: false } });
const buildText = AjvCompiler()({}, { customOptions: { ...COMMON, coerceTypes: true } });

type Validate = ReturnType<typeof buildBody>;

/** Fastify's validator compiler for the gateway: the body without coercion, query and path with it. */
export const validatorCompiler: FastifySchemaCompiler<JsonSchema> = ({ schema, httpPart }) => {
  const validate = httpPart === "body" ? buildBody({ schema }) : buildText({ schema });
  return (data: unknown) => {
    const issues: SchemaIssue[] = validate(data) ? [] : [...(validate.errors ?? [])];
    issues.push(...infinite(data, ""));
    return issues.length === 0 ? { value: data } : { error: Object.assign(new Error("invalid"), { validation: issues }) };
  };
};

/**
 * Numbers too large to be finite (`1e400` in JSON or a query string), which ajv's range checks
 * let through: each an issue of its own.
 */
function infinite(data: unknown, path: string): SchemaIssue[] {
  if (typeof data === "number") return Number.isFinite(data) ? [] : [{ keyword: "finite", instancePath: path, params: {}, data }];
  if (data === null || typeof data !== "object") return [];
  return Object.entries(data).flatMap(([key, value]) => infinite(value, `${path}/${key}`));
}

const MAX_ISSUES = 20;

/** Where an issue is, as the messages name it: `text`, `answers.0.other`, or `(body)` for the whole body. */
function fieldOf(issue: SchemaIssue): string {
  const path = issue.instancePath.split("/").slice(1).map((p) => p.replace(/~1/g, "/").replace(/~0/g, "~"));
  if (issue.keyword === "required") path.push(String(issue.params.missingProperty));
  return path.length > 0 ? path.join(".") : "(body)";
}

const number = (n: unknown) => (typeof n === "number" ? n.toLocaleString("en-US") : String(n));

/** What a field must be, in the proto's own words where it has them. */
function messageOf(issue: SchemaIssue): string {
  const schema = issue.parentSchema ?? {};
  if (issue.keyword === "required") {
    const property = isRecord(schema.properties) ? schema.properties[String(issue.params.missingProperty)] : undefined;
    const hint = isRecord(property) ? property["x-required"] : undefined;
    return typeof hint === "string" ? `is required: ${hint}` : "is required";
  }
  if (issue.keyword === "additionalProperties") return `Unrecognized key: ${JSON.stringify(issue.params.additionalProperty)}`;
  const errors = schema["x-errors"];
  const own = isRecord(errors) ? errors[issue.keyword] : undefined;
  const value = issue.data === undefined ? "nothing" : truncate(JSON.stringify(issue.data));
  if (typeof own === "string" && own !== "") return own.replace("{value}", value);
  const p = issue.params;
  switch (issue.keyword) {
    case "type": {
      const type = String(p.type);
      if (type === "string") return "must be a string";
      if (type === "boolean") return "must be true or false";
      if (type === "integer") return typeof issue.data === "number" || /^-?\d+(\.\d+)?$/.test(String(issue.data)) ? "must be an integer" : "must be a number";
      if (type === "number") return "must be a number";
      if (type === "array") return "must be an array";
      if (type === "object") return "must be a JSON object";
      return `must be of type ${type}`;
    }
    case "maxLength": return `must be at most ${number(p.limit)} characters`;
    case "minLength": return `must be at least ${number(p.limit)} characters`;
    case "minimum": return `must be at least ${number(p.limit)}`;
    case "maximum": return `must be at most ${number(p.limit)}`;
    case "exclusiveMinimum": return `must be greater than ${number(p.limit)}`;
    case "exclusiveMaximum": return `must be less than ${number(p.limit)}`;
    case "minItems": return `must hold at least ${number(p.limit)} items`;
    case "maxItems": return `must hold at most ${number(p.limit)} items`;
    case "enum": return `must be one of ${Array.isArray(p.allowedValues) ? p.allowedValues.join(", ") : String(p.allowedValues)}, got ${value}`;
    case "pattern": return `must match ${String(p.pattern)}, got ${value}`;
    case "finite": return "must be a finite number (this one is too large)";
    default: return `must satisfy ${issue.keyword}`;
  }
}

function truncate(text: string): string {
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}

/**
 * Turns schema issues into the gateway's 400: `gateway.invalid_request` for a body ("invalid
 * request body: text: must not be empty", each field once in `details`), `gateway.invalid_query`
 * for a query string or path ("invalid query: limit: must be at least 1; offset: must be a number").
 */
export function schemaError(part: string, issues: readonly SchemaIssue[]): GatewayError {
  const fields: Record<string, string> = {};
  for (const issue of issues.slice(0, MAX_ISSUES)) {
    const field = fieldOf(issue);
    const message = messageOf(issue);
    if (fields[field]?.split("; ").includes(message)) continue;
    fields[field] = fields[field] ? `${fields[field]}; ${message}` : message;
  }
  const summary = Object.entries(fields).map(([f, m]) => `${f}: ${m}`).join("; ");
  if (part === "body") return new GatewayError(400, "gateway.invalid_request", `invalid request body: ${summary}`, { details: fields });
  return new GatewayError(400, "gateway.invalid_query", `invalid query: ${summary}`, { details: fields });
}

/** One part of an operation's request (path, query or body) as gRPC requests are checked against it. */
interface GrpcPart {
  readonly part: "params" | "querystring" | "body";
  readonly validate: Validate;
  /** Its fields: the proto (snake_case) name and the ts-proto (camelCase) one. */
  readonly fields: readonly { readonly name: string; readonly camel: string; readonly required: boolean }[];
}

function grpcPart(part: GrpcPart["part"], schema: JsonSchema, validate: Validate): GrpcPart {
  const required = new Set(Array.isArray(schema.required) ? schema.required.map(String) : []);
  const names = isRecord(schema.properties) ? Object.keys(schema.properties) : [];
  return { part, validate, fields: names.map((name) => ({ name, camel: name.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase()), required: required.has(name) })) };
}

const GRPC_VALIDATORS = new Map<string, readonly GrpcPart[]>();
for (const spec of CONTRACT.operations) {
  const parts: GrpcPart[] = [];
  const { params, querystring, body } = spec.schemas;
  if (params) parts.push(grpcPart("params", params, buildText({ schema: params })));
  if (querystring) parts.push(grpcPart("querystring", querystring, buildBody({ schema: querystring })));
  if (body) parts.push(grpcPart("body", body, buildBody({ schema: body })));
  GRPC_VALIDATORS.set(spec.rpc, parts);
}

/** `sandboxMode` → `sandbox_mode`: a ts-proto field name back to its proto (and REST) name. */
function protoName(key: string): string {
  return key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

/**
 * A decoded gRPC request (ts-proto's camelCase object) in its REST form, validated by the
 * operation's schemas: snake_case fields, proto3 defaults ("" / 0 / false / []) left out so
 * that required fields are reported missing and REST defaults apply, a `false` kept where the
 * schema requires the field. Refused with the same 400s as REST (as INVALID_ARGUMENT).
 */
export function grpcRequest(rpc: string, message: object): Record<string, unknown> {
  const parts = GRPC_VALIDATORS.get(rpc);
  if (!parts) throw new Error(`no operation ${rpc} in the contract`);
  const fields = new Map(Object.entries(message));
  const request: Record<string, unknown> = {};
  for (const { part, validate, fields: declared } of parts) {
    const value: Record<string, unknown> = {};
    for (const { name, camel, required } of declared) {
      const given: unknown = fields.get(camel);
      const field = snake(given);
      if (field === undefined) continue;
      // ts-proto leaves a proto3 `optional` field undefined when absent; a present boolean keeps its value, even false.
      if (!required && isDefault(field) && typeof given !== "boolean") continue;
      if (required && isDefault(field) && typeof field !== "boolean") continue;
      value[name] = field;
    }
    const issues: SchemaIssue[] = validate(value) ? [] : [...(validate.errors ?? [])];
    issues.push(...infinite(value, ""));
    if (issues.length > 0) throw schemaError(part === "body" ? "body" : "query", issues);
    Object.assign(request, value);
  }
  return request;
}

/** Whether a value is a JSON object (not null, not an array). */
function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function isDefault(value: unknown): boolean {
  return value === "" || value === 0 || value === false || (Array.isArray(value) && value.length === 0) || (value instanceof Uint8Array && value.length === 0);
}

function snake(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(snake);
  if (value && typeof value === "object" && !(value instanceof Uint8Array)) {
    return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined).map(([k, v]) => [protoName(k), snake(v)]));
  }
  return value;
}

/** A request field that names a sandbox mode (the schemas allow only those), as a `SandboxMode`; a 400 naming the field otherwise. */
export function sandboxModeField(field: string, value: string): SandboxMode {
  if (isSandboxMode(value)) return value;
  throw new GatewayError(400, "gateway.invalid_request", `invalid request body: ${field}: must be one of ${SANDBOX_MODES.join(", ")}, got ${JSON.stringify(value)}`, { details: { [field]: `must be one of ${SANDBOX_MODES.join(", ")}` } });
}
