import { readFileSync } from "node:fs";
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";

/** How the fake DeepSeek answers the next request: a recorded body from test/fixtures/deepseek. */
export interface FixtureResponse {
  /** File under test/fixtures/deepseek sent as the body. */
  file: string;
  status?: number;
  headers?: Record<string, string>;
  /** Destroy the connection after the body instead of ending the response. */
  cut?: boolean;
  /** Send the body, then keep the response open without sending anything more. */
  stall?: boolean;
}

/** One request the fake DeepSeek received. */
export interface RecordedRequest {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: Record<string, unknown>;
}

/** A local HTTP server on 127.0.0.1 that replays recorded DeepSeek responses. */
export interface FixtureServer {
  readonly baseUrl: string;
  readonly requests: RecordedRequest[];
  /** Sets the response to every following request. */
  respondWith(response: FixtureResponse): void;
  close(): Promise<void>;
}

const FIXTURES = join(import.meta.dirname, "fixtures", "deepseek");

/** Starts the fake DeepSeek on a free port. */
export async function startFixtureServer(): Promise<FixtureServer> {
  const requests: RecordedRequest[] = [];
  let next: FixtureResponse | undefined;
  const server = createServer((req, res) => {
    let raw = "";
    req.setEncoding("utf8");
    req.on("data", (part: string) => (raw += part));
    req.on("end", () => {
      requests.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, body: JSON.parse(raw) as Record<string, unknown> });
      const response = next;
      if (!response) {
        res.writeHead(500).end("no fixture set");
        return;
      }
      const body = readFileSync(join(FIXTURES, response.file));
      const status = response.status ?? 200;
      res.writeHead(status, {
        "content-type": status === 200 ? "text/event-stream; charset=utf-8" : "application/json",
        ...response.headers,
      });
      // Small writes on separate ticks, so that chunk boundaries fall inside lines and characters.
      void (async () => {
        for (let i = 0; i < body.length; i += 53) {
          res.write(body.subarray(i, i + 53));
          await new Promise((resolve) => setImmediate(resolve));
        }
        if (response.cut) res.socket?.destroy();
        else if (!response.stall) res.end();
      })();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    baseUrl: `http://127.0.0.1:${port}`,
    requests,
    respondWith: (response) => {
      next = response;
    },
    close: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
