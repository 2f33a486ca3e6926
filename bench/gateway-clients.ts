// The gateway part's clients (bench/gateway.ts), each in a child process of the bench so that they
// do not compete with the bench's own event loop and their work is not counted as the gateway's:
// - `followers`: many SSE followers of one session (`GET /v1/sessions/:id/events?from=`), parsed
//   by eventsource-parser (the parser of @tack/client's `sseMessages`); each notes when every event reached it;
// - `load`: a keep-alive HTTP load generator (undici Pool, many connections, one request at a
//   time on each) for one URL, used when `wrk` is not installed.
// Started with `fork(file, [mode], { execArgv: ["--import", "tsx"] })`; the parent speaks to it
// over the IPC channel with the messages typed below (`ToFollowers`, `FromFollowers`, `LoadJob`, `LoadResult`).
import { Pool } from "undici";
import { get as httpGet, type ClientRequest } from "node:http";
import { createParser, type EventSourceMessage } from "eventsource-parser";

/** Wall-clock ms on the clock the loop stamps events with (as `nowMs` of bench/lib.ts; not imported, to keep this process light). */
const nowMs = (): number => performance.timeOrigin + performance.now();

/** Parent → followers process. */
export type ToFollowers =
  | { type: "start"; gatewayUrl: string; apiKey: string; session: string; fromSeq: number; followers: number }
  | { type: "await"; seq: number; timeoutMs: number }
  | { type: "collect" };

/** Followers process → parent. */
export type FromFollowers =
  | { type: "connected"; ok: number; failed: string[]; ms: number }
  | { type: "reached"; seq: number; behind: number }
  | { type: "arrivals"; followers: Array<{ arrivals: Array<[number, number]>; error?: string }> };

/** Parent → load process: `connections` keep-alive connections, each sending GETs back to back for `durationMs`. */
export interface LoadJob {
  url: string;
  headers: Record<string, string>;
  connections: number;
  durationMs: number;
}

/** Load process → parent. */
export interface LoadResult {
  requests: number;
  /** Answers by status other than 200, and requests that failed without an answer (`error`). */
  errors: Record<string, number>;
  seconds: number;
  p50_ms: number;
  p99_ms: number;
  max_ms: number;
}

/**
 * One follower: its connection and the arrival time of each seq it received. The response is read
 * with node:http and fed to eventsource-parser's parser as each chunk arrives (the parser
 * @tack/client's `sseMessages` wraps, without fetch's web streams and an async generator per
 * follower): on this two-core machine the followers share the CPU with the gateway they measure,
 * and a follower's own cost per event is added to every latency it reports.
 */
class Follower {
  readonly arrivals = new Map<number, number>();
  highest = 0;
  error: string | undefined;
  #request: ClientRequest | undefined;
  #closed = false;

  /** Resolves once the answer's status is known (200: following), then keeps reading in the background. */
  connect(url: string, apiKey: string): Promise<void> {
    return new Promise((resolve, reject) => {
      const request = httpGet(url, { agent: false, headers: { authorization: `Bearer ${apiKey}`, accept: "text/event-stream" } }, (response) => {
        if (response.statusCode !== 200) {
          let body = "";
          response.setEncoding("utf8");
          response.on("data", (chunk: string) => (body += chunk));
          response.on("end", () => reject(new Error(`GET ${new URL(url).pathname}: ${response.statusCode} ${body.slice(0, 300)}`)));
          return;
        }
        resolve();
        const parser = createParser({ onEvent: (message) => this.#arrived(message) });
        response.setEncoding("utf8");
        response.on("data", (chunk: string) => parser.feed(chunk));
        response.on("end", () => {
          if (!this.#closed) this.error ??= "the stream ended before the bench closed it";
        });
        response.on("error", (error) => {
          if (!this.#closed) this.error ??= `the stream failed: ${error.message}`;
        });
      });
      request.on("error", (error) => {
        if (!this.#closed) this.error ??= `the stream failed: ${error.message}`;
        reject(error);
      });
      this.#request = request;
    });
  }

  #arrived(message: EventSourceMessage): void {
    const at = nowMs();
    if (message.event === "error") {
      this.error = `in-band error: ${message.data.slice(0, 300)}`;
      return;
    }
    const seq = Number(message.id);
    if (!Number.isInteger(seq)) return;
    if (!this.arrivals.has(seq)) this.arrivals.set(seq, at);
    if (seq > this.highest) this.highest = seq;
  }

  close(): void {
    this.#closed = true;
    this.#request?.destroy();
  }
}

async function runFollowers(): Promise<void> {
  const followers: Follower[] = [];
  const send = (message: FromFollowers) => process.send!(message);
  process.on("message", (message: ToFollowers) => {
    void (async () => {
      if (message.type === "start") {
        const started = nowMs();
        const url = `${message.gatewayUrl}/v1/sessions/${message.session}/events?from=${message.fromSeq}`;
        const failed: string[] = [];
        await Promise.all(Array.from({ length: message.followers }, async () => {
          const follower = new Follower();
          try {
            await follower.connect(url, message.apiKey);
            followers.push(follower);
          } catch (error) {
            failed.push((error as Error).message);
          }
        }));
        send({ type: "connected", ok: followers.length, failed, ms: nowMs() - started });
      } else if (message.type === "await") {
        const deadline = Date.now() + message.timeoutMs;
        const behind = () => followers.filter((f) => f.highest < message.seq).length;
        // Polled: waking on every event would cost this process work while the gateway is measured.
        while (behind() > 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
        send({ type: "reached", seq: message.seq, behind: behind() });
      } else {
        for (const f of followers) f.close();
        // The parent ends this process once it has the answer (exiting here could drop the message).
        send({ type: "arrivals", followers: followers.map((f) => ({ arrivals: [...f.arrivals], ...(f.error ? { error: f.error } : {}) })) });
      }
    })();
  });
}

async function runLoad(job: LoadJob): Promise<LoadResult> {
  const url = new URL(job.url);
  const pool = new Pool(url.origin, { connections: job.connections, pipelining: 1, keepAliveTimeout: 60_000 });
  const latencies: number[] = [];
  const errors: Record<string, number> = {};
  const started = performance.now();
  const until = started + job.durationMs;
  await Promise.all(Array.from({ length: job.connections }, async () => {
    while (performance.now() < until) {
      const t0 = performance.now();
      try {
        const { statusCode, body } = await pool.request({ path: url.pathname + url.search, method: "GET", headers: job.headers });
        await body.dump();
        if (statusCode !== 200) errors[String(statusCode)] = (errors[String(statusCode)] ?? 0) + 1;
      } catch (error) {
        errors.error = (errors.error ?? 0) + 1;
        if (errors.error === 1) process.stderr.write(`bench load: ${(error as Error).message}\n`);
      }
      latencies.push(performance.now() - t0);
    }
  }));
  const seconds = (performance.now() - started) / 1000;
  await pool.close();
  latencies.sort((a, b) => a - b);
  const at = (p: number) => latencies[Math.min(latencies.length - 1, Math.max(0, Math.ceil((p / 100) * latencies.length) - 1))] ?? Number.NaN;
  return { requests: latencies.length, errors, seconds, p50_ms: at(50), p99_ms: at(99), max_ms: latencies.at(-1) ?? Number.NaN };
}

const mode = process.argv[2];
if (!process.send) throw new Error("bench/gateway-clients.ts runs as a child of the bench (fork with an IPC channel)");
if (mode === "followers") {
  await runFollowers();
} else if (mode === "load") {
  process.once("message", (job: LoadJob) => {
    // The parent ends this process once it has the result.
    void runLoad(job).then((result) => process.send!(result));
  });
} else {
  throw new Error(`bench/gateway-clients.ts: mode must be followers or load, got ${JSON.stringify(mode)}`);
}
