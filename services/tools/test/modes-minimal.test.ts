import { randomBytes } from "node:crypto";
import { readFileSync, rmSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { CallToolRequest, CallToolResponse } from "@tack/proto";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { callTool, listTools } from "../src/registry.js";
import { makeWorkspace, type Workspace } from "./support/call.js";
import { ToolsOverBus } from "./support/over-bus.js";

let ws: Workspace;
let sessionId: string;
beforeEach(async () => {
  ws = await makeWorkspace();
  // The local stand-in runs the shell on this host, under /tmp/tack-shell-<session>: one per test.
  sessionId = `m${randomBytes(6).toString("hex")}`;
});
afterEach(async () => {
  const dir = `/tmp/tack-shell-${sessionId}`;
  try {
    process.kill(-Number(readFileSync(join(dir, "pid"), "utf8")), "SIGKILL");
  } catch {
    // no shell, or already gone
  }
  rmSync(dir, { recursive: true, force: true });
  await ws.remove();
});

function call(name: string, args: unknown, sandboxMode = "workspace-write"): Promise<CallToolResponse> {
  return callTool(CallToolRequest.fromPartial({
    sessionId, tenant: "t1", callId: "call-1", name, arguments: JSON.stringify(args), workspace: ws.root,
    sandboxMode, attempt: 1, firstAttemptAtMs: Date.now(), sessionMode: "minimal",
  }), { sandbox: ws.sandbox, spills: { get: async () => undefined }, signal: new AbortController().signal });
}
const sh = (command: string, extra: Record<string, unknown> = {}) => call("shell", { command, ...extra });

describe("minimal mode", () => {
  it("minimal - lists shell and editor only; a standard tool is refused", async () => {
    expect(listTools("minimal").map((t) => t.name)).toEqual(["shell", "editor"]);
    expect(await call("bash", { command: "ls" })).toMatchObject({ isError: true, content: "Not run: bash is not a tool of mode minimal; its tools are shell, editor" });
  });
});

describe("shell", () => {
  it("shell - keeps cwd, variables and functions between calls", async () => {
    expect(await sh("mkdir -p sub/deeper && cd sub && export GREETING=hi && LOCAL=kept && say() { echo \"$GREETING $1\"; }")).toMatchObject({ isError: false, content: "exit code: 0" });
    expect(await sh("cd deeper; pwd")).toMatchObject({ content: `${ws.root}/sub/deeper\nexit code: 0` });
    expect(await sh('say there; echo "$LOCAL"; pwd')).toMatchObject({ isError: false, content: `hi there\nkept\n${ws.root}/sub/deeper\nexit code: 0` });
  });

  it("shell - returns stdout and stderr together and flags a non-zero exit", async () => {
    const result = await sh("echo out; echo err >&2; false");
    expect(result).toMatchObject({ isError: true, content: "out\nerr\nexit code: 1" });
    // A command that does not parse fails alone: the shell goes on, with its state.
    await sh("export KEEP=1");
    expect(await sh('echo "unclosed')).toMatchObject({ isError: true, content: expect.stringMatching(/unexpected EOF[\s\S]*exit code: 2$/) });
    expect(await sh("echo $KEEP")).toMatchObject({ isError: false, content: "1\nexit code: 0" });
  });

  it("shell - a killed shell is started again on the next call, which says its state was reset", async () => {
    await sh("cd /tmp && export GONE=1");
    const pid = Number(readFileSync(`/tmp/tack-shell-${sessionId}/pid`, "utf8"));
    process.kill(pid, "SIGKILL");
    const result = await sh('pwd; echo "[$GONE]"');
    expect(result).toMatchObject({
      isError: false,
      content: `(the previous shell had ended; this is a new one: cwd and environment are reset)\n${ws.root}\n[]\nexit code: 0`,
    });
    expect(Number(readFileSync(`/tmp/tack-shell-${sessionId}/pid`, "utf8"))).not.toBe(pid);
  });

  it("shell - `exit` answers with its code and ends the shell; so does a kill of the shell from inside", async () => {
    expect(await sh("echo bye; exit 3")).toMatchObject({ isError: true, content: "bye\nexit code: 3" });
    expect((await sh("echo again")).content).toBe("(the previous shell had ended; this is a new one: cwd and environment are reset)\nagain\nexit code: 0");
    expect(await sh("echo last words; kill -9 $$")).toMatchObject({
      isError: true, content: "last words\nthe shell was killed while running this command; the next call starts a new one (cwd and environment reset)\nexit code: 137",
    });
  });

  it("shell - a command past its timeout is killed with the shell, and the next call gets a new one", async () => {
    const started = Date.now();
    const result = await sh("echo started; sleep 30", { timeout_ms: 1000 });
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(result).toMatchObject({ isError: true, content: "started\ntimed out after 1000 ms: the shell was killed; the next call starts a new one (cwd and environment reset)\nexit code: 137" });
    expect(await sh("echo fine")).toMatchObject({ isError: false, content: expect.stringMatching(/\nfine\nexit code: 0$/) });
  });

  it("shell - calls of one session at once each get their own output", async () => {
    const results = await Promise.all([1, 2, 3, 4].map((n) => sh(`sleep 0.1; echo call ${n}`)));
    expect(results.map((r) => r.content.split("\n").at(-2))).toEqual(["call 1", "call 2", "call 3", "call 4"]);
  });
});

describe("editor", () => {
  const ed = (args: Record<string, unknown>, mode?: string) => call("editor", args, mode);

  it("editor - create, then view with line numbers, all or a range", async () => {
    expect(await ed({ command: "create", path: "src/a.txt", file_text: "one\ntwo\nthree\nfour\n" })).toMatchObject({ isError: false, content: "Created src/a.txt (19 bytes)" });
    expect(readFileSync(join(ws.root, "src/a.txt"), "utf8")).toBe("one\ntwo\nthree\nfour\n");
    expect((await ed({ command: "view", path: "src/a.txt" })).content).toBe("     1\tone\n     2\ttwo\n     3\tthree\n     4\tfour");
    expect((await ed({ command: "view", path: "src/a.txt", view_range: [2, 3] })).content).toBe("     2\ttwo\n     3\tthree");
    expect((await ed({ command: "view", path: "src/a.txt", view_range: [3, -1] })).content).toBe("     3\tthree\n     4\tfour");
    expect(await ed({ command: "view", path: "src/a.txt", view_range: [3, 9] })).toMatchObject({
      isError: true, content: "view_range [3, 9] is not within 1..4 of src/a.txt; use -1 as last to read to the end",
    });
    expect(await ed({ command: "view", path: "nope.txt" })).toMatchObject({ isError: true, content: "File not found: nope.txt" });
  });

  it("editor - view of a directory lists it two levels deep, without hidden entries", async () => {
    await mkdir(join(ws.root, "d/e/f"), { recursive: true });
    await writeFile(join(ws.root, "d/x.txt"), "");
    await mkdir(join(ws.root, "d/.git"));
    expect((await ed({ command: "view", path: "d" })).content).toBe("d/e\nd/e/f\nd/x.txt");
  });

  it("editor - str_replace replaces text that occurs once, and says why not otherwise", async () => {
    await writeFile(join(ws.root, "b.txt"), "alpha\nbeta\nalpha\ngamma\n");
    expect(await ed({ command: "str_replace", path: "b.txt", old_str: "beta", new_str: "BETA" })).toMatchObject({ isError: false, content: "Edited b.txt: replaced the text at line 2" });
    expect(readFileSync(join(ws.root, "b.txt"), "utf8")).toBe("alpha\nBETA\nalpha\ngamma\n");
    expect(await ed({ command: "str_replace", path: "b.txt", old_str: "alpha", new_str: "A" })).toMatchObject({
      isError: true, content: "old_str occurs 2 times in b.txt; include more surrounding lines so it occurs once",
    });
    expect(await ed({ command: "str_replace", path: "b.txt", old_str: "delta", new_str: "D" })).toMatchObject({ isError: true, content: expect.stringMatching(/^old_str not found in b.txt/) });
    expect(await ed({ command: "str_replace", path: "b.txt", old_str: "gamma" })).toMatchObject({ isError: true, content: "editor str_replace needs new_str" });
    expect(readFileSync(join(ws.root, "b.txt"), "utf8")).toBe("alpha\nBETA\nalpha\ngamma\n");
  });

  it("editor - insert puts lines after insert_line (0: at the top), keeping the final newline", async () => {
    await writeFile(join(ws.root, "c.txt"), "a\nb\n");
    expect(await ed({ command: "insert", path: "c.txt", insert_line: 0, new_str: "top" })).toMatchObject({ content: "Inserted 1 line after line 0 of c.txt" });
    expect(await ed({ command: "insert", path: "c.txt", insert_line: 3, new_str: "x\ny\n" })).toMatchObject({ content: "Inserted 2 lines after line 3 of c.txt" });
    expect(readFileSync(join(ws.root, "c.txt"), "utf8")).toBe("top\na\nb\nx\ny\n");
    expect(await ed({ command: "insert", path: "c.txt", insert_line: 9, new_str: "z" })).toMatchObject({
      isError: true, content: "insert_line 9 is past the end of c.txt, which has 5 lines",
    });
  });

  it("editor - changes are denied before running in read-only mode; view is not", async () => {
    await writeFile(join(ws.root, "r.txt"), "r\n");
    const denied = await ed({ command: "insert", path: "r.txt", insert_line: 0, new_str: "no" }, "read-only");
    expect(denied.isError).toBe(true);
    expect(denied.content).toMatch(/^Denied: sandbox mode read-only does not allow editing r\.txt\./);
    expect(ws.sandbox.executed).toHaveLength(0);
    expect(await ed({ command: "view", path: "r.txt" }, "read-only")).toMatchObject({ isError: false, content: "     1\tr" });
  });
});

// The shell where it really runs: a daemon in the session's container, which must outlive the exec that started it.
describe("shell in the sandbox", () => {
  let s: ToolsOverBus;
  beforeAll(async () => {
    s = await ToolsOverBus.start({ mode: "minimal", sessionId: "m1" });
  });
  afterAll(() => s?.stop());
  const shell = (command: string) => s.call("shell", { command });

  it("shell in the sandbox - state carries over between calls in the container, and a killed shell is replaced", async () => {
    expect(await shell("mkdir -p /workspace/w && cd /workspace/w && export MARK=$$")).toMatchObject({ isError: false });
    const second = await shell('pwd; echo "$MARK" = $$; cat /etc/debian_version');
    expect(second.content).toMatch(/^\/workspace\/w\n(\d+) = \1\n12\.\d+\nexit code: 0$/);
    expect(await shell("kill -9 $$")).toMatchObject({ isError: true });
    expect(await shell('pwd; echo "[$MARK]"')).toMatchObject({
      isError: false, content: "(the previous shell had ended; this is a new one: cwd and environment are reset)\n/workspace\n[]\nexit code: 0",
    });
  });
});
