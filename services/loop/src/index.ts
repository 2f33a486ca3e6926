// The loop service: owns running sessions (turns, steps, tool dispatch, approvals, crash recovery).
export { APPROVAL_TEXT } from "./approvals.js";
export { SUMMARY_HEADING, SUMMARY_INSTRUCTION, type CompactionSettings } from "./compaction.js";
export { Leases, type Lease, type LeaseState } from "./lease.js";
export { startLoopService, type LoopOptions, type LoopService } from "./service.js";
export { RECOVERY_TEXT, SessionRuntime, type LoopSettings } from "./session.js";
export { SESSION_TOOL_TEXT } from "./session-tools.js";
