// A memory bomb under each runtime (issue 18, item 8): the command's result says the kernel's
// out-of-memory killer ended it within seconds, and the next command works, in the same
// container (runc) or in a fresh one started transparently (gVisor, whose whole sandbox the
// host kills at the memory limit).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Harness } from "./helpers.js";

const BOMB = ["python3", "-c", "a = bytearray(1 << 34)"];
const CHUNKED_BOMB = ["python3", "-c", "chunks = []\nwhile True: chunks.append(bytearray(64 * 1024 * 1024))"];

describe.each(["runc", "runsc"] as const)("memory bombs under %s", (runtime) => {
  let h: Harness;

  beforeAll(async () => {
    h = await Harness.start({ runtime });
  });
  afterAll(async () => {
    await h?.cleanup();
  });

  for (const [name, argv] of [["one 16 GiB allocation", BOMB], ["64 MiB chunks until it fails", CHUNKED_BOMB]] as const) {
    it(`oom - ${name}: the OOM result arrives within seconds and the next command works`, async () => {
      const session = `oom-${argv === BOMB ? "one" : "chunks"}`;
      const workspace = await h.workspace();
      await h.ensure({ sessionId: session, workspace });
      expect((await h.exec(session, ["bash", "-c", "echo kept > /workspace/kept.txt; echo scratch > /tmp/scratch.txt"])).exitCode).toBe(0);
      const started = Date.now();
      const result = await h.exec(session, argv, { timeoutMs: 60_000 });
      // Python's start and the allocation itself take a few seconds on a busy host; the OOM is reported right after.
      expect(Date.now() - started).toBeLessThan(10_000);
      expect(result).toMatchObject({ exitCode: 137, timedOut: false });
      expect(result.stderr).toContain("tack-agent: killed by the kernel's out-of-memory killer: the sandbox reached its memory limit\n");
      // The next command works without an ensure: in the same sandbox under runc, in a fresh one under gVisor (its scratch files gone, the workspace kept).
      const next = await h.exec(session, ["bash", "-c", "echo ok; cat /workspace/kept.txt; cat /tmp/scratch.txt 2>/dev/null || echo fresh"]);
      expect(next).toMatchObject({ exitCode: 0, stdout: runtime === "runsc" ? "ok\nkept\nfresh\n" : "ok\nkept\nscratch\n" });
      if (runtime === "runsc") expect(result.stderr).toContain("the next command runs in a fresh one");
    }, 120_000);
  }
});
