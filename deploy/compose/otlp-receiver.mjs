// A tiny OTLP/HTTP trace receiver for checking a deploy without Jaeger (compose.otlp.yaml runs it from the
// tack-services image). POST /v1/traces takes the JSON encoding the services' exporter sends and keeps a
// count of spans per service and span name; GET /spans returns {"total": N, "services": {name: {span: count}}}.
// Listens on 0.0.0.0:4318 inside its container; nothing is forwarded anywhere.
import { createServer } from "node:http";

const services = {};
let total = 0;

const server = createServer((request, response) => {
  if (request.method === "POST" && request.url === "/v1/traces") {
    const chunks = [];
    request.on("data", (chunk) => chunks.push(chunk));
    request.on("end", () => {
      try {
        const body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
        for (const resourceSpans of body.resourceSpans ?? []) {
          const name = resourceSpans.resource?.attributes?.find((a) => a.key === "service.name")?.value?.stringValue ?? "unknown";
          for (const scope of resourceSpans.scopeSpans ?? []) {
            for (const span of scope.spans ?? []) {
              services[name] ??= {};
              services[name][span.name] = (services[name][span.name] ?? 0) + 1;
              total++;
            }
          }
        }
        response.writeHead(200, { "content-type": "application/json" }).end("{}");
      } catch (error) {
        process.stderr.write(`otlp-receiver: a request that is not OTLP JSON (${error.message}); set the exporter's protocol to http/json\n`);
        response.writeHead(400).end();
      }
    });
  } else if (request.method === "GET" && request.url === "/spans") {
    response.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ total, services }));
  } else {
    response.writeHead(404).end();
  }
});
server.listen(4318, "0.0.0.0", () => process.stdout.write("otlp-receiver: listening on :4318 (POST /v1/traces, GET /spans)\n"));
process.on("SIGTERM", () => server.close(() => process.exit(0)));
