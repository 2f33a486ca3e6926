// The gateway as the CLI uses it: where it is (TACK_GATEWAY_URL or .tack/up.json), a @tack/client
// TackClient for it, its events as proto Events for the transcript, and its failures as TackErrors.
import { TackError } from "@tack/bus";
import { TackApiError, TackClient, type EventJson, type EventStreamOptions } from "@tack/client";
import { Event } from "@tack/proto/events";
import { findUpState, readApiKey } from "./state.js";

/** A gateway to talk to and the key to talk to it with. */
export interface GatewayTarget {
  readonly url: string;
  readonly apiKey: string;
}

/** A log event as received: the decoded event and the JSON the gateway sent. */
export interface ReceivedEvent {
  readonly event: Event;
  readonly json: EventJson;
}

/** The clients of one gateway: the REST client and the session operations it does not have. */
export interface Gateway {
  readonly url: string;
  readonly client: TackClient;
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

/** The @tack/client clients of `target`. */
export function connect(target: GatewayTarget): Gateway {
  const options = { baseUrl: target.url, apiKey: target.apiKey };
  return { url: target.url, client: new TackClient(options) };
}

/**
 * `error` as a TackError for `main` to print: the gateway's own codes stay (with the HTTP
 * status in `details.status`), the client's `client.*` codes become the CLI's.
 */
export function cliError(error: unknown): unknown {
  if (!(error instanceof TackApiError)) return error;
  const details = { ...error.details, status: String(error.status) };
  const own = CLIENT_FAILURES[error.code];
  if (own) return own(error, details);
  if (error.code.startsWith("client.")) {
    return new TackError("cli.gateway_error", `${error.message} (are the CLI and the gateway from the same Tack version?)`, { details, cause: error });
  }
  return new TackError(error.code, error.message, { retryable: error.retryable, details, cause: error });
}

type Details = Record<string, string>;

/** The client's own failures (`TackApiError` codes `client.*`) that have a CLI code of their own. */
const CLIENT_FAILURES: Record<string, (error: TackApiError, details: Details) => TackError> = {
  "client.unreachable": (error, details) => new TackError("cli.gateway_unreachable", `${error.message} (or \`tack up\`)`, { retryable: true, details, cause: error }),
  "client.bad_event": (error, details) => new TackError("cli.bad_event", error.message, { details, cause: error }),
  "client.no_api_key": (error, details) => new TackError("cli.no_api_key", error.message, { details, cause: error }),
  "client.stream_dropped": (error, details) => streamDropped(error, details),
  "client.stream_failed": (error, details) => streamDropped(error, details),
  "client.event_gap": (error, details) => streamDropped(error, details),
};

function streamDropped(error: TackApiError, details: Details): TackError {
  return new TackError("cli.stream_dropped", `${error.message}; follow the session with \`tack events <id> --follow\``, { details, cause: error });
}

/**
 * A session's events in seq order as proto Events with their JSON (see `TackClient.events`);
 * failures are thrown as `cliError`s, Ctrl-C (`signal`) ends the stream quietly.
 */
export async function* receiveEvents(gateway: Gateway, sessionId: string, options: EventStreamOptions): AsyncGenerator<ReceivedEvent> {
  try {
    for await (const json of gateway.client.events(sessionId, options)) yield { event: protoEvent(json), json };
  } catch (error) {
    throw cliError(error);
  }
}

/**
 * An event of the gateway's stream (`Event.toJSON` shape: the payload under its case name; a
 * payload nested under `payload` is accepted too) as a proto Event.
 */
export function protoEvent(json: EventJson | Record<string, unknown>): Event {
  if (typeof json.type !== "string") throw new TackError("cli.bad_event", `the gateway sent an event without a type: ${JSON.stringify(json).slice(0, 200)}`);
  const payload = json.payload;
  const flat = payload && typeof payload === "object" && !Array.isArray(payload) ? { ...json, ...(payload as object) } : json;
  return Event.fromJSON(flat);
}
