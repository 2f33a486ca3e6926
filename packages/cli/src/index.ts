// The Tack CLI package: the `tack` command lives in main.ts; this entry exports the process launcher for tests and tools.
export { launch, SERVICES, type Launched, type LaunchOptions, type ServiceName } from "./launcher.js";
