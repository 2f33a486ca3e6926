// The gateway: HTTP + SSE API with API-key auth per tenant and a SQL session index; sessions themselves live in the loop and the log.
export { startGateway, type Gateway } from "./server.js";
export { type ApiKey, type GatewayOptions } from "./options.js";
export { MAX_BODY_BYTES } from "./body.js";
