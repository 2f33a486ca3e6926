// Generates the gateway's contract module from proto/tack/gateway/v1/gateway.proto: the route
// table (each rpc's `@http METHOD PATH STATUS [media type]`), the JSON Schemas Fastify's ajv
// validates requests with (path, query and body parts, from the field annotations `@required`,
// `@pattern`, `@enum`, `@maxLength`, ...), and the component schemas of the OpenAPI document (the
// response messages and what they refer to). Called by scripts/gen.mjs (so `make gen` and
// `--check` cover it); run alone, `node scripts/gen-gateway.mjs` prints the module.
import { execFileSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const FILE = "tack/gateway/v1/gateway.proto";
const PACKAGE = "tack.gateway.v1";

const SCALARS = {
  TYPE_STRING: { type: "string" },
  TYPE_BOOL: { type: "boolean" },
  TYPE_UINT32: { type: "integer", minimum: 0 },
  TYPE_UINT64: { type: "integer", minimum: 0 },
  TYPE_INT32: { type: "integer" },
  TYPE_INT64: { type: "integer" },
  TYPE_DOUBLE: { type: "number" },
  TYPE_FLOAT: { type: "number" },
  TYPE_BYTES: { type: "string", contentEncoding: "base64" },
};
const NUMERIC = new Set(["minimum", "maximum", "exclusiveMinimum", "maxLength", "minLength", "minItems", "maxItems"]);

/** Splits a leading comment into its prose and its `@` annotations. */
export function parseComment(text) {
  const prose = [];
  const notes = [];
  for (const raw of (text ?? "").split("\n")) {
    const line = raw.trim();
    const m = /^@(\w+)\s*(.*)$/.exec(line);
    if (m) notes.push({ key: m[1], value: m[2] });
    else if (line) prose.push(line);
  }
  return { doc: prose.join(" "), notes };
}

/** A file's leading comments by source path (`4.<message>.2.<field>` for a field). */
export function commentsOf(file) {
  const byPath = new Map();
  for (const loc of file.sourceCodeInfo?.location ?? []) {
    if (loc.leadingComments) byPath.set(loc.path.join("."), loc.leadingComments);
  }
  return byPath;
}

/** Reads the proto image of the gateway's file (with comments) and builds the contract. */
export function gatewayContract(image) {
  const file = image.file.find((f) => f.name === FILE);
  if (!file) throw new Error(`${FILE} is missing from the proto image`);
  const comments = commentsOf(file);
  const messages = new Map(file.messageType.map((m, i) => [m.name, { message: m, index: i }]));

  const fieldInfo = (mi, fi, field) => {
    const { doc, notes } = parseComment(comments.get(`4.${mi}.2.${fi}`));
    const note = (key) => notes.filter((n) => n.key === key).map((n) => n.value);
    return { doc, notes, note, field, proto3Optional: field.proto3Optional === true, repeated: field.label === "LABEL_REPEATED" };
  };

  /** The JSON Schema of one field's value; nested messages inline (`inline`) or by $ref. */
  const valueSchema = (info, inline, forResponse) => {
    const { field, note } = info;
    let schema;
    if (field.type === "TYPE_MESSAGE") {
      const name = field.typeName.replace(/^\./, "");
      // Requests carry events in their JSON form (checked by the loop); responses refer to the component.
      if (name === "tack.log.v1.Event") schema = inline ? { type: "object" } : { $ref: "#/components/schemas/Event" };
      else {
        const short = name.slice(PACKAGE.length + 1);
        schema = inline ? messageSchema(short, { inline, forResponse }) : { $ref: `#/components/schemas/${short}` };
      }
    } else {
      schema = { ...SCALARS[field.type] };
      const [typeOverride] = note("type");
      if (typeOverride) schema.type = typeOverride;
    }
    const constraints = {};
    for (const key of NUMERIC) for (const v of note(key)) constraints[key] = Number(v);
    for (const v of note("pattern")) constraints.pattern = v;
    for (const v of note("enum")) constraints.enum = v.split("|");
    const errors = {};
    for (const v of note("error")) {
      const m = /^(\w+)\s+(.*)$/.exec(v);
      if (!m) throw new Error(`${FILE}: @error needs a keyword and a message, got ${JSON.stringify(v)}`);
      errors[m[1]] = m[2];
    }
    const arrayKeys = new Set(["minItems", "maxItems"]);
    let out;
    if (info.repeated) {
      const items = { ...schema };
      for (const [k, v] of Object.entries(constraints)) if (!arrayKeys.has(k)) items[k] = v;
      out = { type: "array", items };
      for (const [k, v] of Object.entries(constraints)) if (arrayKeys.has(k)) out[k] = v;
    } else out = { ...schema, ...constraints };
    if (info.doc) out.description = info.doc;
    const [def] = note("default");
    if (def !== undefined) out.default = JSON.parse(def);
    if (Object.keys(errors).length) out["x-errors"] = errors;
    if (forResponse && (info.proto3Optional || note("nullable").length || note("nullWhen").length) && !out.$ref) out.type = [out.type, "null"];
    return out;
  };

  /** A message as an object schema: every field (responses) or only the body fields (requests). */
  function messageSchema(name, { inline = false, forResponse = false, part } = {}) {
    const found = messages.get(name);
    if (!found) throw new Error(`${FILE}: no message ${name}`);
    const { message, index } = found;
    const properties = {};
    const required = [];
    for (const [fi, field] of (message.field ?? []).entries()) {
      const info = fieldInfo(index, fi, field);
      const where = info.note("in")[0] ?? "body";
      if (part ? where !== part : forResponse && where === "none") continue;
      const schema = valueSchema(info, inline, forResponse);
      const hint = info.note("required");
      if (hint.length) {
        required.push(field.name);
        if (hint[0]) schema["x-required"] = hint[0];
      }
      properties[field.name] = schema;
    }
    const out = { type: "object", properties };
    if (required.length) out.required = required;
    if (!forResponse) out.additionalProperties = part === "query" || part === "path";
    if (!part) {
      const { doc } = parseComment(comments.get(`4.${index}`));
      if (doc) out.description = doc;
    }
    return out;
  }

  const service = file.service.find((s) => s.name === "Gateway");
  const operations = service.method.map((method, mi) => {
    const { doc, notes } = parseComment(comments.get(`6.0.2.${mi}`));
    const http = notes.find((n) => n.key === "http");
    if (!http) throw new Error(`${FILE}: rpc ${method.name} needs an "@http METHOD PATH STATUS" line`);
    const [verb, path, status, mediaType] = http.value.split(/\s+/);
    const requestType = method.inputType.slice(PACKAGE.length + 2);
    const responseType = method.outputType === ".tack.log.v1.Event" ? "Event" : method.outputType.slice(PACKAGE.length + 2);
    const pathParams = [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]);
    const body = messageSchema(requestType, { inline: true, part: "body" });
    const query = messageSchema(requestType, { inline: true, part: "query" });
    const params = messageSchema(requestType, { inline: true, part: "path" });
    const declared = Object.keys(params.properties);
    if (declared.sort().join() !== [...pathParams].sort().join()) {
      throw new Error(`${FILE}: rpc ${method.name}: the path ${path} names {${pathParams.join("}, {")}} but ${requestType} marks @in path: ${declared.join(", ") || "none"}`);
    }
    const hasBody = verb !== "GET" && verb !== "DELETE" && Object.keys(body.properties).length > 0;
    return {
      rpc: method.name,
      method: verb,
      path,
      route: path.replace(/\{(\w+)\}/g, ":$1"),
      status: Number(status),
      mediaType: mediaType ?? "application/json",
      doc,
      requestType,
      responseType,
      serverStreaming: method.serverStreaming === true,
      schemas: {
        ...(hasBody ? { body } : {}),
        ...(Object.keys(query.properties).length ? { querystring: query } : {}),
        ...(pathParams.length ? { params } : {}),
      },
    };
  });
  return { service: `${PACKAGE}.Gateway`, operations, components: responseComponents(operations, [...messages.keys()], (name) => messageSchema(name, { forResponse: true })) };
}

/** The Event component: the log's event in its JSON form, described by docs/events.md, not by this file. */
const EVENT_COMPONENT = { type: "object", description: "One event of the session log (`tack.log.v1.Event` in its JSON form; the catalog is docs/events.md): `seq`, `time`, `type`, `source`, and the payload under its case name.", additionalProperties: true };

/**
 * The component schemas the OpenAPI document refers to, in the proto's message order, Event last:
 * the response message of every operation whose REST success carries one (JSON, or the events of
 * an event stream; not a tar archive) and every message those refer to. A message only a request
 * uses is no component: a request's fields are the operation's parameters and inline body schema.
 */
function responseComponents(operations, order, schemaOf) {
  const found = new Map();
  const visit = (name) => {
    if (found.has(name)) return;
    found.set(name, name === "Event" ? EVENT_COMPONENT : schemaOf(name));
    for (const [, ref] of JSON.stringify(found.get(name)).matchAll(/"\$ref":"#\/components\/schemas\/(\w+)"/g)) visit(ref);
  };
  for (const op of operations) if (op.mediaType !== "application/x-tar") visit(op.responseType);
  return Object.fromEntries([...order, "Event"].filter((name) => found.has(name)).map((name) => [name, found.get(name)]));
}

/** The TypeScript module written to services/gateway/src/gen/contract.ts. */
export function contractModule(image) {
  const contract = gatewayContract(image);
  return `// Code generated by scripts/gen-gateway.mjs from proto/${FILE}. DO NOT EDIT; run \`make gen\`.

/** A JSON Schema (draft 2020-12, as OpenAPI 3.1 and ajv read it). */
export type JsonSchema = { readonly [key: string]: unknown };

/** One operation of the Gateway service: its rpc and its REST route. */
export interface OperationSpec {
  /** The rpc's name in \`${PACKAGE}.Gateway\`. */
  readonly rpc: string;
  readonly method: "GET" | "POST" | "DELETE";
  /** OpenAPI form, \`/v1/sessions/{id}\`. */
  readonly path: string;
  /** Fastify form, \`/v1/sessions/:id\`. */
  readonly route: string;
  /** Status of a success. */
  readonly status: number;
  /** Media type of a success (\`application/json\`, \`text/event-stream\`, \`application/x-tar\`). */
  readonly mediaType: string;
  readonly doc: string;
  readonly requestType: string;
  readonly responseType: string;
  readonly serverStreaming: boolean;
  /** What Fastify validates: the JSON body, the query string and the path parameters. */
  readonly schemas: { readonly body?: JsonSchema; readonly querystring?: JsonSchema; readonly params?: JsonSchema };
}

/** The gateway's contract: its operations and the OpenAPI document's component schemas (the response messages and what they refer to). */
export const CONTRACT: { readonly service: string; readonly operations: readonly OperationSpec[]; readonly components: Readonly<Record<string, JsonSchema>> } = ${JSON.stringify(contract, null, 2)};
`;
}

/** The proto image with comments, as JSON. */
export function protoImage() {
  const out = execFileSync(join(root, "node_modules/.bin/buf"), ["build", "proto", "-o", "-#format=json"], { cwd: root, maxBuffer: 64 << 20 });
  return JSON.parse(out.toString());
}

if (process.argv[1] === fileURLToPath(import.meta.url)) process.stdout.write(contractModule(protoImage()));
