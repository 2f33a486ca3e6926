import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { CallToolRequest, CallToolResponse } from "@tack/proto";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { declarations } from "../src/modes/code.js";
import { compileProgram, DEFAULT_CODE_LIMITS, runProgram, type SpawnProgram } from "../src/modes/program.js";
import { callTool, listTools } from "../src/registry.js";
import { bash } from "../src/tools/bash.js";
import { edit } from "../src/tools/edit.js";
import { glob } from "../src/tools/glob.js";
import { grep } from "../src/tools/grep.js";
import { read } from "../src/tools/read.js";
import { write } from "../src/tools/write.js";
import { makeWorkspace, type Workspace } from "./support/call.js";
import { ToolsOverBus } from "./support/over-bus.js";

const ROOT = join(import.meta.dirname, "../../..");
const STANDARD = [read, write, edit, glob, grep, bash];

let ws: Workspace;
beforeEach(async () => {
  ws = await makeWorkspace();
});
afterEach(async () => {
  await ws.remove();
});

/** Calls `name` as a session of mode `sessionMode` would (call id `call-1`, sandbox mode workspace-write). */
function call(name: string, args: unknown, sessionMode = "code"): Promise<CallToolResponse> {
  return callTool(CallToolRequest.fromPartial({
    sessionId: "s1", tenant: "t1", callId: "call-1", name, arguments: JSON.stringify(args), workspace: ws.root,
    sandboxMode: "workspace-write", attempt: 1, firstAttemptAtMs: Date.now(), sessionMode,
  }), { sandbox: ws.sandbox, spills: { get: async () => undefined }, signal: new AbortController().signal });
}

const runCode = (code: string, extra: Record<string, unknown> = {}) => call("run_code", { code, ...extra });

describe("code mode", () => {
  it("code mode - lists run_code only, its description declaring every standard tool's signature", () => {
    const tools = listTools("code");
    expect(tools.map((t) => t.name)).toEqual(["run_code"]);
    const description = tools[0]!.description;
    const standard = listTools("standard");
    for (const tool of standard.filter((t) => t.handler === "")) expect(description).toContain(`  ${tool.name}(args`);
    // Tools the loop carries out are not callable from a program: such a call never reaches the loop.
    const session = standard.filter((t) => t.handler === "session");
    expect(session.length).toBeGreaterThan(0);
    for (const tool of session) expect(description).not.toContain(`  ${tool.name}(args`);
    expect(description).toContain("    path: string; // File path, relative to /workspace or absolute");
    expect(description).toContain("    limit?: number; // Maximum number of lines; default 2000");
    // What only the loop acts on is left out of the signatures.
    expect(description).not.toContain("sandbox_permissions");
    expect(description).toContain("120 s, 128 MB heap, 100000 characters of output, 200 tool calls");
  });

  it("code mode - the declarations type-check a correct program and reject a wrong argument (tsc)", () => {
    const dir = mkdtempSync(join(tmpdir(), "tack-code-decl-"));
    try {
      const check = (program: string) => {
        writeFileSync(join(dir, "program.ts"), `${declarations(STANDARD)}\nexport {};\n${program}\n`);
        // No @types: the program sees only the declarations and the language.
        const options = { strict: true, noEmit: true, target: "es2022", module: "es2022", lib: ["es2022"], types: [] };
        writeFileSync(join(dir, "tsconfig.json"), JSON.stringify({ compilerOptions: options, files: ["program.ts"] }));
        return spawnSync(join(ROOT, "node_modules/.bin/tsc"), ["-p", join(dir, "tsconfig.json")], { encoding: "utf8" });
      };
      expect(check(`const t: string = await tools.read({ path: "a" }); await tools.bash({ command: "ls", timeout_ms: 5 }); await tools.edit({ path: "a", old_string: "x", new_string: "y" });`).status).toBe(0);
      const wrong = check(`await tools.read({ path: 7 });`);
      expect(wrong.status).not.toBe(0);
      expect(wrong.stdout).toContain("Type 'number' is not assignable to type 'string'");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("code mode - a program chains tool calls; each is made through callTool and returned as an inner call", async () => {
    await writeFile(join(ws.root, "a.txt"), "one\ntwo\n");
    const result = await runCode(`
      const text: string = await tools.read({ path: "a.txt" });
      await tools.write({ path: "b.txt", content: text.toUpperCase() });
      const out = await tools.bash({ command: "grep -c . b.txt" });
      console.log("lines:", out.split("\\n")[0]);
      return { ok: true };`);
    expect(result).toMatchObject({ isError: false, content: 'lines: 2\nreturned: {\n  "ok": true\n}' });
    expect(readFileSync(join(ws.root, "b.txt"), "utf8")).toBe("     1\tONE\n     2\tTWO");
    expect(result.innerCalls.map((c) => [c.name, JSON.parse(c.arguments) as unknown, c.isError])).toEqual([
      ["read", { path: "a.txt" }, false],
      ["write", { path: "b.txt", content: "     1\tONE\n     2\tTWO" }, false],
      ["bash", { command: "grep -c . b.txt" }, false],
    ]);
    expect(result.innerCalls[0]!.content).toBe("     1\tone\n     2\ttwo");
    expect(result.innerCalls[2]!.content).toBe("2\nexit code: 0");
    expect(result.innerCalls.every((c) => c.durationMs > 0)).toBe(true);
    // Each inner call keys its execs under its own id, so a retried program replays them instead of running them twice.
    expect(ws.sandbox.executed.map((r) => r.execKey)).toEqual(["call-1.1#1", "call-1.2#1", "call-1.3#1"]);
    expect(ws.sandbox.executed.every((r) => r.mode === "workspace-write")).toBe(true);
  });

  it("code mode - a failed inner call throws an Error with the tool's message; uncaught, it fails run_code", async () => {
    const caught = await runCode(`
      try { await tools.read({ path: "missing.txt" }); } catch (e) { console.log("caught:", (e as Error).message, e instanceof Error); }
      await tools.bash({ command: "exit 3" });`);
    expect(caught.isError).toBe(true);
    expect(caught.content).toBe("caught: File not found: missing.txt true\nuncaught Error: exit code: 3");
    expect(caught.innerCalls.map((c) => [c.name, c.isError, c.content])).toEqual([
      ["read", true, "File not found: missing.txt"],
      ["bash", true, "exit code: 3"],
    ]);
  });

  it("code mode - invalid arguments of an inner call are the same validation error as a direct call's", async () => {
    const result = await runCode(`await (tools.read as any)({ path: 7 })`);
    expect(result.content).toBe("uncaught Error: Invalid arguments for read: path: Invalid input: expected string, received number");
  });

  it("code mode - a program that does not compile says where", async () => {
    const result = await runCode("const x: number = ;\nreturn x");
    expect(result.isError).toBe(true);
    expect(result.content).toMatch(/^The program does not compile:\nline 1:19: Unexpected ";"/);
  });

  it("code mode - a direct call of a standard tool is refused with how to call it from run_code, and runs nothing", async () => {
    const result = await call("bash", { command: "touch x" });
    expect(result).toMatchObject({ isError: true, innerCalls: [] });
    expect(result.content).toBe('Not run: in code mode bash is called from a run_code program, e.g. run_code with code: console.log(await tools.bash({"command":"touch x"}))');
    expect(ws.sandbox.ensured).toHaveLength(0);
    // And the other way round: run_code is not a standard tool.
    expect(await call("run_code", { code: "1" }, "")).toMatchObject({ isError: true, content: expect.stringMatching(/^Not run: run_code is not a tool of mode standard; its tools are read, write, edit, glob, grep, bash, /) });
  });

  it("code mode - the program runs in a process of its own through the sandbox client, never in the service's process", async () => {
    process.env.TACK_TEST_SERVICE_SECRET = "service-only";
    try {
      const result = await runCode(`return [process.pid === ${process.pid}, process.env.TACK_TEST_SERVICE_SECRET ?? "absent", typeof tools.read]`);
      expect(result).toMatchObject({ isError: false, content: 'returned: [\n  false,\n  "absent",\n  "function"\n]' });
    } finally {
      delete process.env.TACK_TEST_SERVICE_SECRET;
    }
  });

  it("code mode - an infinite loop is stopped at the wall-clock limit, keeping the output printed before", async () => {
    const started = Date.now();
    const result = await runCode(`console.log("before"); while (true) {}`, { timeout_ms: 1_000 });
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(result).toMatchObject({ isError: true, content: "before\nstopped: the program ran past its wall-clock limit of 1000 ms and was stopped" });
  });

  it("code mode - a huge allocation is stopped at the heap limit", async () => {
    const result = await runCode(`const keep = []; for (;;) keep.push(new Array(1_000_000).fill(7));`);
    expect(result).toMatchObject({ isError: true, content: "stopped: the program ran out of its 128 MB heap and was stopped" });
  });

  it("code mode - output over the cap is left out and counted", async () => {
    const result = await runCode(`console.log("x".repeat(150_000)); console.log("tail");`);
    expect(result.isError).toBe(false);
    expect(result.content).toBe(`${"x".repeat(100_000)}\n(50006 more characters of output left out: the limit is 100000; print less)`);
  });
});

describe("code program", () => {
  const limits = { ...DEFAULT_CODE_LIMITS, calls: 3 };
  const spawn: SpawnProgram = (argv, onOutput) => ws.sandbox.spawn({ sessionId: "s1", mode: "workspace-write", argv }, onOutput);
  it("code program - calls past the limit fail inside the program and never reach the tools", async () => {
    const reached: string[] = [];
    const outcome = await runProgram(await compileProgram(`
      const results = [];
      for (let i = 0; i < 5; i++) results.push(await tools.echo({ i }).catch((e) => "refused: " + e.message));
      return results;`), { tools: ["echo"], limits, spawn, callInner: async (_name, args) => (reached.push(args), { content: args, isError: false }) });
    expect(reached).toEqual(['{"i":0}', '{"i":1}', '{"i":2}']);
    expect(outcome.calls).toBe(5);
    expect(JSON.parse((outcome.end as { value: string }).value)).toEqual([
      '{"i":0}', '{"i":1}', '{"i":2}',
      "refused: tools.echo: not run, the program already made its limit of 3 tool calls",
      "refused: tools.echo: not run, the program already made its limit of 3 tool calls",
    ]);
  });

  it("code program - calls still running when the program ends are awaited, so every call made is answered", async () => {
    let answered = 0;
    const outcome = await runProgram(await compileProgram(`void tools.slow({}); return "ended"`), {
      tools: ["slow"], limits, spawn,
      callInner: async () => {
        await new Promise((resolve) => setTimeout(resolve, 300));
        answered += 1;
        return { content: "late", isError: false };
      },
    });
    expect(outcome.end).toEqual({ kind: "returned", value: "ended" });
    expect(answered).toBe(1);
  });
});

// The same program against the real sandbox service (a Docker container) over the bus.
describe("code mode in the sandbox", () => {
  let s: ToolsOverBus;
  beforeAll(async () => {
    s = await ToolsOverBus.start({ mode: "code", sessionId: "c1" });
  });
  afterAll(() => s?.stop());

  it("code mode in the sandbox - tools.list and a run_code call whose inner calls run in the session's container", async () => {
    const listed = await s.list();
    expect(listed.tools.map((t) => t.name)).toEqual(["run_code"]);
    const code = `
      await tools.write({ path: "notes/hi.txt", content: "hello from the program\\n" });
      const os = await tools.bash({ command: "cat /etc/debian_version; pwd; cat notes/hi.txt" });
      const found = await tools.glob({ pattern: "*.txt" });
      console.log(os);
      return found;`;
    const response = await s.call("run_code", { code });
    expect(response.isError).toBe(false);
    // Debian bookworm (12.x) in the container, whatever the host runs; the workspace mounted at /workspace.
    expect(response.content).toMatch(/^12\.\d+\n\/workspace\nhello from the program\nexit code: 0\nreturned: notes\/hi\.txt$/);
    expect(readFileSync(join(s.workspace, "notes/hi.txt"), "utf8")).toBe("hello from the program\n");
    expect(response.innerCalls.map((c) => [c.name, c.isError])).toEqual([["write", false], ["bash", false], ["glob", false]]);
  });

  it("code mode in the sandbox - the program runs as the sandbox user in the session's container and holds nothing of the tools service", async () => {
    // The review's escape reached the tools service's realm and ran execSync there as root, reading
    // its environment. Now whatever the program reaches is the container's: run the same steps.
    process.env.TACK_TEST_SERVICE_SECRET = "tools-service-only";
    try {
      const code = `
        const outer = (function () {}).constructor("return process")();
        const shell = require("child_process").execSync("id -u; hostname; cat /proc/1/cmdline | tr '\\\\0' ' '", { encoding: "utf8" });
        return {
          sameProcess: outer === process,
          uid: process.getuid(),
          secret: process.env.TACK_TEST_SERVICE_SECRET ?? "absent",
          env: Object.keys(process.env).filter((k) => !["PATH", "HOME", "LANG", "PWD", "SHLVL", "_"].includes(k)),
          shell: shell.trim().split("\\n"),
          cwd: process.cwd(),
        };`;
      const response = await s.call("run_code", { code });
      expect(response.isError, response.content).toBe(false);
      const seen = JSON.parse(response.content.replace(/^returned: /, "")) as { sameProcess: boolean; uid: number; secret: string; env: string[]; shell: string[]; cwd: string };
      expect(seen.sameProcess).toBe(true);
      expect(seen.uid).toBe(1000);
      expect(seen.secret).toBe("absent");
      expect(seen.env).toEqual([]);
      expect(seen.cwd).toBe("/workspace");
      expect(seen.shell[0]).toBe("1000");
      // The container's hostname, not this host's; its PID 1 is the sandbox's exec agent.
      expect(seen.shell[1]).not.toBe(hostname());
      expect(seen.shell[2]).toMatch(/agent\.py/);
    } finally {
      delete process.env.TACK_TEST_SERVICE_SECRET;
    }
  });

  it("code mode in the sandbox - a program that forges its channel gets refusals, never a tool outside its list", async () => {
    // The program owns its runner's process: it can write protocol lines itself. A call of a tool
    // that is not callable from run_code (a session tool, run_code itself) is refused by the service.
    const forgedCall = await s.call("run_code", { code: `
      const tag = (0, eval)("tag");
      const fs = require("fs");
      fs.writeSync(1, tag + JSON.stringify({ type: "call", id: 900, name: "todo_write", args: "{}" }) + "\\n");
      fs.writeSync(1, "plain text on fd 1\\n");
      let refused = "";
      try { await (tools as any).run_code({ code: "1" }); } catch (e) { refused = (e as Error).message; }
      await new Promise((r) => setTimeout(r, 500));
      return refused;` });
    expect(forgedCall.isError, forgedCall.content).toBe(false);
    expect(forgedCall.content).toBe("plain text on fd 1\nreturned: tools.run_code is not a function");
    expect(forgedCall.innerCalls.map((c) => c.name)).toEqual([]);
    const malformed = await s.call("run_code", { code: `require("fs").writeSync(1, (0, eval)("tag") + "{not json\\n"); await new Promise((r) => setTimeout(r, 5000));` });
    expect(malformed).toMatchObject({ isError: true, content: expect.stringContaining("sent a malformed message to the tools service") });
  });
});

// gVisor is the runtime a team deployment is told to use: the program's node and its stream work there too.
describe("code mode in a gVisor sandbox", () => {
  let s: ToolsOverBus;
  beforeAll(async () => {
    s = await ToolsOverBus.start({ mode: "code", sessionId: "g1", runtime: "runsc" });
  });
  afterAll(() => s?.stop());

  it("code mode in a gVisor sandbox - a program's calls come back over the stream and its own process runs under runsc", async () => {
    const code = `
      await tools.write({ path: "g.txt", content: "under gvisor\\n" });
      const kernel = require("child_process").execSync("dmesg 2>/dev/null | head -1 || true", { encoding: "utf8" });
      return [await tools.read({ path: "g.txt" }), /gVisor/.test(kernel)];`;
    const response = await s.call("run_code", { code });
    expect(response.isError, response.content).toBe(false);
    expect(JSON.parse(response.content.replace(/^returned: /, ""))).toEqual(["     1\tunder gvisor", true]);
    expect(response.innerCalls.map((c) => c.name)).toEqual(["write", "read"]);
  });
});
