// Where the Tack checkout is: services and examples are found relative to this file, not the cwd.
import { fileURLToPath } from "node:url";
import { join } from "node:path";

/** Absolute path of the repository root (this file is packages/cli/src/paths.ts). */
export const repoRoot = fileURLToPath(new URL("../../../", import.meta.url)).replace(/\/$/, "");

/** Absolute path of the repository's `examples/` directory. */
export const examplesDir = join(repoRoot, "examples");
