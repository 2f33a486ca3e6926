// Writes docs/errors.md from the error catalogue in packages/errors/src/.
// `node scripts/gen-errors.mjs` writes it; `node scripts/gen-errors.mjs --check` fails when it is stale.
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { tsImport } from "tsx/esm/api";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const target = join(root, "docs/errors.md");
const { errorsMarkdown } = await tsImport(join(root, "packages/errors/src/doc.ts"), import.meta.url);
const fresh = errorsMarkdown();

if (process.argv.includes("--check")) {
  let current = "";
  try {
    current = readFileSync(target, "utf8");
  } catch {
    // a missing file is stale
  }
  if (current !== fresh) {
    console.error("docs/errors.md is stale\nfix: run `node scripts/gen-errors.mjs` and commit the result");
    process.exit(1);
  }
  console.log("docs/errors.md is up to date");
} else {
  writeFileSync(target, fresh);
  console.log("generated docs/errors.md");
}
