// The gateway's HTTP API as the CLI uses it: where it is, sessions, messages and the event stream.
import { TackError } from "@tack/bus";
import { Event } from "@tack/proto";
import { findUpState, readApiKey } from "./state.js";
import { parseSse } from "./sse.js";

/** A gateway to talk to and the key to talk to it with. */
export interface GatewayTarget {
  readonly url: string;
  readonly apiKey: string;
}

/** A log event as received: the decoded event and the JSON the gateway sent. */
export interface ReceivedEvent {
  readonly event: Event;
  readonly json: Record<string, unknown>;
}

/** Body of `POST /v1/sessions`: a host directory (`workspace`) or a managed workspace (`workspace_id`). */
export interface CreateSessionBody {
  workspace?: string;
  workspace_id?: string;
  model: string;
  mode?: string;
  sandbox_mode?: string;
  approval_policy?: string;
  title?: string;
}

const NOT_RUNNING = "Tack is not running: start it with `make up` (or `tack up`)";

/**
 * Finds the gateway: TACK_GATEWAY_URL with TACK_API_KEY, else the `.tack/up.json` of a
 * running `tack up` in `searchDirs` (see `upStateDirs`) with its key file (TACK_API_KEY
 * overrides the file).
 */
export async function resolveGateway(env: NodeJS.ProcessEnv, searchDirs: readonly string[]): Promise<GatewayTarget> {
  const envKey = env.TACK_API_KEY?.trim() || undefined;
  if (env.TACK_GATEWAY_URL) {
    if (!envKey) throw new TackError("cli.no_api_key", "TACK_GATEWAY_URL is set but TACK_API_KEY is not; set TACK_API_KEY to the gateway's API key");
    return { url: env.TACK_GATEWAY_URL.replace(/\/+$/, ""), apiKey: envKey };
  }
  const found = await findUpState(searchDirs);
  if (!found) throw new TackError("cli.not_running", NOT_RUNNING);
  if (!found.alive) throw new TackError("cli.not_running", `${NOT_RUNNING} (${found.file} is left from pid ${found.state.pid}, which has ended)`);
  if (envKey) return { url: found.state.gatewayUrl, apiKey: envKey };
  if (found.state.apiKeyFile === null) {
    throw new TackError("cli.no_api_key", "this Tack was started with TACK_API_KEY from the environment; set TACK_API_KEY here too");
  }
  return { url: found.state.gatewayUrl, apiKey: await readApiKey(found.state.apiKeyFile) };
}

/** A client of one gateway; every failure is a TackError (gateway errors keep the gateway's code). */
export class GatewayClient {
  readonly #target: GatewayTarget;

  constructor(target: GatewayTarget) {
    this.#target = target;
  }

  /** The gateway's base URL. */
  get url(): string {
    return this.#target.url;
  }

  /** Creates a session; resolves with its id. */
  async createSession(body: CreateSessionBody): Promise<{ id: string }> {
    const created = await this.#json("POST", "/v1/sessions", body);
    if (typeof created.id !== "string") throw badAnswer("POST /v1/sessions", "no session id");
    return { id: created.id };
  }

  /** Creates a managed workspace from a tar archive (`POST /v1/workspaces`); resolves with its id. */
  async createWorkspace(archive: Uint8Array, title: string): Promise<{ id: string }> {
    const response = await this.#fetch("POST", `/v1/workspaces?title=${encodeURIComponent(title)}`, archive, { accept: "application/json", "content-type": "application/x-tar" });
    const created = (await response.json().catch(() => ({}))) as Record<string, unknown>;
    if (typeof created.id !== "string") throw badAnswer("POST /v1/workspaces", "no workspace id");
    return { id: created.id };
  }

  /** Posts a user message; resolves with the seq of its event and the turn it starts. */
  async postMessage(sessionId: string, text: string): Promise<{ seq: number; turn: number }> {
    const path = `/v1/sessions/${encodeURIComponent(sessionId)}/messages`;
    const posted = await this.#json("POST", path, { text });
    if (typeof posted.turn !== "number" || typeof posted.seq !== "number") throw badAnswer(`POST ${path}`, "no seq and turn");
    return { seq: posted.seq, turn: posted.turn };
  }

  /**
   * Streams a session's events in seq order. Without `follow` it ends after the last event.
   * With `follow`, a dropped connection (e.g. a gateway restart) is resumed from the last
   * seen seq for up to `reconnectForMs` (default 30 s); events already seen are skipped.
   */
  async *events(sessionId: string, options: { follow: boolean; signal?: AbortSignal; reconnectForMs?: number }): AsyncGenerator<ReceivedEvent> {
    let last = 0;
    let failingSince: number | undefined;
    for (;;) {
      const path = `/v1/sessions/${encodeURIComponent(sessionId)}/events?follow=${options.follow ? 1 : 0}`;
      let dropped: unknown;
      try {
        // Resuming the SSE way: the gateway starts after the last event received.
        const resume: Record<string, string> = last > 0 ? { "last-event-id": String(last) } : {};
        const response = await this.#fetch("GET", path, undefined, { accept: "text/event-stream", ...resume }, options.signal);
        failingSince = undefined;
        for await (const message of parseSse(response.body!)) {
          const received = decodeEvent(message.data);
          if (received.event.seq <= last) continue;
          last = received.event.seq;
          yield received;
        }
        if (!options.follow) return;
      } catch (error) {
        if (options.signal?.aborted || !options.follow) throw error;
        if (error instanceof TackError && error.code !== "cli.gateway_unreachable" && error.code !== "cli.stream_dropped") throw error;
        dropped = error;
      }
      failingSince ??= Date.now();
      if (Date.now() - failingSince > (options.reconnectForMs ?? 30_000)) {
        throw dropped ?? new TackError("cli.stream_dropped", `the event stream of ${sessionId} keeps closing; is the gateway at ${this.url} healthy?`);
      }
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
  }

  async #json(method: string, path: string, body?: unknown): Promise<Record<string, unknown>> {
    const response = await this.#fetch(method, path, body, { accept: "application/json" });
    const text = await response.text();
    try {
      const parsed: unknown = JSON.parse(text);
      if (parsed && typeof parsed === "object" && !Array.isArray(parsed)) return parsed as Record<string, unknown>;
    } catch {
      // fall through to the error below
    }
    throw badAnswer(`${method} ${path}`, `not a JSON object: ${text.slice(0, 200)}`);
  }

  async #fetch(method: string, path: string, body: unknown, headers: Record<string, string>, signal?: AbortSignal): Promise<Response> {
    let response: Response;
    try {
      response = await fetch(`${this.url}${path}`, {
        method,
        headers: { ...(body === undefined || body instanceof Uint8Array ? {} : { "content-type": "application/json" }), ...headers, authorization: `Bearer ${this.#target.apiKey}` },
        body: body === undefined ? undefined : body instanceof Uint8Array ? body : JSON.stringify(body),
        signal,
      });
    } catch (error) {
      if (signal?.aborted) throw error;
      const cause = (error as Error & { cause?: Error & { code?: string } }).cause;
      throw new TackError("cli.gateway_unreachable", `cannot reach the gateway at ${this.url} (${cause?.code ?? cause?.message ?? (error as Error).message}); is Tack running? Start it with \`make up\` (or \`tack up\`)`, {
        retryable: true, cause: error,
      });
    }
    if (response.ok) return response;
    const text = await response.text();
    let error: { code?: unknown; message?: unknown } | undefined;
    try {
      error = (JSON.parse(text) as { error?: { code?: unknown; message?: unknown } }).error;
    } catch {
      error = undefined;
    }
    if (typeof error?.code === "string" && typeof error.message === "string") {
      throw new TackError(error.code, error.message, { details: { status: String(response.status) } });
    }
    throw new TackError("cli.gateway_error", `the gateway answered ${method} ${path} with HTTP ${response.status}: ${text.slice(0, 200) || response.statusText}`);
  }
}

/**
 * Decodes the `data` of one SSE message: an event (`Event.toJSON` shape; a payload nested
 * under `payload` is accepted too) or an `{error:{code,message}}` the gateway sends when the
 * stream itself fails.
 */
export function decodeEvent(data: string): ReceivedEvent {
  let json: unknown;
  try {
    json = JSON.parse(data);
  } catch {
    throw new TackError("cli.bad_event", `the gateway sent an event that is not JSON: ${data.slice(0, 200)}`);
  }
  if (!json || typeof json !== "object" || Array.isArray(json)) throw new TackError("cli.bad_event", `the gateway sent an event that is not a JSON object: ${data.slice(0, 200)}`);
  const object = json as Record<string, unknown>;
  if (typeof object.type !== "string") {
    const error = object.error as { code?: unknown; message?: unknown } | undefined;
    if (typeof error?.code === "string" && typeof error.message === "string") throw new TackError(error.code, error.message);
    throw new TackError("cli.bad_event", `the gateway sent an event without a type: ${data.slice(0, 200)}`);
  }
  const payload = object.payload;
  const flat = payload && typeof payload === "object" && !Array.isArray(payload) ? { ...object, ...(payload as object) } : object;
  return { event: Event.fromJSON(flat), json: object };
}

function badAnswer(request: string, what: string): TackError {
  return new TackError("cli.gateway_error", `the gateway's answer to ${request} is malformed (${what}); are the CLI and the gateway from the same Tack version?`);
}
