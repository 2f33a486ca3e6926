// The file and shell tools against the real sandbox service (NATS, Docker, the exec agent), the way
// the tools service calls them: background jobs, read records and edit checks live in the session's
// container, so every tools replica sees them and they end with it.
import { writeFile, chown, mkdir } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "@tack/testkit";
import type { CallToolResponse } from "@tack/proto";
import { Harness } from "../../sandbox/test/helpers.js";
import { callTool } from "../src/registry.js";
import { BusSandboxClient } from "../src/sandbox.js";

let h: Harness;
let workspace: string;
let calls = 0;

beforeAll(async () => {
  h = await Harness.start();
  workspace = await h.workspace();
});
afterAll(async () => {
  await h?.cleanup();
});

/**
 * Calls tool `name` in session `sessionId` through its own BusSandboxClient, as a tools replica of
 * its own would (`harness` defaults to the shared one).
 */
async function call(sessionId: string, name: string, args: unknown, harness = h, ws = workspace, mode = "workspace-write"): Promise<CallToolResponse> {
  await harness.logSession(sessionId, "acme", ws);
  calls += 1;
  return callTool(
    { sessionId, tenant: "acme", callId: `call-${calls}`, name, arguments: JSON.stringify(args), workspace: ws, sandboxMode: mode, attempt: 1, firstAttemptAtMs: Date.now() },
    { sandbox: new BusSandboxClient(harness.bus), spills: { get: async () => undefined }, signal: new AbortController().signal },
  );
}

async function startJob(sessionId: string, command: string, harness = h, ws = workspace): Promise<string> {
  const result = await call(sessionId, "bash", { command, run_in_background: true }, harness, ws);
  expect(result.isError, result.content).toBe(false);
  return /^Started background job (j[0-9a-f]{6}) /.exec(result.content)![1]!;
}

const gone = (id: string) => `No job ${id} in this sandbox: it never existed here, or it is gone with the sandbox it ran in (stopped, or removed after being idle). job_list shows the jobs there are.`;

describe("tools in the sandbox", () => {
  it("sandbox tools - a background job runs on in the container; job_output (from any replica) returns its output incrementally", async () => {
    const id = await startJob("s-jobs", "for i in 1 2 3; do echo tick $i; sleep 0.3; done; echo done");
    const first = await call("s-jobs", "job_output", { id, wait_ms: 5_000 });
    expect(first.content).toMatch(new RegExp(`^job ${id} \\(for i in 1 2 3; do echo tick \\$i; sleep 0\\.3; done; echo done\\): running, running for \\ds\\ntick 1`));
    let all = first.content.split("\n").slice(1).join("\n");
    while (!all.endsWith("done")) {
      const next = await call("s-jobs", "job_output", { id, wait_ms: 5_000 });
      all += `\n${next.content.split("\n").slice(1).join("\n")}`;
    }
    // Every line once: each call returned only what was new.
    expect(all).toBe("tick 1\ntick 2\ntick 3\ndone");
    await waitFor("the job to be listed as exited", async () => (await call("s-jobs", "job_list", {})).content.includes(`${id}  exited 0`), { timeoutMs: 10_000, intervalMs: 100 });
  });

  it("sandbox tools - job_kill ends the job's process group in the container", async () => {
    const id = await startJob("s-kill", "sleep 301 & sleep 302");
    await waitFor("both sleeps to run", async () => commands(await h.processes("s-kill")).filter((c) => /^sleep 30[12]$/.test(c)).length === 2, { timeoutMs: 10_000, intervalMs: 100 });
    expect((await call("s-kill", "job_kill", { id })).content).toMatch(new RegExp(`^Killed job ${id} \\(sleep 301 & sleep 302\\) after \\ds`));
    await waitFor("the sleeps to be gone", async () => !commands(await h.processes("s-kill")).some((c) => c.startsWith("sleep 30")), { timeoutMs: 10_000, intervalMs: 100 });
    expect((await call("s-kill", "job_list", {})).content).toMatch(new RegExp(`${id}  killed `));
  });

  it("sandbox tools - jobs die with their sandbox: after a stop, job_list shows none and job_output says the job is gone", async () => {
    const id = await startJob("s-stop", "sleep 300");
    expect((await call("s-stop", "job_list", {})).content).toMatch(new RegExp(`^1 background job .*\\n${id}  running `));
    expect(await h.release("s-stop")).toEqual({ removed: true });
    expect(await call("s-stop", "job_list", {})).toMatchObject({ isError: false, content: "No background jobs in this sandbox (jobs end with it: after it was stopped or left idle, none are left)" });
    expect(await call("s-stop", "job_output", { id })).toMatchObject({ isError: true, content: gone(id) });
  });

  it("sandbox tools - jobs die with their sandbox: after the idle reaper removed it, the same", async () => {
    const idle = await Harness.start({ idleTimeoutMs: 1_000 });
    try {
      const ws = await idle.workspace();
      const id = await startJob("s-idle", "sleep 300", idle, ws);
      // A running job is not use: the container goes once no call came for the idle timeout.
      await waitFor("the reaper to remove the container", async () => (await idle.containerIds("s-idle")).length === 0, { timeoutMs: 30_000, intervalMs: 200 });
      expect((await call("s-idle", "job_list", {}, idle, ws)).content).toBe("No background jobs in this sandbox (jobs end with it: after it was stopped or left idle, none are left)");
      expect(await call("s-idle", "job_output", { id }, idle, ws)).toMatchObject({ isError: true, content: gone(id) });
    } finally {
      await idle.cleanup();
    }
  });

  it("sandbox tools - a retried start replays the first attempt: one job, named by the same id", async () => {
    await h.logSession("s-retry", "acme", workspace);
    const start = (attempt: number) => callTool(
      { sessionId: "s-retry", tenant: "acme", callId: "call-start", name: "bash", arguments: JSON.stringify({ command: "sleep 120", run_in_background: true }), workspace, sandboxMode: "workspace-write", attempt, firstAttemptAtMs: Date.now() },
      { sandbox: new BusSandboxClient(h.bus), spills: { get: async () => undefined }, signal: new AbortController().signal },
    );
    const first = await start(1);
    const retried = await start(2);
    expect(retried).toMatchObject({ replayed: true, content: first.content, isError: false });
    const id = /job (j[0-9a-f]{6})/.exec(first.content)![1]!;
    expect((await call("s-retry", "job_list", {})).content).toMatch(new RegExp(`^1 background job \\(.*\\n${id}  running `));
  });

  it("sandbox tools - at most 10 jobs run at once in a container", async () => {
    for (let i = 0; i < 10; i++) await startJob("s-limit", `sleep 120 # ${i}`);
    const refused = await call("s-limit", "bash", { command: "sleep 1", run_in_background: true });
    expect(refused.isError).toBe(true);
    expect(refused.content.split("\n")).toHaveLength(11);
  });

  it("sandbox tools - bash workdir runs in a directory of /workspace", async () => {
    await call("s-dir", "bash", { command: "mkdir -p sub/dir" });
    expect((await call("s-dir", "bash", { command: "pwd", workdir: "sub/dir" })).content).toBe("/workspace/sub/dir\nexit code: 0");
    expect(await call("s-dir", "bash", { command: "pwd", workdir: "gone" })).toMatchObject({ isError: true, content: "workdir gone is not a directory in /workspace; create it first (mkdir -p) or leave workdir out" });
    const id = await startJob("s-dir", "cd sub && pwd");
    expect((await call("s-dir", "job_output", { id, wait_ms: 5_000 })).content).toContain("/workspace/sub");
  });

  it("sandbox tools - edit needs a read in this session with the file unchanged since; the record is in the container", async () => {
    await writeOwned("e.ts", "const a = 1;\n");
    expect((await call("s-edit", "edit", { path: "e.ts", old_string: "1", new_string: "2" })).content).toBe(
      "read e.ts first: edit only changes a file read in this session (with read), so that old_string comes from what the file holds",
    );
    // Another session's read is no read of this session's.
    await call("s-other", "read", { path: "e.ts" });
    expect((await call("s-edit", "edit", { path: "e.ts", old_string: "1", new_string: "2" })).content).toMatch(/^read e\.ts first/);
    await call("s-edit", "read", { path: "/workspace/e.ts" });
    expect(await call("s-edit", "edit", { path: "e.ts", old_string: "1", new_string: "2" })).toMatchObject({ isError: false, content: "Edited e.ts: replaced 1 occurrence" });
    expect(await call("s-edit", "edit", { path: "e.ts", old_string: "2", new_string: "3" })).toMatchObject({ isError: false });
    await call("s-edit", "bash", { command: "echo '// more' >> e.ts" });
    expect((await call("s-edit", "edit", { path: "e.ts", old_string: "3", new_string: "4" })).content).toMatch(/^e\.ts changed since you read it \(size 13 → 21 bytes, mtime .+\) — read it again, then edit$/);
  });

  it("sandbox tools - read describes an image and pages text by bytes in the container's UTF-8 locale", async () => {
    const png = Buffer.alloc(5000);
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13, 0x49, 0x48, 0x44, 0x52, 0, 0, 2, 0x80, 0, 0, 1, 0xe0]).copy(png);
    await writeOwned("shot.png", png);
    const shot = await call("s-read", "read", { path: "shot.png" });
    expect(shot.content).toBe("[image: shot.png, PNG 640x480, 5 KB]");
    expect(shot.images.map((i) => [i.mimeType, Buffer.from(i.data).equals(png)])).toEqual([["image/png", true]]);
    await writeOwned("wide.txt", `${"é".repeat(2500)}\n`);
    expect((await call("s-read", "read", { path: "wide.txt" })).content).toBe(`     1\t${"é".repeat(2000)}... (line cut at 2000 characters)`);
  });
});

function commands(listing: { processes: Array<{ command: string }> }): string[] {
  return listing.processes.map((p) => p.command);
}

/** A file in the workspace owned by the sandbox's user, as the sandbox would have made it. */
async function writeOwned(name: string, content: string | Buffer): Promise<void> {
  await mkdir(join(workspace, name, ".."), { recursive: true });
  await writeFile(join(workspace, name), content);
  await chown(join(workspace, name), 1000, 1000);
}
