import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { waitFor } from "@tack/testkit";
import { makeWorkspace, type Workspace } from "./support/call.js";

// Background jobs on this host (LocalSandboxClient, TMPDIR standing in for the container's /tmp);
// sandbox-tools.test.ts runs them in the real container.
let ws: Workspace;
beforeEach(async () => {
  ws = await makeWorkspace();
});
afterEach(async () => {
  // Jobs outlive the calls that start them: end this test's before its directories go.
  const dir = join(ws.tmp, "tack-jobs");
  for (const id of await readdir(dir).catch(() => [])) {
    const pid = Number(await readFile(join(dir, id, "pid"), "utf8").catch(() => "0"));
    try {
      if (pid > 0) process.kill(-pid, "SIGKILL");
    } catch {
      // already gone
    }
  }
  await ws.remove();
});

/** Starts `command` in the background and returns its job id. */
async function start(command: string, extra: Record<string, unknown> = {}): Promise<string> {
  const result = await ws.call("bash", { command, run_in_background: true, ...extra });
  expect(result.isError, result.content).toBe(false);
  return /^Started background job (j[0-9a-f]{6}) \(pid \d+\): /.exec(result.content)![1]!;
}

describe("background jobs", () => {
  it("jobs - bash returns the job id at once; job_output waits for its output and its end", async () => {
    const started = performance.now();
    const result = await ws.call("bash", { command: "sleep 0.5; echo done; echo oops >&2; exit 3", run_in_background: true });
    expect(performance.now() - started).toBeLessThan(2_000);
    expect(result.content).toMatch(/^Started background job j[0-9a-f]{6} \(pid \d+\): sleep 0\.5; echo done; echo oops >&2; exit 3\nIt runs on after this call, until it ends, job_kill stops it or the sandbox goes; job_output j[0-9a-f]{6} returns its output\.$/);
    const id = /job (j[0-9a-f]{6})/.exec(result.content)![1]!;
    const output = await ws.call("job_output", { id, wait_ms: 10_000 });
    // The first output may come before the end; a second call gets the rest and the exit.
    const all = output.content.includes("exited") ? output : await ws.call("job_output", { id, wait_ms: 10_000 });
    expect(all.content).toMatch(new RegExp(`^job ${id} \\(sleep 0\\.5; echo done; echo oops >&2; exit 3\\): exited 3, ran \\ds\\n`));
    expect(`${output.content}\n${all.content}`).toContain("done\noops");
    expect(all.isError).toBe(false);
  });

  it("jobs - job_output returns only what is new since its last call, and says when nothing is", async () => {
    const id = await start("echo first; read _ < fifo; echo second; sleep 30", {});
    // (the fifo does not exist: read fails at once; the job goes on)
    await waitFor("the first line", async () => (await readFile(join(ws.tmp, "tack-jobs", id, "out"), "utf8")).includes("second"), { timeoutMs: 5_000, intervalMs: 20 });
    const first = await ws.call("job_output", { id });
    expect(first.content).toMatch(new RegExp(`^job ${id} \\(echo first; read _ < fifo; echo second; sleep 30\\): running, running for \\ds\\nfirst\\n.*fifo.*\\nsecond$`));
    expect((await ws.call("job_output", { id })).content).toMatch(/: running, running for \ds\n\(no new output\)$/);
  });

  it("jobs - job_output returns at most 30,000 bytes a call, cut between UTF-8 characters, and says how much is left", async () => {
    // 29,998 + 1 bytes, then 10,000 three-byte characters: the 30,000-byte cut falls inside the first of them.
    const id = await start(`printf 'a%.0s' $(seq 29998); printf '\\n'; printf '€%.0s' $(seq 10000)`);
    await waitFor("the job to end", async () => (await ws.call("job_list", {})).content.includes("exited 0"), { timeoutMs: 10_000, intervalMs: 50 });
    const first = await ws.call("job_output", { id });
    const [header1, ...body1] = first.content.split("\n");
    expect(header1).toMatch(/: exited 0, ran \ds$/);
    expect(body1.join("\n")).toBe(`${"a".repeat(29_998)}\n(30000 more bytes of output; call job_output again for them)`);
    const second = await ws.call("job_output", { id });
    expect(second.content.split("\n").slice(1).join("\n")).toBe(`${"€".repeat(10_000)}`);
    expect((await ws.call("job_output", { id })).content).toMatch(/\n\(no new output\)$/);
  });

  it("jobs - job_list shows each job's id, state, runtime and command, oldest first", async () => {
    expect((await ws.call("job_list", {})).content).toBe("No background jobs in this sandbox (jobs end with it: after it was stopped or left idle, none are left)");
    const done = await start("exit 4");
    const running = await start("sleep 30\necho never");
    const killed = await start("sleep 31");
    await ws.call("job_kill", { id: killed });
    await waitFor("the first job to end", async () => (await ws.call("job_list", {})).content.includes("exited 4"), { timeoutMs: 5_000, intervalMs: 20 });
    const list = (await ws.call("job_list", {})).content.split("\n");
    expect(list[0]).toBe("3 background jobs (id, state, runtime, command):");
    expect(list[1]).toMatch(new RegExp(`^${done}  exited 4 \\s+\\ds  exit 4$`));
    expect(list[2]).toMatch(new RegExp(`^${running}  running  \\s+\\ds  sleep 30 …$`));
    expect(list[3]).toMatch(new RegExp(`^${killed}  killed   \\s+\\ds  sleep 31$`));
  });

  it("jobs - job_kill ends the job's whole process group and says so; a second kill says it was not running", async () => {
    const id = await start("sleep 300 & echo $! > child.pid; sleep 301");
    await waitFor("the child to be started", async () => (await readFile(join(ws.root, "child.pid"), "utf8").catch(() => "")).endsWith("\n"), { timeoutMs: 5_000, intervalMs: 20 });
    const child = Number(await readFile(join(ws.root, "child.pid"), "utf8"));
    const killed = await ws.call("job_kill", { id });
    expect(killed).toMatchObject({ isError: false });
    expect(killed.content).toMatch(new RegExp(`^Killed job ${id} \\(sleep 300 & echo \\$! > child\\.pid; sleep 301\\) after \\ds: its process group got SIGTERM, then SIGKILL if still running after 2 s$`));
    await waitFor("the background child to be gone", () => !alive(child), { timeoutMs: 5_000, intervalMs: 20 });
    expect((await ws.call("job_kill", { id })).content).toMatch(new RegExp(`^job ${id} \\(.*\\) was not running: killed after \\ds; nothing to kill$`));
    expect((await ws.call("job_output", { id })).content).toMatch(/: killed, ran \ds\n/);
  });

  it("jobs - a job that ignores SIGTERM gets SIGKILL after the grace", async () => {
    // The mark is computed, so that job_output's header (which repeats the command) cannot match before the trap is set.
    const id = await start("trap '' TERM; echo trap set $((40 + 2)); sleep 300");
    await waitFor("the trap to be set", async () => (await ws.call("job_output", { id })).content.includes("trap set 42"), { timeoutMs: 5_000, intervalMs: 20 });
    const started = performance.now();
    expect((await ws.call("job_kill", { id })).content).toContain(`Killed job ${id}`);
    expect(performance.now() - started).toBeGreaterThan(1_500);
    const pid = await jobPid(id);
    await waitFor("the job to be gone", () => !alive(pid), { timeoutMs: 5_000, intervalMs: 20 });
  });

  it("jobs - at most 10 run at once: the 11th is refused naming the running ones, and starts once one ended", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 10; i++) ids.push(await start(`sleep 60 # job ${i}`));
    const refused = await ws.call("bash", { command: "echo eleven", run_in_background: true });
    expect(refused.isError).toBe(true);
    const [first, ...running] = refused.content.split("\n");
    expect(first).toBe("Not started: 10 background jobs are already running in this sandbox, the most it runs at once; stop one with job_kill (or wait for one to end) and start this again. Running:");
    expect(running.sort()).toEqual(ids.map((id, i) => `${id}  sleep 60 # job ${i}`).sort());
    await ws.call("job_kill", { id: ids[3]! });
    await start("echo eleven");
  });

  it("jobs - run in workdir; a workdir that does not exist is refused", async () => {
    await ws.call("bash", { command: "mkdir -p sub" });
    const id = await start("pwd; touch made-here", { workdir: "sub" });
    await waitFor("the job to end", async () => (await ws.call("job_list", {})).content.includes("exited 0"), { timeoutMs: 5_000, intervalMs: 20 });
    expect((await ws.call("job_output", { id })).content).toMatch(/\n.*\/sub$/);
    await expect(readFile(join(ws.root, "sub/made-here"))).resolves.toBeDefined();
    expect(await ws.call("bash", { command: "true", workdir: "nope", run_in_background: true })).toMatchObject({
      isError: true, content: "workdir nope is not a directory in /workspace; create it first (mkdir -p) or leave workdir out",
    });
    expect(await ws.call("bash", { command: "true", workdir: "../up", run_in_background: true })).toMatchObject({ isError: true, content: expect.stringContaining("is outside /workspace") });
  });

  it("jobs - an unknown job id says the job is gone; one that could name a path is invalid", async () => {
    const gone = "No job j000000 in this sandbox: it never existed here, or it is gone with the sandbox it ran in (stopped, or removed after being idle). job_list shows the jobs there are.";
    expect(await ws.call("job_output", { id: "j000000" })).toMatchObject({ isError: true, content: gone });
    expect(await ws.call("job_kill", { id: "j000000" })).toMatchObject({ isError: true, content: gone });
    expect(await ws.call("job_output", { id: "../tack-reads" })).toMatchObject({
      isError: true, content: "Invalid arguments for job_output: id: is not a job id; ids look like j1a2b3c (job_list shows them)",
    });
  });

  it("jobs - the pid a start reports already leads the job's process group, so the group can be signalled at once", async () => {
    // The start used to record the pid before the job's setsid had run: a kill of the group right after it found none (ESRCH).
    // Nine starts, under the sandbox's limit of ten running jobs (afterEach ends them).
    for (let i = 0; i < 9; i++) {
      const pid = await jobPid(await start("sleep 300"));
      expect(() => process.kill(-pid, 0), `start ${i}`).not.toThrow();
    }
  });

  it("jobs - a job whose process was killed outside job_kill shows as ended without an exit code", async () => {
    const id = await start("sleep 300");
    const pid = await jobPid(id);
    process.kill(-pid, "SIGKILL");
    await waitFor("the job to be gone", () => !alive(pid), { timeoutMs: 5_000, intervalMs: 20 });
    expect((await ws.call("job_list", {})).content).toContain(`${id}  ended (no exit code: killed outside job_kill)`);
  });
});

/** The pid of job `id`'s wrapper (its process group), once the start has recorded it. */
async function jobPid(id: string): Promise<number> {
  const file = join(ws.tmp, "tack-jobs", id, "pid");
  await waitFor("the job's pid to be recorded", async () => (await readFile(file, "utf8").catch(() => "")) !== "", { timeoutMs: 5_000, intervalMs: 10 });
  return Number(await readFile(file, "utf8"));
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

