import { spec } from "../spec.js";

/** Failures the `tack` command reports on its own (`packages/cli`); they never cross HTTP. */
export const CLI_CODES = {
  "cli.already_running": spec(409, "FAILED_PRECONDITION", false, "Tack already runs from this directory; stop it with `tack down` first."),
  "cli.api_key_insecure": spec(500, "FAILED_PRECONDITION", false, "The API key file is readable by other users; restrict it with `chmod 600`."),
  "cli.api_key_unreadable": spec(500, "FAILED_PRECONDITION", false, "The API key file cannot be read or is empty; run `tack up` again to create it."),
  "cli.api_key_unwritable": spec(500, "FAILED_PRECONDITION", false, "The API key file cannot be written; check that .tack/ is writable."),
  "cli.bad_env": spec(400, "INVALID_ARGUMENT", false, "An environment variable holds an unusable value (e.g. TACK_GATEWAY_PORT not a port); fix it."),
  "cli.bad_event": spec(502, "INTERNAL", false, "The gateway sent an event that is not a JSON event object; run the CLI and the gateway from the same Tack version."),
  "cli.bad_workspace": spec(400, "INVALID_ARGUMENT", false, "The --workspace given to `tack mcp list` or `tack skills list` is not an existing directory; pass a project directory."),
  "cli.bad_up_state": spec(500, "FAILED_PRECONDITION", false, ".tack/up.json is not valid; delete it and start Tack again with `tack up`."),
  "cli.bus_credentials": spec(500, "FAILED_PRECONDITION", false, "A bus credentials file under .tack/bus/ is for another user; delete it and run `tack up` again."),
  "cli.gateway_error": spec(502, "INTERNAL", false, "The gateway answered with an error the CLI cannot show as a Tack error, or with a malformed answer; run the CLI and the gateway from the same Tack version."),
  "cli.gateway_unreachable": spec(503, "UNAVAILABLE", true, "The gateway cannot be reached; is Tack running? Start it with `make up` (or `tack up`)."),
  "cli.mcp_config_invalid": spec(400, "INVALID_ARGUMENT", false, "The MCP configuration file is not valid JSON of the expected shape; fix it or move it away."),
  "cli.mcp_config_unreadable": spec(500, "FAILED_PRECONDITION", false, "The MCP configuration file cannot be read; check its permissions."),
  "cli.mcp_config_unwritable": spec(500, "FAILED_PRECONDITION", false, "The MCP configuration file cannot be written; check that its directory is writable."),
  "cli.mcp_exists": spec(409, "ALREADY_EXISTS", false, "The MCP configuration already has a server of that name; pass --force to replace it, or choose another name."),
  "cli.mcp_import_source": spec(400, "INVALID_ARGUMENT", false, "The MCP import source cannot be read or its format told; give claude-desktop, codex, or the path of a .json or .toml file."),
  "cli.mcp_unknown": spec(404, "NOT_FOUND", false, "The MCP configuration has no server of that name; use one it lists, or the --scope whose file has it."),
  "cli.no_api_key": spec(401, "UNAUTHENTICATED", false, "No API key is known for the gateway; set TACK_API_KEY."),
  "cli.not_running": spec(503, "UNAVAILABLE", false, "Tack is not running here (no live .tack/up.json); start it with `tack up`, or set TACK_GATEWAY_URL and TACK_API_KEY."),
  "cli.skill_exists": spec(409, "ALREADY_EXISTS", false, "The skill is installed already; pass --force to replace it."),
  "cli.skill_fetch": spec(502, "UNAVAILABLE", false, "Fetching the skill's source (git clone, npm pack) failed; the message quotes the command, fix the source or the network."),
  "cli.skill_install": spec(500, "FAILED_PRECONDITION", false, "The skill could not be written into its skills root; check that the root is writable."),
  "cli.skill_install_forbidden": spec(403, "PERMISSION_DENIED", false, "The operator does not allow installing skills (or not from this kind of source); see skills.install in the operator configuration."),
  "cli.skill_invalid": spec(400, "INVALID_ARGUMENT", false, "A SKILL.md of the source is invalid (the message lists each problem); nothing was installed, fix the files."),
  "cli.skill_name": spec(400, "INVALID_ARGUMENT", false, "The --name given does not fit the source's skills (it names itself otherwise, or has no such skill); use a name the message gives."),
  "cli.skill_none": spec(400, "INVALID_ARGUMENT", false, "The source has no SKILL.md at its root and no skills/<name>/SKILL.md; point at a skill folder."),
  "cli.skill_source": spec(400, "INVALID_ARGUMENT", false, "The skill source is not a git URL, npm package, .tgz or folder (or cannot be read); give one of those."),
  "cli.stop_timeout": spec(504, "DEADLINE_EXCEEDED", false, "Tack did not stop in time after `tack down`; see .tack/logs/ and end the process with kill -9."),
  "cli.stream_dropped": spec(502, "UNAVAILABLE", false, "The session's event stream kept closing (or ended before the turn did); check the gateway, and follow the session with `tack events <id> --follow`."),
  "cli.usage": spec(400, "INVALID_ARGUMENT", false, "The command line is wrong (the message says how, with the usage); fix the arguments."),
} as const;

/** Failures of the launcher behind `tack up` (`packages/cli`): starting NATS and the services. */
export const LAUNCH_CODES = {
  "launch.already_running": spec(409, "FAILED_PRECONDITION", false, "The service asked to start already runs; kill it first."),
  "launch.invalid_options": spec(400, "INVALID_ARGUMENT", false, "The launch options are invalid (replicas, restart policy, namespace); fix the option the message names."),
  "launch.missing_service": spec(500, "FAILED_PRECONDITION", false, "A service's entry point does not exist; use a complete Tack checkout (or `make build`)."),
  "launch.nats_failed": spec(500, "FAILED_PRECONDITION", false, "The nats-server process exited during start-up; read its log (named in the message)."),
  "launch.nats_missing": spec(500, "FAILED_PRECONDITION", false, "No nats-server is on PATH; install it (`apt-get install nats-server`) or set NATS_URL to a running server with JetStream."),
  "launch.no_such_replica": spec(404, "NOT_FOUND", false, "The service has no replica of that number; use one in the range the message gives."),
  "launch.not_running": spec(409, "FAILED_PRECONDITION", false, "The replica is not running now; wait for it or start it first."),
  "launch.not_started": spec(404, "NOT_FOUND", false, "The service is not part of this launch; add it to the services started."),
  "launch.service_exited": spec(500, "FAILED_PRECONDITION", false, "A service exited during start-up; the message quotes the end of its log, fix what it says."),
  "launch.stopped": spec(409, "FAILED_PRECONDITION", false, "This launch was stopped, so nothing starts again; launch Tack again."),
  "launch.timeout": spec(504, "DEADLINE_EXCEEDED", false, "NATS or a service did not become ready in time; read the log the message names."),
} as const;

/** Failures of the test kit (`packages/testkit`), seen only by Tack's own tests. */
export const TESTKIT_CODES = {
  "testkit.bad_cluster": spec(400, "INVALID_ARGUMENT", false, "A test asked for a NATS cluster (or node) that cannot exist; give 1 to 9 nodes and an existing node index."),
  "testkit.bad_wait": spec(400, "INVALID_ARGUMENT", false, "A test gave `waitFor` a timeout or interval that is not a positive number of milliseconds."),
  "testkit.cluster_failed": spec(500, "INTERNAL", false, "A test NATS cluster node failed to start or answer; its last output is in the message."),
  "testkit.timeout": spec(504, "DEADLINE_EXCEEDED", false, "A test's condition did not hold within its timeout; the message says what the last probe saw."),
} as const;
