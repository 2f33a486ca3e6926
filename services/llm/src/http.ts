import { TackError } from "@tack/bus";
import { createParser } from "eventsource-parser";
import { cancelled } from "./provider.js";

/** One streaming POST to a provider whose reply body is Server-Sent Events. */
export interface SseRequest {
  /** Provider name for messages, e.g. `DeepSeek`. */
  readonly provider: string;
  readonly url: string;
  readonly headers: Record<string, string>;
  readonly body: string;
  /** Fail with `llm.timeout` when the server sends nothing for this long. */
  readonly idleTimeoutMs: number;
  /** What to check when the server cannot be reached, e.g. `DEEPSEEK_BASE_URL`. */
  readonly baseUrlSetting: string;
  /** Maps a non-2xx response to the provider's TackError. */
  httpError(response: Response): Promise<TackError>;
}

/** Reads the `data` of each SSE event of one reply. */
export interface SseConsumer {
  /** Takes one event's data; throws a TackError when it is malformed or reports a failure. */
  accept(data: string): void;
  /** True once the terminal event arrived (`[DONE]`, `message_stop`): stop reading. */
  readonly ended: boolean;
  /** True when what arrived is a whole reply even if the terminal event never does. */
  readonly whole: boolean;
}

/**
 * Sends `request` and feeds the reply's SSE events to `consumer` until it has ended. A body
 * that stops inside a line, or before the consumer has a whole reply, is `llm.stream_cut`;
 * silence for `idleTimeoutMs` is `llm.timeout`; an aborted `signal` is `llm.cancelled`.
 */
export async function streamSse(request: SseRequest, consumer: SseConsumer, signal: AbortSignal): Promise<void> {
  if (signal.aborted) throw cancelled();
  const idle = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  const arm = () => {
    clearTimeout(timer);
    timer = setTimeout(() => idle.abort(), request.idleTimeoutMs);
  };
  // Why the transfer stopped, if we stopped it; otherwise the network did.
  const stopped = (): TackError | undefined => {
    if (signal.aborted) return cancelled();
    if (idle.signal.aborted) {
      return new TackError("llm.timeout", `${request.provider} sent nothing for ${request.idleTimeoutMs} ms; retry`, { retryable: true });
    }
    return undefined;
  };
  arm();
  try {
    let response: Response;
    try {
      response = await fetch(request.url, {
        method: "POST",
        headers: { "content-type": "application/json", accept: "text/event-stream", ...request.headers },
        body: request.body,
        signal: AbortSignal.any([signal, idle.signal]),
      });
    } catch (error) {
      const cause = (error as { cause?: { code?: string; message?: string } }).cause;
      throw stopped() ?? new TackError(
        "llm.unreachable",
        `cannot reach ${request.provider} at ${new URL(request.url).origin} (${cause?.code ?? cause?.message ?? (error as Error).message}); check the network or ${request.baseUrlSetting}`,
        { retryable: true, cause: error },
      );
    }
    if (!response.ok) throw await request.httpError(response);
    if (!response.body) throw streamCut(request.provider);
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    const events: string[] = [];
    const parser = createParser({ onEvent: (event) => events.push(event.data) });
    // Whether the text so far stops inside a line. The parser keeps such a line to itself; at the end
    // of the body it means the stream was cut.
    let inLine = false;
    const feed = (text: string) => {
      if (text === "") return;
      parser.feed(text);
      inLine = !/[\r\n]$/.test(text);
    };
    const deliver = () => {
      for (const data of events.splice(0)) {
        consumer.accept(data);
        if (consumer.ended) break;
      }
    };
    try {
      while (!consumer.ended) {
        const chunk = await reader.read().catch((error: unknown) => {
          throw stopped() ?? streamCut(request.provider, error);
        });
        arm();
        if (chunk.done) {
          feed(decoder.decode());
          // A last event whose lines are complete but that has no blank line after it still counts (some
          // servers end the body that way): two LFs end it, the first in case the body ended with a CR that
          // the parser holds back until it knows whether an LF follows. A body cut inside a line gets none:
          // the half line would be read as a whole one.
          if (!inLine) parser.feed("\n\n");
          deliver();
          if (!consumer.ended && (inLine || !consumer.whole)) throw streamCut(request.provider);
          break;
        }
        feed(decoder.decode(chunk.value, { stream: true }));
        deliver();
      }
    } finally {
      // Releases the connection when we stop reading before the server ends the body.
      await reader.cancel().catch(() => undefined);
    }
  } finally {
    clearTimeout(timer);
  }
}

/** The body of an error response, cut to one line, with the provider's `error.message` preferred when it is JSON. */
export async function errorDetail(response: Response, apiKey: string): Promise<string> {
  const text = await response.text().catch(() => "");
  let detail = text;
  try {
    const message = (JSON.parse(text) as { error?: { message?: unknown } }).error?.message;
    if (typeof message === "string") detail = message;
  } catch {
    // Not JSON (a proxy's HTML page, say): keep the raw text.
  }
  return redact(detail.replace(/\s+/g, " ").trim().slice(0, 300), apiKey) || response.statusText;
}

/** Hides the key and anything key-shaped from provider text that ends up in errors and logs. */
export function redact(text: string, apiKey: string): string {
  return text.split(apiKey).join("sk-***").replace(/sk-[A-Za-z0-9_*-]{4,}/g, "sk-***");
}

/** The retryable `llm.rate_limited` error of an HTTP 429, keeping the server's `retry-after`. */
export function rateLimited(provider: string, response: Response, what: string): TackError {
  const details: Record<string, string> = { status: String(response.status) };
  const retryAfter = response.headers.get("retry-after");
  if (retryAfter) details.retry_after = retryAfter;
  return new TackError("llm.rate_limited", `${provider} is rate limiting this key (${what}); retry ${retryAfter ? `after ${retryAfter} s` : "later"}`, {
    retryable: true, details,
  });
}

/** The error of a reply that stopped before it was complete. */
export function streamCut(provider: string, cause?: unknown): TackError {
  return new TackError("llm.stream_cut", `the ${provider} stream ended before the reply was complete; retry`, { retryable: true, cause });
}

/** The error of a stream event that cannot be read. */
export function malformed(provider: string, problem: string, data: string, hint: string): TackError {
  return new TackError("llm.malformed_chunk", `${provider} sent a malformed stream chunk (${problem}): ${data.slice(0, 200)}; retry, and ${hint}`, { retryable: true });
}

/** The `llm.missing_key` error: how to give a provider its key. */
export function missingKey(provider: string, variable: string, section: string): TackError {
  return new TackError(
    "llm.missing_key",
    `no ${provider} API key: set ${variable} or write ~/.tack/credentials.yaml (chmod 600) with \`${section}:\` and an indented \`api_key: ...\`, then restart the llm service`,
  );
}
