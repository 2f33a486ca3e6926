// The loop service: owns running sessions (turns, steps, tool dispatch, crash recovery).
export { Leases, type Lease, type LeaseState } from "./lease.js";
export { startLoopService, type LoopOptions, type LoopService } from "./service.js";
export { MODES, RECOVERY_TEXT, SessionRuntime, type LoopSettings } from "./session.js";
