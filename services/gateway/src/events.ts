import type { ServerResponse } from "node:http";
import { readSession } from "@tack/log";
import { Event } from "@tack/proto";
import { GatewayError, toHttpError } from "./errors.js";
import type { Exchange, Handler } from "./http.js";
import { requireSession, type GatewayContext } from "./sessions.js";

/**
 * `GET /v1/sessions/:id/events`: the session log as Server-Sent Events (`id` = seq,
 * `event` = type, `data` = the event as JSON). Starts after `Last-Event-ID` (a reconnecting
 * client) or at `?from=N`; `?follow=0` stops at the current end of the log, otherwise the
 * stream follows until the client goes away, with a comment every `keepaliveMs` so that
 * proxies keep the idle connection open.
 */
export function streamEvents(context: GatewayContext): Handler {
  return async (exchange) => {
    const row = await requireSession(context, exchange);
    const { fromSeq, follow } = streamPosition(exchange);
    // Refused (max_event_streams) before the status line; ends when the caller's key is revoked.
    const slot = context.policy.openStream(exchange);
    const { res } = exchange;
    res.writeHead(200, {
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache",
      connection: "keep-alive",
      "x-accel-buffering": "no",
    });
    res.flushHeaders();
    const gone = new AbortController();
    res.on("close", () => gone.abort());
    const signal = AbortSignal.any([gone.signal, context.shutdown, slot.signal]);
    const keepalive = setInterval(() => res.write(": keepalive\n\n"), context.options.keepaliveMs);
    try {
      const events = readSession(context.bus.nc, context.bus.names, { tenant: row.tenant, sessionId: row.id }, { fromSeq, follow, signal });
      for await (const event of events) {
        const frame = `id: ${event.seq}\nevent: ${event.type}\ndata: ${JSON.stringify(Event.toJSON(event))}\n\n`;
        if (!res.write(frame)) await drained(res);
        if (signal.aborted) break;
      }
    } catch (error) {
      // The status line is gone already: report the failure in-band, then end the stream.
      if (!signal.aborted) res.write(`event: error\ndata: ${JSON.stringify(toHttpError(error).body)}\n\n`);
    } finally {
      clearInterval(keepalive);
      slot.close();
      res.end();
    }
  };
}

function streamPosition(exchange: Exchange): { fromSeq: number; follow: boolean } {
  const lastEventId = exchange.req.headers["last-event-id"];
  const from = exchange.url.searchParams.get("from");
  const follow = exchange.url.searchParams.get("follow");
  let fromSeq = 1;
  if (typeof lastEventId === "string" && lastEventId !== "") {
    if (!/^\d+$/.test(lastEventId)) throw new GatewayError(400, "gateway.invalid_last_event_id", `Last-Event-ID must be the seq of the last event received, got ${JSON.stringify(lastEventId)}`);
    fromSeq = Number(lastEventId) + 1;
  } else if (from !== null) {
    if (!/^[1-9]\d*$/.test(from)) throw new GatewayError(400, "gateway.invalid_query", `from must be the first seq to send (an integer ≥ 1), got ${JSON.stringify(from)}`);
    fromSeq = Number(from);
  }
  if (follow !== null && !["0", "1", "false", "true"].includes(follow)) {
    throw new GatewayError(400, "gateway.invalid_query", `follow must be 0 or 1, got ${JSON.stringify(follow)}`);
  }
  return { fromSeq, follow: follow !== "0" && follow !== "false" };
}

function drained(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off("drain", done);
      res.off("close", done);
      resolve();
    };
    res.on("drain", done);
    res.on("close", done);
  });
}
