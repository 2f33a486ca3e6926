// Entrypoint of the tack-services image (built by scripts/build-images.mjs into /opt/tack/dist/entrypoint.js):
//
//   docker run tack-services:<version> <gateway|loop|llm|tools|sandbox|skills|mcp>   run that service
//   docker run --user 0 -v DIR:DIR tack-services:<version> init DIR                   a deploy's secrets and config
//
// A service is started by importing its bundle (dist/services/<name>/main.js) in this process: no second
// Node start-up. Anything else is refused with one line naming the choices, exit code 2.
import { randomBytes } from "node:crypto";
import { chmodSync, chownSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { isAbsolute, join } from "node:path";
import { BUS_USERS, natsServerAuthorization, type BusUser } from "../../packages/config/src/bus-permissions.js";

/** The services this image runs, by the first argument. */
export const SERVICES = ["gateway", "loop", "llm", "tools", "sandbox", "skills", "mcp"] as const;

/** The fixed user ids of the images (scripts/build-images.mjs): files `init` writes are owned by who reads them. */
const UID = { tack: 10001, nats: 10002, postgres: 10003, root: 0 } as const;

const USAGE = `usage: tack-services <${SERVICES.join("|")}> | init DIR | help`;

/** Prints one line naming what was wrong and how to fix it, then exits with `code`. */
function refuse(message: string, code = 2): never {
  process.stderr.write(`tack-services: ${message}\n`);
  process.exit(code);
}

/**
 * `init DIR`: writes what a compose deploy mounts, once (existing files are kept, so passwords survive a
 * second run): `bus/<user>.json` for every bus user (mode 600, owned by the user id of the container that
 * reads it), `nats-server.conf` (JetStream in /data, the users and permissions of TACK_NAMESPACE from
 * @tack/config's table), `api-key` (an admin key of TACK_TENANT for the gateway), `postgres-password` (and
 * the same in `gateway-db-password` for the gateway),
 * and `config.yaml` (the operator configuration: TACK_WORKSPACES as the tenant's workspace root, managed
 * workspaces under TACK_DATA/workspaces). Host paths, because the sandbox service hands them to the host's
 * Docker engine: mount DIR, TACK_WORKSPACES and TACK_DATA at the same paths.
 */
function init(args: string[]): void {
  const [dir] = args;
  if (!dir || !isAbsolute(dir) || args.length !== 1) refuse(`init takes one absolute directory (the deploy's secrets), got ${JSON.stringify(args)}; run: docker run --rm --user 0 -v DIR:DIR tack-services:<version> init DIR`);
  if (process.getuid?.() !== 0) refuse("init sets the owners of the files it writes and must run as root: add --user 0 to docker run");
  const env = process.env;
  const namespace = env.TACK_NAMESPACE || "tack";
  const tenant = env.TACK_TENANT || "local";
  const token = /^[a-z0-9][a-z0-9_-]{0,63}$/;
  if (!token.test(namespace)) refuse(`TACK_NAMESPACE must be 1-64 lowercase letters, digits, '_' or '-', got ${JSON.stringify(namespace)}`);
  if (!token.test(tenant)) refuse(`TACK_TENANT must be 1-64 lowercase letters, digits, '_' or '-', got ${JSON.stringify(tenant)}`);
  for (const name of ["TACK_WORKSPACES", "TACK_DATA"] as const) {
    if (!env[name] || !isAbsolute(env[name])) refuse(`${name} must be an absolute host path (${name === "TACK_WORKSPACES" ? "the directory whose subdirectories sessions may work in" : "where managed workspaces are kept"}), got ${JSON.stringify(env[name] ?? "")}`);
  }
  mkdirSync(join(dir, "bus"), { recursive: true, mode: 0o755 });
  const secret = (file: string, owner: number, make: () => string): string => {
    const path = join(dir, file);
    if (!existsSync(path)) writeFileSync(path, make(), { mode: 0o600, flag: "wx" });
    chownSync(path, owner, owner);
    chmodSync(path, 0o600);
    return readFileSync(path, "utf8");
  };
  const ownerOf = (user: BusUser): number => (user === "admin" || user === "sandbox" ? UID.root : UID.tack);
  const passwords = {} as Record<BusUser, string>;
  for (const user of BUS_USERS) {
    const text = secret(`bus/${user}.json`, ownerOf(user), () => `${JSON.stringify({ user, password: randomBytes(32).toString("base64url") })}\n`);
    passwords[user] = (JSON.parse(text) as { password: string }).password;
  }
  // Rewritten each time: the namespace or the permission table may have changed since.
  writeFileSync(join(dir, "nats-server.conf"), `${JSON.stringify({ jetstream: { store_dir: "/data" }, ...natsServerAuthorization(namespace, passwords) }, null, 2)}\n`, { mode: 0o600 });
  chownSync(join(dir, "nats-server.conf"), UID.nats, UID.nats);
  chmodSync(join(dir, "nats-server.conf"), 0o600);
  secret("api-key", UID.tack, () => randomBytes(32).toString("base64url"));
  const dbPassword = secret("postgres-password", UID.postgres, () => randomBytes(24).toString("base64url"));
  // The same password for the gateway's index (TACK_DB_PASSWORD_FILE), owned by the user the gateway runs as.
  secret("gateway-db-password", UID.tack, () => dbPassword);
  const config = {
    tenants: { [tenant]: { workspace_roots: [env.TACK_WORKSPACES], max_sandbox_mode: "workspace-write" } },
    keys: [{ tenant, role: "admin", name: "compose", file: "/run/secrets/api_key" }],
    workspaces: { dir: join(env.TACK_DATA!, "workspaces") },
  };
  // JSON is YAML: the operator configuration loader reads it as it is.
  if (!existsSync(join(dir, "config.yaml"))) {
    writeFileSync(join(dir, "config.yaml"), `# Written by \`tack-services init\`; edit freely (it is not rewritten while it exists).\n${JSON.stringify(config, null, 2)}\n`);
  }
  mkdirSync(join(env.TACK_DATA!, "workspaces"), { recursive: true, mode: 0o755 });
  process.stdout.write(`tack-services: wrote the bus credentials (${BUS_USERS.join(", ")}), nats-server.conf for namespace ${namespace}, api-key, postgres-password, gateway-db-password and config.yaml to ${dir}\n`);
}

const [command, ...args] = process.argv.slice(2);
if ((SERVICES as readonly string[]).includes(command ?? "")) {
  if (args.length > 0) refuse(`${command} takes no arguments (it is configured by environment variables), got ${JSON.stringify(args)}`);
  // The entrypoint sits beside the service bundles in /opt/tack/dist.
  await import(new URL(`./services/${command}/main.js`, import.meta.url).href);
} else if (command === "init") {
  init(args);
} else if (command === "help" || command === "--help" || command === "-h") {
  process.stdout.write(`${USAGE}\n`);
} else {
  refuse(command === undefined ? `no service given; ${USAGE}` : `unknown service ${JSON.stringify(command)}; the first argument must be one of ${SERVICES.join(", ")} (or init, help)`);
}
