import { readFileSync } from "node:fs";
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";

// A stand-in for the search APIs on 127.0.0.1: the path's first segment names the scenario
// (a provider's base URL is `http://127.0.0.1:<port>/<scenario>`), and the answer is the
// recorded-format fixture for it. A key starting with `bad-` gets the provider's 401 whatever
// the scenario, as a refused key would.

const FIXTURES = new URL("../fixtures/web-search/", import.meta.url);

/** One request as the server saw it. */
export interface SeenRequest {
  readonly scenario: string;
  readonly method: string;
  /** Path after the scenario, e.g. `/res/v1/web/search`. */
  readonly path: string;
  readonly query: URLSearchParams;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

interface Answer { status: number; file?: string; raw?: string; type?: string; headers?: Record<string, string> }

const json = (status: number, file: string, headers: Record<string, string> = {}): Answer => ({ status, file, headers });

/** Scenario -> answer; DeepSeek scenarios answer a probe (a Messages request without tools) with their `probe` entry. */
const SCENARIOS: Record<string, { search: Answer; probe?: Answer }> = {
  "brave-ok": { search: json(200, "brave-results.json") },
  "brave-empty": { search: json(200, "brave-empty.json") },
  "brave-401": { search: json(401, "brave-401.json") },
  "brave-429": { search: json(429, "brave-429.json", { "retry-after": "7" }) },
  "brave-500": { search: { status: 500, raw: "upstream connect error or disconnect/reset before headers", type: "text/plain" } },
  "brave-malformed": { search: { status: 200, raw: '{"type":"search","web":{"results":[{"title":"cut of', type: "application/json" } },
  "brave-html": { search: { status: 200, raw: "<html><body>Service temporarily unavailable</body></html>", type: "text/html" } },
  "deepseek-ok": { search: json(200, "deepseek-results.json"), probe: json(200, "deepseek-probe.json") },
  "deepseek-empty": { search: json(200, "deepseek-empty.json"), probe: json(200, "deepseek-probe.json") },
  "deepseek-no-search": { search: json(200, "deepseek-no-search.json") },
  "deepseek-hostile": { search: json(200, "deepseek-hostile.json") },
  "deepseek-search-error": { search: json(200, "deepseek-search-error.json") },
  "deepseek-401": { search: json(401, "deepseek-401.json") },
  "deepseek-429": { search: json(429, "deepseek-429.json", { "retry-after": "20" }) },
  "deepseek-500": { search: json(500, "deepseek-500.json") },
  "deepseek-malformed": { search: { status: 200, raw: "data: {\"type\":\"message_start\"}\n\n", type: "application/json" } },
};

export interface SearchFixtureServer {
  /** Base URL of a scenario, to give a provider as its `baseUrl`. */
  url(scenario: string): string;
  /** A base URL on which nothing listens. */
  readonly downUrl: string;
  readonly seen: SeenRequest[];
  close(): Promise<void>;
}

export async function startSearchFixtures(): Promise<SearchFixtureServer> {
  const seen: SeenRequest[] = [];
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on("data", (chunk: Buffer) => chunks.push(chunk));
    request.on("end", () => {
      const url = new URL(request.url ?? "/", "http://fixtures");
      const [, scenario = "", ...rest] = url.pathname.split("/");
      const body = Buffer.concat(chunks).toString("utf8");
      seen.push({ scenario, method: request.method ?? "", path: `/${rest.join("/")}`, query: url.searchParams, headers: request.headers, body });
      const key = String(request.headers["x-subscription-token"] ?? request.headers["x-api-key"] ?? "");
      // Never answers (the client's time limit or cancel ends the request).
      if (scenario.endsWith("-hang")) return;
      const entry = SCENARIOS[scenario];
      if (!entry) return void response.writeHead(404, { "content-type": "text/plain" }).end(`no scenario ${scenario}`);
      const isProbe = scenario.startsWith("deepseek") && !("tools" in (JSON.parse(body || "{}") as object));
      let answer = isProbe ? entry.probe ?? entry.search : entry.search;
      if (key.startsWith("bad-")) answer = json(401, scenario.startsWith("brave") ? "brave-401.json" : "deepseek-401.json");
      const text = answer.file ? readFileSync(new URL(answer.file, FIXTURES), "utf8").replaceAll("{{key}}", key) : answer.raw ?? "";
      response.writeHead(answer.status, { "content-type": answer.type ?? "application/json", ...answer.headers }).end(text);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  // A port that was just free and is closed again: connecting to it is refused.
  const spare = createServer();
  await new Promise<void>((resolve) => spare.listen(0, "127.0.0.1", resolve));
  const downPort = (spare.address() as AddressInfo).port;
  await new Promise<void>((resolve) => spare.close(() => resolve()));
  return {
    url: (scenario) => `http://127.0.0.1:${port}/${scenario}`,
    downUrl: `http://127.0.0.1:${downPort}/down`,
    seen,
    close: () => new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}
