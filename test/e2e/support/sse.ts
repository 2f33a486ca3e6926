// Session logs read over the gateway's event stream in the end-to-end, security and deploy tests.
import { createParser } from "eventsource-parser";

/**
 * The data of every message of a whole Server-Sent Events body (a `follow=0` stream read with `text()`),
 * parsed by eventsource-parser, as the clients parse it, each as JSON.
 */
export function sseJson<T>(body: string): T[] {
  const events: T[] = [];
  createParser({ onEvent: (message) => events.push(JSON.parse(message.data) as T) }).feed(body);
  return events;
}
