// The OpenAPI 3.1 document of the REST API, generated from the contract (src/gen/contract.ts, from
// proto/tack/gateway/v1/gateway.proto) and the routes outside it; served at GET /v1/openapi.json.
import { CONTRACT, type JsonSchema } from "./gen/contract.js";

const ERROR_SCHEMA = {
  type: "object",
  description: "Every refusal and failure: `code` from the error catalogue (docs/errors.md), a sentence saying what was wrong and how to fix it, the fields at fault, and for a 5xx the request id the operator's log has.",
  required: ["error"],
  properties: {
    error: {
      type: "object",
      required: ["code", "message"],
      properties: {
        code: { type: "string" },
        message: { type: "string" },
        details: { type: "object", additionalProperties: { type: "string" } },
        request_id: { type: "string" },
      },
    },
  },
};

/**
 * The one refusal of the routes without a key: request headers over Node's limit (16 KiB by
 * default), which the HTTP server refuses before any route runs, in Fastify's own error shape.
 */
const HEADERS_TOO_LARGE = {
  description: "The request's headers are over the HTTP server's limit (Node's, 16 KiB unless --max-http-header-size says otherwise); send fewer or shorter ones.",
  content: { "application/json": { schema: { type: "object", required: ["statusCode", "error", "message"], properties: { statusCode: { type: "integer", const: 431 }, error: { type: "string" }, message: { type: "string" } } } } },
};

const errorResponse = (description: string) => ({ description, content: { "application/json": { schema: { $ref: "#/components/schemas/Error" } } } });

/** The document, built once per call (it is small and the contract is fixed at build time). */
export function openApiDocument(version: string): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  const at = (path: string) => (paths[path] ??= {});
  for (const op of CONTRACT.operations) {
    const parameters: unknown[] = [];
    for (const [name, schema] of Object.entries((op.schemas.params?.properties ?? {}) as Record<string, JsonSchema>)) {
      parameters.push({ name, in: "path", required: true, schema: { type: "string", ...schema } });
    }
    for (const [name, schema] of Object.entries((op.schemas.querystring?.properties ?? {}) as Record<string, JsonSchema>)) {
      const { description, ...rest } = schema as { description?: string };
      parameters.push({ name, in: "query", required: false, ...(description ? { description } : {}), schema: rest });
    }
    if (op.rpc === "StreamEvents") {
      parameters.push({ name: "Last-Event-ID", in: "header", required: false, description: "Resume after this seq (what an EventSource sends when it reconnects).", schema: { type: "string", pattern: "^\\d+$" } });
    }
    let requestBody: unknown;
    if (op.schemas.body) requestBody = { required: true, content: { "application/json": { schema: op.schemas.body } } };
    if (op.rpc === "CreateWorkspace") {
      requestBody = { required: false, description: "A tar (or tar.gz) archive to unpack; no body for an empty workspace.", content: { "application/x-tar": { schema: { type: "string", contentMediaType: "application/x-tar" } }, "application/gzip": { schema: { type: "string", contentMediaType: "application/gzip" } } } };
    }
    let content: Record<string, unknown>;
    if (op.mediaType === "text/event-stream") {
      // OpenAPI 3.1 describes a body as one schema: the stream is a string, and the schema of each
      // event's `data` is named in the description and in `x-itemSchema` (3.2's `itemSchema`).
      content = { "text/event-stream": { schema: { type: "string", description: "Server-Sent Events: `id` = seq, `event` = type, `data` = the event as JSON (tack.log.v1.Event, the schema `#/components/schemas/Event`)." }, "x-itemSchema": { $ref: "#/components/schemas/Event" } } };
    } else if (op.mediaType === "application/x-tar") {
      content = { "application/x-tar": { schema: { type: "string", contentMediaType: "application/x-tar" } } };
    } else content = { "application/json": { schema: { $ref: `#/components/schemas/${op.responseType}` } } };
    at(op.path)[op.method.toLowerCase()] = {
      operationId: op.rpc,
      summary: op.doc,
      tags: [tagOf(op.path)],
      "x-grpc-method": `/${CONTRACT.service}/${op.rpc}`,
      ...(parameters.length ? { parameters } : {}),
      ...(requestBody ? { requestBody } : {}),
      responses: {
        [String(op.status)]: { description: op.doc, content },
        "4XX": errorResponse("The request was refused; `error.code` and `error.message` say why and what to change."),
        "5XX": errorResponse("A failure behind the gateway; retry, and give the operator `error.request_id` if it persists."),
      },
    };
  }
  at("/healthz").get = {
    operationId: "Health", summary: "200 when the session index answers and the bus connection is open, else 503.", tags: ["health"], security: [],
    responses: {
      "200": { description: "healthy", content: { "application/json": { schema: { type: "object", properties: { status: { type: "string" } } } } } },
      "431": HEADERS_TOO_LARGE,
      "503": { description: "unavailable", content: { "application/json": { schema: { type: "object", properties: { status: { type: "string" }, problems: { type: "array", items: { type: "string" } } } } } } },
    },
  };
  at("/v1/openapi.json").get = {
    operationId: "OpenApi", summary: "This document.", tags: ["meta"], security: [],
    responses: { "200": { description: "the OpenAPI 3.1 document", content: { "application/json": { schema: { type: "object" } } } }, "431": HEADERS_TOO_LARGE },
  };
  return {
    openapi: "3.1.0",
    info: {
      title: "Tack gateway",
      version,
      description: `The REST form of the gRPC service ${CONTRACT.service} (proto/tack/gateway/v1/gateway.proto), from which this document is generated. Every /v1 operation needs \`Authorization: Bearer <key>\`; gRPC takes the same key in the metadata \`authorization\`.`,
    },
    servers: [{ url: "/" }],
    security: [{ apiKey: [] }],
    paths,
    components: {
      securitySchemes: { apiKey: { type: "http", scheme: "bearer", description: "An API key of the gateway (TACK_API_KEY, the operator configuration's keys, or one an admin created)." } },
      schemas: { ...CONTRACT.components, Error: ERROR_SCHEMA },
    },
  };
}

function tagOf(path: string): string {
  // `/v1/sessions/...` → sessions, `/v1/admin/...` → admin.
  return path.split("/")[2] ?? "api";
}
