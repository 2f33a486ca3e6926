// The sandbox service: one hardened container per session, commands run in it over the bus.
export { startSandboxService, type SandboxService } from "./service.js";
export type { CompiledOptions, SandboxServiceOptions } from "./options.js";
export { MODES, type SandboxMode } from "./spec.js";
export { DEFAULT_TIMEOUT_MS, MAX_OUTPUT_BYTES, MAX_TIMEOUT_MS } from "./exec.js";
