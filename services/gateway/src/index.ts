// The gateway: REST + SSE (Fastify) and gRPC serving one contract (proto/tack/gateway/v1/gateway.proto),
// API-key auth per tenant and a SQL session index; sessions themselves live in the loop and the log.
export { startGateway, type Gateway } from "./server.js";
export { type ApiKey, type GatewayOptions } from "./options.js";
export { MAX_BODY_BYTES, OPEN_ROUTES } from "./rest.js";
export { openApiDocument } from "./openapi.js";
export { CONTRACT, type OperationSpec } from "./gen/contract.js";
