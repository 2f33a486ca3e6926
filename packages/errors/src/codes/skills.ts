import { spec } from "../spec.js";

/** Refusals of the skills service (`services/skills`). */
export const SKILLS_CODES = {
  "skills.closed": spec(503, "UNAVAILABLE", false, "The skills registry was closed (its service is stopping); start the skills service again."),
  "skills.gone": spec(404, "NOT_FOUND", false, "The skill's file was deleted, renamed or broken since the catalog was made; ask for the catalog again."),
  "skills.invalid_options": spec(500, "FAILED_PRECONDITION", false, "The skills service's start-up options are invalid (NATS URL, namespace, roots); fix them and start it again."),
  "skills.invalid_request": spec(400, "INVALID_ARGUMENT", false, "A skills request misstates a field (workspace or path not absolute, unknown invoker); fix the field the message names."),
  "skills.invalid_root": spec(400, "INVALID_ARGUMENT", false, "A skills root is not an absolute path; give an absolute directory."),
  "skills.model_not_allowed": spec(403, "PERMISSION_DENIED", false, "The skill sets disable-model-invocation, so only a person can run it (by typing /name)."),
  "skills.unknown": spec(404, "NOT_FOUND", false, "No skill of that name is visible from the workspace; use one the message suggests or lists."),
  "skills.user_not_allowed": spec(403, "PERMISSION_DENIED", false, "The skill sets user-invocable: false, so it cannot be run with /name; the model loads it when the task calls for it."),
} as const;
