// The Tack CLI package: the `tack` command lives in main.ts; this entry exports the process launcher for tests and tools.
export { launch, MAX_REPLICAS, SERVICES, type Launched, type LaunchOptions, type ReplicaState, type ReplicaStatus, type RestartEvent, type RestartOptions, type ServiceName } from "./launcher.js";
