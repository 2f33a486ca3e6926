import { spec } from "../spec.js";

/** Refusals and failures of the loop (`services/loop`), which owns sessions, turns and their log. */
export const LOOP_CODES = {
  "loop.bad_answer": spec(400, "INVALID_ARGUMENT", false, "The answers do not fit the pending question (count, labels or free text); answer each question in order with its option labels or your own words in `other`."),
  "loop.bad_approval_policy": spec(400, "INVALID_ARGUMENT", false, "The approval policy is unknown; use `ask` or `never`."),
  "loop.bad_budget": spec(400, "INVALID_ARGUMENT", false, "`budget_usd` is negative or not a number; give a positive amount of US dollars, or leave it out for no budget."),
  "loop.bad_decision": spec(400, "INVALID_ARGUMENT", false, "The decision is not one an approval takes (allow_once or reject), or the decision, answer or plan review names no one deciding; send allow_once or reject, and who decided."),
  "loop.bad_copy": spec(400, "INVALID_ARGUMENT", false, "A session copy (fork or import) was refused: its events must start with session/created, run seq 1..N, end at a turn boundary and name only the source session's spilled objects; fork at an ended turn or export the session again."),
  "loop.bad_request": spec(502, "INTERNAL", false, "A service sent the loop a request missing a field it needs (such as who deletes a session); this is a bug in the sender, so report it with the request id."),
  "loop.outdated_request": spec(400, "FAILED_PRECONDITION", false, "A caller older than this loop sent a retired request shape (a question or plan through DecideApproval, a plan or session mode through SetSandboxMode); the message names the new rpc: upgrade the gateway to this loop's version."),
  "loop.bad_sandbox_mode": spec(400, "INVALID_ARGUMENT", false, "The sandbox mode is unknown (or the change names no one making it); use read-only, workspace-write or danger-full-access."),
  "loop.bad_workspace": spec(400, "INVALID_ARGUMENT", false, "The session's workspace is not an absolute path; give an absolute directory."),
  "loop.busy": spec(409, "ABORTED", true, "The session is running a turn or changing its sandbox mode; wait for its turn/end and send the request again."),
  "loop.compact_busy": spec(409, "FAILED_PRECONDITION", true, "A turn is running, so the session cannot be compacted now; wait for the turn to end (turn/end) or cancel it (POST /v1/sessions/{id}/cancel), then compact."),
  "loop.empty_message": spec(400, "INVALID_ARGUMENT", false, "The message text is empty; send the task as text."),
  "loop.hook_failed": spec(502, "INTERNAL", false, "A hook could not be run at all (its request failed); it is logged and the session goes on as if the hook had not run, so check the tools and sandbox services."),
  "loop.lease_lost": spec(502, "ABORTED", false, "Another loop process took the session over while this one worked on it; this process stops writing, and the session goes on with the new owner."),
  "loop.llm_unavailable": spec(503, "UNAVAILABLE", true, "No llm service answers, so the model could not be checked; start Tack with `tack up` and retry."),
  "loop.log_unreadable": spec(502, "DATA_LOSS", false, "The session's log could not be read whole (fewer events than its last seq); check the JetStream log stream, then retry."),
  "loop.missing_model": spec(400, "INVALID_ARGUMENT", false, "No model was given; name one such as deepseek:deepseek-chat or scripted:/path/script.json."),
  "loop.mode_change_refused": spec(409, "FAILED_PRECONDITION", false, "Processes started under the wider sandbox mode still run; stop them (job_kill or let them end), then change the mode."),
  "loop.mode_fixed": spec(409, "FAILED_PRECONDITION", false, "The session already has messages, so its tool mode is fixed; create a new session with the mode you want."),
  "loop.no_pending_approval": spec(404, "NOT_FOUND", false, "No approval is pending for this call id (already decided or never asked); see the session's approval/asked events."),
  "loop.no_pending_plan": spec(404, "NOT_FOUND", false, "No plan is waiting for review (or none for this call id); the model submits one with exit_plan_mode while in plan mode."),
  "loop.no_pending_question": spec(404, "NOT_FOUND", false, "No question is pending for this call id (already answered or never asked); see the session's question/asked events."),
  "loop.projection_mismatch": spec(502, "INTERNAL", false, "The model request built from the cached projection differs from a fresh derivation of the log, so it was not sent; send the message again (the session is reloaded)."),
  "loop.rules_unreadable": spec(502, "INTERNAL", false, "The rules files (AGENTS.md, CLAUDE.md, TACK_RULES_FILES) could not be read through the tools service; check the tools and sandbox services' logs."),
  "loop.sandbox_unavailable": spec(503, "UNAVAILABLE", true, "No sandbox service answers, so the session's containers could not be checked or removed; start Tack with `tack up` and retry."),
  "loop.session_busy": spec(409, "ABORTED", true, "Another loop process holds the session (or it is being deleted); retry later."),
  "loop.session_exists": spec(409, "ALREADY_EXISTS", false, "A session with this id already exists; choose another id or leave it empty."),
  "loop.spend_not_recorded": spec(502, "ABORTED", true, "The tenant's spend could not be recorded because other loop replicas kept writing first; retry the call."),
  "loop.step_failed": spec(502, "INTERNAL", false, "A step failed in a way Tack did not expect (the message says how); the turn ends, so send the message again and report it if it repeats."),
  "loop.summary_empty": spec(502, "INTERNAL", false, "Compaction asked the model for a summary and got an empty one, so nothing was replaced; send the message (or /compact) again to retry, or start a new session if it repeats."),
  "loop.tools_unavailable": spec(503, "UNAVAILABLE", true, "No tools service answers, so the mode could not be checked; start Tack with `tack up` and retry."),
  "loop.unknown_mode": spec(400, "INVALID_ARGUMENT", false, "The tools service has no such mode; use one it lists (standard, code, minimal, creator)."),
  "loop.unknown_session": spec(404, "NOT_FOUND", false, "The session does not exist (or has no log yet); create it first."),
  "loop.wait_abandoned": spec(502, "ABORTED", false, "A call waiting for a person was handed to the session's next owner because this loop let the session go; the new owner answers it."),
} as const;

/** Budgets the loop enforces before each model call. */
export const BUDGET_CODES = {
  "budget.session_exceeded": spec(429, "RESOURCE_EXHAUSTED", false, "The next model call could cross the session's budget_usd, so the turn stops; start a new session with a larger budget to go on."),
  "budget.tenant_exceeded": spec(429, "RESOURCE_EXHAUSTED", false, "The next model call could cross the tenant's budget_usd; ask the operator to raise it in the operator configuration (or TACK_TENANT_BUDGETS)."),
} as const;
