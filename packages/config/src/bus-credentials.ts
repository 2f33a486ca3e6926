// Which NATS user a component connects as, and over which TLS files: read once from the
// environment by `commonConfig()` (decision 0007). No credentials means an open NATS, as in
// tests against a shared server; `tack up` always sets them for the server it starts.
import { accessSync, constants, readFileSync, statSync } from "node:fs";
import type { BusAuth, BusCredentials, BusTls } from "@tack/bus";
import { z } from "zod";

/** Raised for missing, malformed or exposed bus credentials; the message names the variable or file and the fix. */
export class BusCredentialsError extends Error {
  readonly code = "config.bus_credentials";
  constructor(message: string) {
    super(message);
    this.name = "BusCredentialsError";
  }
}

// One subject token: the user name becomes the reply-inbox prefix `_INBOX.<user>`.
const USER = /^[A-Za-z0-9_-]{1,64}$/;
const USER_MESSAGE = "must be 1-64 letters, digits, '_' or '-'";

/** A credentials file: `{"user": "loop", "password": "..."}` (the keys a `nats` CLI context uses), mode 600. */
const CredentialsFile = z.strictObject({
  user: z.string().regex(USER, USER_MESSAGE),
  password: z.string().min(1, "must not be empty"),
});

/**
 * Reads a credentials file, refusing one that other users can read (like the API key file and
 * the llm's credentials file) or that is not `{"user": ..., "password": ...}`; `source` names
 * where the path came from in the error message.
 */
export function readBusCredentials(file: string, source = "TACK_NATS_CREDENTIALS"): BusCredentials {
  let mode: number;
  let text: string;
  try {
    mode = statSync(file).mode;
    text = readFileSync(file, "utf8");
  } catch (error) {
    throw new BusCredentialsError(`cannot read the NATS credentials file ${file} named by ${source} (${(error as NodeJS.ErrnoException).code ?? (error as Error).message}); fix the path, or run \`tack up\` to generate one`);
  }
  if ((mode & 0o077) !== 0) {
    throw new BusCredentialsError(`the NATS credentials file ${file} is readable by other users (mode ${(mode & 0o777).toString(8)}); restrict it with \`chmod 600 ${file}\``);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new BusCredentialsError(`the NATS credentials file ${file} is not JSON; write {"user": "<service>", "password": "<secret>"}`);
  }
  const parsed = CredentialsFile.safeParse(json);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((i) => `${i.path.join(".") || "file"} ${i.message}`).join("; ");
    throw new BusCredentialsError(`the NATS credentials file ${file} is invalid (${problems}); write {"user": "<service>", "password": "<secret>"}`);
  }
  return parsed.data;
}

/**
 * The bus authentication configured in `env`: TACK_NATS_CREDENTIALS (a file) or
 * TACK_NATS_USER with TACK_NATS_PASSWORD, and optionally TACK_NATS_TLS_CA, TACK_NATS_TLS_CERT
 * and TACK_NATS_TLS_KEY. Every file is checked here, so a service fails at start, not at its first reconnect.
 */
export function busAuthFromEnv(env: NodeJS.ProcessEnv): BusAuth {
  const file = env.TACK_NATS_CREDENTIALS || undefined;
  const user = env.TACK_NATS_USER || undefined;
  const password = env.TACK_NATS_PASSWORD || undefined;
  let credentials: BusCredentials | undefined;
  if (file) {
    if (user || password) throw new BusCredentialsError("both TACK_NATS_CREDENTIALS and TACK_NATS_USER/TACK_NATS_PASSWORD are set; set only one of them");
    credentials = readBusCredentials(file);
  } else if (user || password) {
    if (!user) throw new BusCredentialsError("TACK_NATS_PASSWORD is set without TACK_NATS_USER; set both, or TACK_NATS_CREDENTIALS to a credentials file");
    if (!password) throw new BusCredentialsError(`TACK_NATS_USER=${user} is set without TACK_NATS_PASSWORD; set both, or TACK_NATS_CREDENTIALS to a credentials file`);
    if (!USER.test(user)) throw new BusCredentialsError(`TACK_NATS_USER ${USER_MESSAGE}, got ${JSON.stringify(user)}`);
    credentials = { user, password };
  }
  const tls: { -readonly [K in keyof BusTls]: BusTls[K] } = {};
  for (const [variable, key] of [["TACK_NATS_TLS_CA", "caFile"], ["TACK_NATS_TLS_CERT", "certFile"], ["TACK_NATS_TLS_KEY", "keyFile"]] as const) {
    const path = env[variable] || undefined;
    if (!path) continue;
    try {
      accessSync(path, constants.R_OK);
    } catch (error) {
      throw new BusCredentialsError(`cannot read ${variable} file ${path} (${(error as NodeJS.ErrnoException).code ?? (error as Error).message}); fix the path or unset ${variable}`);
    }
    tls[key] = path;
  }
  if (Boolean(tls.certFile) !== Boolean(tls.keyFile)) {
    throw new BusCredentialsError("TACK_NATS_TLS_CERT and TACK_NATS_TLS_KEY go together (a client certificate and its key); set both or neither");
  }
  return { ...(credentials ? { credentials } : {}), ...(Object.keys(tls).length > 0 ? { tls } : {}) };
}
