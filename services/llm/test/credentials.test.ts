// The llm service reads its keys with @tack/credentials: an insecure credentials file stops it.
import { chmod, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { credentialsPath } from "@tack/credentials";
import { afterEach, beforeEach, expect, it } from "vitest";
import { startLlmService } from "../src/service.js";

let home: string;
beforeEach(async () => {
  home = await mkdtemp(join(tmpdir(), "tack-home-"));
  await mkdir(join(home, ".tack"));
});
afterEach(() => rm(home, { recursive: true, force: true }));

it("credentials - the service refuses to start with a world-readable file", async () => {
  const path = credentialsPath(home);
  await writeFile(path, "deepseek:\n  api_key: sk-from-file\n");
  await chmod(path, 0o604);
  const error = await startLlmService({ url: "nats://127.0.0.1:4222", namespace: "tunused", scripts: { scriptDirs: [] }, home, env: {} }).then(() => {
    throw new Error("expected a failure");
  }, (error: unknown) => error as Error);
  expect(error).toMatchObject({ code: "llm.insecure_credentials" });
  expect(error.message).toContain(`chmod 600 ${path}`);
});
