// The bus credentials of a local Tack: one NATS user per service plus `admin`, in `.tack/bus/`,
// and the nats-server configuration that admits exactly those users (decision 0007).
import { randomBytes } from "node:crypto";
import { chmod, mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { TackError, type BusCredentials } from "@tack/bus";
import { BUS_USERS, natsServerAuthorization, readBusCredentials, type BusUser } from "@tack/config";

/** The credentials files of every bus user (`<dir>/<user>.json`, mode 600) and what they hold. */
export interface LocalBusCredentials {
  readonly dir: string;
  /** Absolute path of each user's credentials file, to hand to that service as TACK_NATS_CREDENTIALS. */
  readonly files: Readonly<Record<BusUser, string>>;
  readonly credentials: Readonly<Record<BusUser, BusCredentials>>;
}

/**
 * Returns the bus credentials in `dir` (mode 700), generating a random password for each user
 * whose file does not exist yet. Existing files are reused across restarts, so an operator's
 * `nats` context or a service started by hand keeps working; one that other users can read is refused.
 */
export async function ensureBusCredentials(dir: string): Promise<LocalBusCredentials> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  await chmod(dir, 0o700); // mkdir leaves an existing directory's mode alone
  const files = {} as Record<BusUser, string>;
  const credentials = {} as Record<BusUser, BusCredentials>;
  for (const user of BUS_USERS) {
    const file = join(dir, `${user}.json`);
    const fresh: BusCredentials = { user, password: randomBytes(32).toString("base64url") };
    try {
      // `wx` fails when the file exists: a concurrent start never overwrites the password another one uses.
      await writeFile(file, `${JSON.stringify(fresh)}\n`, { mode: 0o600, flag: "wx" });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    }
    const stored = readBusCredentials(file, "`tack up`");
    if (stored.user !== user) throw new TackError("cli.bus_credentials", `${file} is for user "${stored.user}", not "${user}"; delete it and run \`tack up\` again to generate it`);
    files[user] = file;
    credentials[user] = stored;
  }
  return { dir, files, credentials };
}

/**
 * Writes `<dir>/nats-server.conf` (mode 600): JetStream with its store in `storeDir`, and one
 * user per service with the permissions of `namespace` from @tack/config's table. Rewritten
 * at every start, since the namespace may differ; the listen address comes from the command line.
 */
export async function writeNatsServerConfig(dir: string, storeDir: string, namespace: string, local: LocalBusCredentials): Promise<string> {
  const file = join(dir, "nats-server.conf");
  const passwords = Object.fromEntries(BUS_USERS.map((user) => [user, local.credentials[user].password])) as Record<BusUser, string>;
  const config = { jetstream: { store_dir: storeDir }, ...natsServerAuthorization(namespace, passwords) };
  await writeFile(file, `${JSON.stringify(config, null, 2)}\n`, { mode: 0o600 });
  await chmod(file, 0o600); // an existing file keeps its mode on write
  return file;
}
