// How a service process is started: the one place that knows where each service's entry point is.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { repoRoot } from "./paths.js";

/** A service process's command line (run with cwd = the repository root). */
export interface ServiceCommand {
  readonly command: string;
  readonly args: readonly string[];
  /** The file that must exist for the command to work (checked before start, to fail with a clear message). */
  readonly entry: string;
}

/** The command that runs service `name` (`services/<name>/src/main.ts` through tsx). */
export function serviceCommand(name: string): ServiceCommand {
  const entry = join(repoRoot, "services", name, "src", "main.ts");
  return { command: process.execPath, args: ["--import", "tsx", entry], entry };
}

/** True when the entry point of service `name` exists. */
export function hasServiceEntry(name: string): boolean {
  return existsSync(serviceCommand(name).entry);
}
