import { readFileSync } from "node:fs";
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";

/** How the fake provider answers one request: a recorded body from test/fixtures. */
export interface FixtureResponse {
  /** File under test/fixtures sent as the body, e.g. `deepseek/reasoning.sse`. */
  file: string;
  status?: number;
  headers?: Record<string, string>;
  /** Destroy the connection after the body instead of ending the response. */
  cut?: boolean;
  /** Send the body, then keep the response open without sending anything more. */
  stall?: boolean;
}

/** One request the fake provider received. */
export interface RecordedRequest {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: Record<string, unknown>;
}

/** A local HTTP server on 127.0.0.1 that replays recorded provider responses. */
export interface FixtureServer {
  readonly baseUrl: string;
  readonly requests: RecordedRequest[];
  /** Answers the following requests with these responses in turn, the last one repeating. */
  respondWith(...responses: FixtureResponse[]): void;
  close(): Promise<void>;
}

const FIXTURES = join(import.meta.dirname, "fixtures");

/** Starts the fake provider on a free port. */
export async function startFixtureServer(): Promise<FixtureServer> {
  const requests: RecordedRequest[] = [];
  let queue: FixtureResponse[] = [];
  const server = createServer((req, res) => {
    let raw = "";
    req.setEncoding("utf8");
    req.on("data", (part: string) => (raw += part));
    req.on("end", () => {
      requests.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, body: JSON.parse(raw) as Record<string, unknown> });
      const response = queue.length > 1 ? queue.shift() : queue[0];
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
    respondWith: (...responses) => {
      queue = responses;
    },
    close: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
