// The sandbox service: hardened containers per session and mode, commands run in them over the bus.
export { startSandboxService, type SandboxService } from "./service.js";
export type { CompiledOptions, SandboxServiceOptions } from "./options.js";
export type { PoolStatus } from "./pool.js";
export { placementBucket, replicaSubject, type Placement } from "./placements.js";
export { MODES, type SandboxMode } from "./spec.js";
export { DEFAULT_TIMEOUT_MS, MAX_OUTPUT_BYTES, MAX_TIMEOUT_MS } from "./exec.js";
export type { BackendFactory, BackendOptions, RuntimeTraits, SandboxBackend, SandboxSpec } from "./backend.js";
