import { spec } from "../spec.js";

/** Refusals and failures of the tools service (`services/tools`): tool definitions, rules and hooks reads. */
export const TOOLS_CODES = {
  "tools.bad_sandbox_mode": spec(502, "INTERNAL", false, "A tool call arrived with a sandbox mode that is not one; this is a bug in the sender (the loop)."),
  "tools.cancelled": spec(503, "UNAVAILABLE", true, "The tools service is stopping and cancelled the call; it is retried on another worker."),
  "tools.hooks_unreadable": spec(502, "INTERNAL", false, "Reading the hooks files inside the session's sandbox failed or timed out; check that the sandbox image has bash and coreutils."),
  "tools.invalid_options": spec(500, "FAILED_PRECONDITION", false, "The tools service's start-up options are invalid (NATS URL, namespace); fix the environment and start it again."),
  "tools.invalid_request": spec(502, "INTERNAL", false, "A request to the tools service misses or misstates a field (the message names it); this is a bug in the sender."),
  "tools.rules_failed": spec(502, "INTERNAL", false, "Reading the rules files inside the session's sandbox failed or timed out; check that the sandbox image has bash and coreutils."),
  "tools.unknown_mode": spec(400, "INVALID_ARGUMENT", false, "The tools service has no such mode; use one it lists."),
  "tools.unknown_tool": spec(400, "INVALID_ARGUMENT", false, "No tool of that name exists in the session's mode; call one of the tools the message lists."),
} as const;
