import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect, it } from "vitest";
import { startLlmService } from "../src/index.js";
import { tokenizerLoaded } from "../src/tokens.js";

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";

// Issue 19 item 8: the service said `ready`, then its first completion loaded the tokenizer
// synchronously (seconds, event loop blocked, nothing sent) and the caller's 10 s idle limit
// ran out on a loaded machine. Started means able to answer promptly: the load happens first.
it("llm ready - the tokenizer is loaded before the service serves, not inside its first request", async () => {
  const home = await mkdtemp(join(tmpdir(), "tack-llm-ready-"));
  expect(tokenizerLoaded()).toBe(false);
  const service = await startLlmService({ url: NATS_URL, namespace: `t${randomBytes(6).toString("hex")}`, home, env: {}, scripts: { scriptDirs: [home] } });
  try {
    expect(tokenizerLoaded()).toBe(true);
  } finally {
    await service.stop();
    await rm(home, { recursive: true, force: true });
  }
}, 60_000);
