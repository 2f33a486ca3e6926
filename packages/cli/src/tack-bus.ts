// How a command reaches the running Tack's bus as the operator: the NATS of the `tack up` whose
// .tack/up.json is found (as `tack status` and `tack down` find it), else NATS_URL and TACK_NAMESPACE.
import { dirname, join } from "node:path";
import { Bus, type BusAuth } from "@tack/bus";
import { findUpState, upStateDirs, type FoundUpState } from "./state.js";

/** Where the running Tack is, or why none was found. */
export type TackLocation =
  | { readonly running: true; readonly natsUrl: string; readonly namespace: string; readonly found: FoundUpState | undefined; readonly env: NodeJS.ProcessEnv }
  | { readonly running: false; readonly reason: string };

/**
 * The running Tack for `cwd`: a live `.tack/up.json` in `cwd`, a parent or the checkout, else the
 * bus named by NATS_URL (namespace TACK_NAMESPACE, default `tack`). Not running: a sentence saying why.
 */
export async function locateTack(cwd: string, env: NodeJS.ProcessEnv): Promise<TackLocation> {
  const found = await findUpState(upStateDirs(cwd));
  if (found?.alive) return { running: true, natsUrl: found.state.natsUrl, namespace: found.state.namespace, found, env };
  if (env.NATS_URL) return { running: true, natsUrl: env.NATS_URL, namespace: env.TACK_NAMESPACE || "tack", found: undefined, env };
  if (found) return { running: false, reason: `Tack is not running (${found.file} is left from pid ${found.state.pid}, which has ended; start Tack with \`tack up\`)` };
  return { running: false, reason: "Tack is not running (no .tack/up.json here, in a parent directory or in the Tack checkout, and no NATS_URL; start it with `tack up`)" };
}

/** The operator's credentials: a local nats-server's `bus/admin.json` beside up.json, else the TACK_NATS_* variables. */
export async function operatorAuth(found: FoundUpState | undefined, env: NodeJS.ProcessEnv): Promise<BusAuth> {
  // Loaded only here: the commands that need no bus start faster without the configuration package.
  const { busAuthFromEnv, readBusCredentials } = await import("@tack/config");
  if (found?.state.localNats) return { credentials: readBusCredentials(join(dirname(found.file), "bus", "admin.json"), "`tack up`") };
  return busAuthFromEnv(env);
}

/** Connects to a running Tack's bus as the operator; `name` is the connection's name (e.g. `tack-mcp-list`). */
export async function connectToTack(location: Extract<TackLocation, { running: true }>, name: string): Promise<Bus> {
  return Bus.connect({ url: location.natsUrl, namespace: location.namespace, name, ...(await operatorAuth(location.found, location.env)) });
}
