import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import type { Bus } from "@tack/bus";
import { deriveRequest, draft, hookContextText, materialize, now, SessionState, type Draft } from "@tack/log";
import { CallToolResponse, RunHookResponse, Surface_Kind, type Event, type HooksFileRead, type RunHookRequest, type ToolCall } from "@tack/proto";
import { logger } from "@tack/telemetry";
import { listTools } from "@tack/tools-service";
import { HOOK_TEXT, Hooks, interpret, matcherTest, parseHooks, type HookRequests, type HooksHost } from "../src/hooks.js";
import type { CallPlan } from "../src/approvals.js";

// The session's tools as the tools service lists them: their Claude Code names (hook_aliases) come from there.
const NAMES = ["read", "write", "edit", "glob", "grep", "bash", "todo_write", "web_fetch", "web_search"];
const TOOLS = listTools("standard").filter((t) => NAMES.includes(t.name));
const file = (source: string, hooks: unknown) => ({ source, text: JSON.stringify({ hooks }), error: "" });
const cmd = (command: string, timeout?: number) => ({ type: "command", command, ...(timeout === undefined ? {} : { timeout }) });
const reply = (fields: Partial<RunHookResponse>) => RunHookResponse.fromPartial({ exitCode: 0, durationMs: 1, ...fields });
const bashCall: ToolCall = { id: "call_0_0", name: "bash", arguments: JSON.stringify({ command: "rm -rf /" }) };
const readCall: ToolCall = { id: "call_0_1", name: "read", arguments: JSON.stringify({ path: "a.txt" }) };
const RUN: CallPlan = { kind: "run", mode: "workspace-write" };

/**
 * A session without NATS: the log is an array, the workspace's hooks files are given, and each
 * hook command is answered by `respond` (every request is kept for assertions).
 */
class FakeSession {
  readonly events: Event[] = [];
  readonly runs: Pick<RunHookRequest, "command" | "input" | "timeoutMs" | "invocationId">[] = [];
  configReads = 0;
  workspaceFiles: HooksFileRead[] = [];
  respond: (command: string, input: Record<string, unknown>) => RunHookResponse | Promise<RunHookResponse> = () => reply({});
  readonly requests: HookRequests = {
    readConfig: async () => {
      this.configReads++;
      return this.workspaceFiles;
    },
    run: async (_host, request) => {
      this.runs.push(request);
      return this.respond(request.command, JSON.parse(request.input) as Record<string, unknown>);
    },
  };
  readonly host: HooksHost = {
    bus: undefined as unknown as Bus, sessionId: "s1", tenant: "t1", workspace: "/w", events: this.events, state: new SessionState(), log: logger("hooks-test"),
    append: async (...drafts: Draft[]) => drafts.map((d) => {
      const e = materialize(d, this.events.length + 1, now());
      this.events.push(e);
      this.host.state.apply(e);
      return e;
    }),
    tools: async () => TOOLS,
  };

  constructor(settings?: unknown) {
    if (settings !== undefined) this.workspaceFiles = [{ path: ".claude/settings.json", content: Buffer.from(JSON.stringify(settings)), error: "" }];
  }

  of<C extends NonNullable<Event["payload"]>["$case"]>(type: C): Extract<NonNullable<Event["payload"]>, { $case: C }>["value"][] {
    return this.events.flatMap((e) => (e.payload?.$case === type ? [e.payload.value as never] : []));
  }

  async user(text: string): Promise<number> {
    const [e] = await this.host.append(draft("userMessage", { text }, "gateway", { kind: Surface_Kind.KIND_APPEND, replaceFromSeq: 0, replaceToSeq: 0, sourceSeqs: [], origin: "user" }));
    return e!.seq;
  }
}

const homes: string[] = [];
afterEach(() => {
  for (const h of homes.splice(0)) rmSync(h, { recursive: true, force: true });
});
const noHome = { home: "" };

describe("hooks: config", () => {
  it("parseHooks - Claude Code's format is taken unchanged: matchers, commands, timeouts in seconds (default 60)", () => {
    const loaded = parseHooks([file(".claude/settings.json", {
      PreToolUse: [{ matcher: "Bash|Edit", hooks: [cmd("check.sh", 30)] }],
      Stop: [{ hooks: [cmd("stop.sh")] }],
    })], TOOLS);
    expect(loaded).toEqual({
      warnings: [],
      hooks: [
        { event: "PreToolUse", matcher: "Bash|Edit", command: "check.sh", timeoutMs: 30_000, source: ".claude/settings.json" },
        { event: "Stop", matcher: "", command: "stop.sh", timeoutMs: 60_000, source: ".claude/settings.json" },
      ],
    });
  });

  it("parseHooks - bad input: each problem is one warning naming the file, and the rest is used", () => {
    const loaded = parseHooks([
      { source: ".tack/hooks.json", text: "{ not json", error: "" },
      { source: "user:~/.claude/settings.json", text: "", error: "could not be read on the loop's host (EACCES)" },
      file(".claude/settings.json", {
        PreToolUse: [
          { matcher: "Bash", hooks: [cmd("ok.sh")] },
          { matcher: "bash(", hooks: [cmd("bad-regex.sh")] },
          { matcher: "Task", hooks: [cmd("task.sh")] },
          { matcher: "Notebook.*", hooks: [cmd("nb.sh")] },
          { matcher: "mcp__github__create_issue", hooks: [cmd("mcp.sh")] },
          { matcher: "Write", hooks: [{ type: "prompt", prompt: "judge it" }, cmd("write.sh", 900), { type: "command" }] },
          { hooks: "not a list" },
        ],
        PreToolCall: [{ hooks: [cmd("typo.sh")] }],
        SessionStart: [{ matcher: "resume", hooks: [cmd("resume.sh")] }],
        SubagentStop: [{ hooks: [cmd("sub.sh")] }],
      }),
    ], TOOLS);
    expect(loaded.hooks.map((h) => [h.event, h.command, h.timeoutMs])).toEqual([
      ["PreToolUse", "ok.sh", 60_000], ["PreToolUse", "mcp.sh", 60_000], ["PreToolUse", "write.sh", 600_000], ["SubagentStop", "sub.sh", 60_000],
    ]);
    const messages = loaded.warnings.map((w) => `${w.source} | ${w.message}`);
    expect(messages).toHaveLength(11);
    expect(messages[0]).toMatch(/^\.tack\/hooks\.json \| hooks file \.tack\/hooks\.json: is not valid JSON \(.*\); none of its hooks are used until it parses$/);
    expect(messages.slice(1)).toEqual([
      "user:~/.claude/settings.json | hooks file user:~/.claude/settings.json: could not be read on the loop's host (EACCES); its hooks are not used (fix or remove it)",
      expect.stringMatching(/^\.claude\/settings\.json \| hooks file \.claude\/settings\.json: hooks\.PreToolUse\[1\] matcher "bash\(" is not a valid regular expression \(.*\); fix it or use names joined by \|, e\.g\. "Bash\|Edit"; its hooks are not used$/),
      expect.stringContaining('hooks.PreToolUse[2] matcher "Task" matches no tool of this session (Task has no counterpart in Tack); Claude Code names are mapped (Read→read, Write→write, Edit→edit, MultiEdit→edit, Glob→glob, Grep→grep, Bash→bash,'),
      expect.stringContaining('hooks.PreToolUse[3] matcher "Notebook.*" matches no tool of this session (NotebookEdit has no counterpart in Tack)'),
      '.claude/settings.json | hooks file .claude/settings.json: hooks.PreToolUse[5].hooks[0] has type "prompt"; Tack runs only "command" hooks, so it is not used',
      ".claude/settings.json | hooks file .claude/settings.json: hooks.PreToolUse[5].hooks[1] timeout 900 s is more than the 600 s a hook may run; it runs with 600 s",
      expect.stringContaining("hooks.PreToolUse[5].hooks[2] must be {\"type\": \"command\", \"command\": \"...\", \"timeout\": seconds}: command:"),
      expect.stringContaining('hooks.PreToolUse[6] must be {"matcher": "...", "hooks": [{"type": "command", "command": "..."}]}: hooks:'),
      '.claude/settings.json | hooks file .claude/settings.json: unknown hook event "PreToolCall"; use one of SessionStart, UserPromptSubmit, PreToolUse, PostToolUse, Stop, SubagentStart, SubagentStop (its hooks are not used)',
      expect.stringContaining('hooks.SessionStart[0] matcher "resume" does not match "startup", the only way a Tack session starts'),
    ]);
  });

  it("parseHooks - a settings file without hooks is no hooks and no warning; hooks that are not an object are one warning", () => {
    expect(parseHooks([{ source: ".claude/settings.json", text: '{"permissions": {"allow": []}}', error: "" }], TOOLS)).toEqual({ hooks: [], warnings: [] });
    expect(parseHooks([{ source: ".claude/settings.json", text: '{"hooks": []}', error: "" }], TOOLS).warnings).toEqual([
      { source: ".claude/settings.json", message: expect.stringContaining('"hooks" must be an object of event names') },
    ]);
    expect(parseHooks([{ source: ".tack/hooks.json", text: "[1]", error: "" }], TOOLS).warnings[0]!.message).toContain('must hold a JSON object with a "hooks" key');
  });

  it("matcherTest - empty and * match all; names joined by | match exactly and case-sensitively; anything else is an unanchored regex", () => {
    expect(matcherTest("")("anything")).toBe(true);
    expect(matcherTest("*")("anything")).toBe(true);
    const names = matcherTest("Bash|Edit");
    expect(["Bash", "Edit", "bash", "MultiEdit"].map(names)).toEqual([true, true, false, false]);
    const regex = matcherTest("Web.*");
    expect(["WebFetch", "WebSearch", "Bash"].map(regex)).toEqual([true, true, false]);
  });
});

describe("hooks: decisions", () => {
  it("interpret - exit 2 blocks with stderr; other exit codes and timeouts decide nothing; JSON is read only on exit 0", () => {
    expect(interpret("PreToolUse", reply({ exitCode: 2, stderr: "no rm\n" }))).toEqual({ decision: "block", reason: "no rm", context: "" });
    expect(interpret("Stop", reply({ exitCode: 2, stderr: "tests fail" }))).toEqual({ decision: "continue", reason: "tests fail", context: "" });
    expect(interpret("PreToolUse", reply({ exitCode: 1, stderr: "crash", stdout: '{"decision":"block"}' }))).toEqual({ decision: "", reason: "", context: "" });
    expect(interpret("PreToolUse", reply({ timedOut: true, exitCode: 2 }))).toEqual({ decision: "", reason: "", context: "" });
  });

  it("interpret - PreToolUse permissionDecision deny/ask/allow, the older decision block/approve, continue false", () => {
    const out = (o: unknown) => reply({ stdout: JSON.stringify(o) });
    expect(interpret("PreToolUse", out({ hookSpecificOutput: { hookEventName: "PreToolUse", permissionDecision: "deny", permissionDecisionReason: "not here" } })))
      .toEqual({ decision: "block", reason: "not here", context: "" });
    expect(interpret("PreToolUse", out({ hookSpecificOutput: { permissionDecision: "ask", permissionDecisionReason: "sure?" } })).decision).toBe("ask");
    expect(interpret("PreToolUse", out({ hookSpecificOutput: { permissionDecision: "allow" } })).decision).toBe("allow");
    expect(interpret("PreToolUse", out({ decision: "block", reason: "old style" }))).toEqual({ decision: "block", reason: "old style", context: "" });
    expect(interpret("PreToolUse", out({ decision: "approve" })).decision).toBe("allow");
    expect(interpret("PostToolUse", out({ continue: false, stopReason: "enough" }))).toEqual({ decision: "stop", reason: "enough", context: "" });
    expect(interpret("PreToolUse", out({ decision: "block" })).reason).toBe(HOOK_TEXT.noReason);
  });

  it("interpret - SessionStart and UserPromptSubmit stdout is context (plain or additionalContext); other events' plain stdout is not", () => {
    expect(interpret("SessionStart", reply({ stdout: "branch main\n" })).context).toBe("branch main");
    expect(interpret("UserPromptSubmit", reply({ stdout: JSON.stringify({ hookSpecificOutput: { additionalContext: "ticket 42" } }) })).context).toBe("ticket 42");
    expect(interpret("UserPromptSubmit", reply({ stdout: JSON.stringify({ decision: "block", reason: "secret" }) })).decision).toBe("block");
    expect(interpret("PostToolUse", reply({ stdout: "lint ok" })).context).toBe("");
  });
});

describe("hooks: the session's points", () => {
  it("Hooks - with none configured nothing runs and nothing is logged; the files are read once per session (a snapshot)", async () => {
    const s = new FakeSession();
    const hooks = new Hooks({ ...noHome, requests: s.requests });
    const seq = await s.user("hi");
    expect(await hooks.userPromptSubmit(s.host, 1, seq)).toEqual({ blocked: false });
    expect(await hooks.preToolUse(s.host, bashCall, RUN, 1, 1)).toBe(RUN);
    const result = CallToolResponse.fromPartial({ content: "ok" });
    expect(await hooks.postToolUse(s.host, bashCall, result, 1)).toBe(result);
    expect(await hooks.stop(s.host, 1)).toBe(false);
    expect(s.configReads).toBe(1);
    expect(s.events).toHaveLength(1);
    await hooks.stop(s.host, 2);
    expect(s.configReads).toBe(1);
  });

  it("Hooks - the snapshot taken at creation is what the turns use: a change to the files is not seen; a new Hooks (the session loaded again) reads them anew", async () => {
    const s = new FakeSession({ hooks: { UserPromptSubmit: [{ hooks: [cmd("one.sh")] }] } });
    const hooks = new Hooks({ ...noHome, requests: s.requests });
    hooks.snapshot(s.host);
    hooks.snapshot(s.host);
    expect(s.configReads).toBe(1);
    // Nothing is logged by the read itself, even for a file with problems.
    expect(s.events).toHaveLength(0);
    s.workspaceFiles = [{ path: ".claude/settings.json", content: Buffer.from(JSON.stringify({ hooks: { UserPromptSubmit: [{ hooks: [cmd("two.sh")] }] } })), error: "" }];
    await hooks.userPromptSubmit(s.host, 1, await s.user("a"));
    await hooks.userPromptSubmit(s.host, 2, await s.user("b"));
    expect(s.configReads).toBe(1);
    expect(s.runs.map((r) => r.command)).toEqual(["one.sh", "one.sh"]);
    const loadedAgain = new Hooks({ ...noHome, requests: s.requests });
    await loadedAgain.userPromptSubmit(s.host, 3, await s.user("c"));
    expect(s.configReads).toBe(2);
    expect(s.runs.map((r) => r.command)).toEqual(["one.sh", "one.sh", "two.sh"]);
  });

  it("Hooks - a turn waits only for a snapshot read still running; a read that failed before the turn is done again at the turn", async () => {
    const s = new FakeSession({ hooks: { UserPromptSubmit: [{ hooks: [cmd("ticket.sh")] }] } });
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let reads = 0;
    const hooks = new Hooks({ ...noHome, requests: { ...s.requests, readConfig: async () => {
      reads++;
      await gate;
      return s.workspaceFiles;
    } } });
    hooks.snapshot(s.host);
    const turn = hooks.userPromptSubmit(s.host, 1, await s.user("a"));
    await new Promise((r) => setTimeout(r, 20));
    expect(s.runs).toHaveLength(0);
    release();
    await turn;
    expect(reads).toBe(1);
    expect(s.runs.map((r) => r.command)).toEqual(["ticket.sh"]);

    let fail = true;
    const retried = new Hooks({ ...noHome, requests: { ...s.requests, readConfig: async () => {
      reads++;
      if (fail) throw Object.assign(new Error("no tools worker answered"), { code: "bus.no_responders" });
      return s.workspaceFiles;
    } } });
    retried.snapshot(s.host);
    await new Promise((r) => setTimeout(r, 10));
    fail = false;
    await retried.userPromptSubmit(s.host, 1, await s.user("b"));
    expect(reads).toBe(3);
    expect(s.runs.map((r) => r.command)).toEqual(["ticket.sh", "ticket.sh"]);
  });

  it("Hooks - a failed read of the files runs that point without hooks and is tried again at the next point of the turn", async () => {
    const s = new FakeSession({ hooks: { PreToolUse: [{ hooks: [cmd("guard.sh")] }] } });
    s.respond = () => reply({ exitCode: 2, stderr: "no" });
    let reads = 0;
    const hooks = new Hooks({ ...noHome, requests: { ...s.requests, readConfig: async () => {
      if (reads++ === 0) throw Object.assign(new Error("no tools worker answered"), { code: "bus.no_responders" });
      return s.workspaceFiles;
    } } });
    expect(await hooks.preToolUse(s.host, bashCall, RUN, 1, 1)).toBe(RUN);
    expect(await hooks.preToolUse(s.host, bashCall, RUN, 1, 1)).toMatchObject({ kind: "refuse" });
    await hooks.preToolUse(s.host, bashCall, RUN, 1, 1);
    expect(reads).toBe(2);
  });

  it("Hooks - PreToolUse: exit 2 blocks the call with the hook's reason, logged as invoked + result with Claude Code's input on stdin", async () => {
    const s = new FakeSession({ hooks: { PreToolUse: [{ matcher: "Bash", hooks: [cmd("guard.sh", 5)] }] } });
    s.respond = (_c, input) => (String((input.tool_input as { command: string }).command).includes("rm -rf") ? reply({ exitCode: 2, stderr: "rm -rf is not allowed\n" }) : reply({}));
    const hooks = new Hooks({ ...noHome, requests: s.requests });
    const plan = await hooks.preToolUse(s.host, bashCall, RUN, 1, 1);
    expect(plan).toEqual({ kind: "refuse", content: "Blocked by hook .claude/settings.json: rm -rf is not allowed" });
    expect(JSON.parse(s.runs[0]!.input)).toEqual({
      session_id: "s1", transcript_path: "", cwd: "/workspace", permission_mode: "default", hook_event_name: "PreToolUse",
      tool_name: "Bash", tool_input: { command: "rm -rf /" }, tool_use_id: "call_0_0",
    });
    expect(s.runs[0]).toMatchObject({ command: "guard.sh", timeoutMs: 5000, invocationId: "PreToolUse-1" });
    expect(s.of("hookInvoked")).toEqual([{ invocationId: "PreToolUse-1", hookEvent: "PreToolUse", matcher: "Bash", command: "guard.sh", source: ".claude/settings.json", callId: "call_0_0", timeoutMs: 5000 }]);
    expect(s.of("hookResult")).toEqual([expect.objectContaining({ invocationId: "PreToolUse-1", exitCode: 2, stderr: "rm -rf is not allowed\n", decision: "block", reason: "rm -rf is not allowed", timedOut: false })]);
    // A read does not match "Bash": no hook runs for it.
    expect(await hooks.preToolUse(s.host, readCall, RUN, 1, 1)).toBe(RUN);
    expect(s.runs).toHaveLength(1);
    // A call Tack already refuses gets no hooks.
    const refused: CallPlan = { kind: "refuse", content: "plan mode" };
    expect(await hooks.preToolUse(s.host, bashCall, refused, 1, 1)).toBe(refused);
  });

  it("Hooks - PreToolUse: Tack names match too, Edit covers edit with file_path given; ask becomes a tool approval; allow widens nothing", async () => {
    const s = new FakeSession({ hooks: { PreToolUse: [{ matcher: "read|Edit|Write", hooks: [cmd("ask.sh")] }] } });
    s.respond = () => reply({ stdout: JSON.stringify({ hookSpecificOutput: { hookEventName: "PreToolUse", permissionDecision: "ask", permissionDecisionReason: "outside src" } }) });
    const hooks = new Hooks({ ...noHome, requests: s.requests });
    const plan = await hooks.preToolUse(s.host, readCall, RUN, 2, 3);
    expect(plan).toEqual({
      kind: "ask",
      asked: {
        callId: "call_0_1", toolName: "read", operation: 'read {"path":"a.txt"}', currentMode: "workspace-write", requestedMode: "",
        justification: "Hook .claude/settings.json asks for a person's yes: outside src", turn: 2, step: 3, kind: "tool",
      },
    });
    expect(JSON.parse(s.runs[0]!.input)).toMatchObject({ tool_name: "Read", tool_input: { path: "a.txt", file_path: "a.txt" } });
    s.respond = () => reply({ stdout: JSON.stringify({ hookSpecificOutput: { permissionDecision: "allow" } }) });
    const escalated: CallPlan = { kind: "run", mode: "danger-full-access", note: "approved once" };
    expect(await hooks.preToolUse(s.host, { id: "c2", name: "edit", arguments: "{}" }, escalated, 2, 3)).toBe(escalated);
    expect(s.of("hookResult").map((r) => r.decision)).toEqual(["ask", "allow"]);
  });

  it("Hooks - a hook that hangs: the result says timed out and why, and it decides nothing; a hook that cannot be run is logged and skipped", async () => {
    const s = new FakeSession({ hooks: { PreToolUse: [{ hooks: [cmd("sleep 100", 1)] }], PostToolUse: [{ matcher: "*", hooks: [cmd("post.sh")] }] } });
    s.respond = (command) => {
      if (command === "post.sh") throw Object.assign(new Error("no responders"), { code: "bus.no_responders" });
      return reply({ exitCode: 137, timedOut: true, durationMs: 1000 });
    };
    const hooks = new Hooks({ ...noHome, requests: s.requests });
    expect(await hooks.preToolUse(s.host, bashCall, RUN, 1, 1)).toBe(RUN);
    expect(s.of("hookResult")[0]).toMatchObject({
      timedOut: true, decision: "", reason: 'killed after its timeout of 1 s; it decided nothing (raise "timeout" in .claude/settings.json if it needs longer)',
    });
    const result = CallToolResponse.fromPartial({ content: "ran" });
    expect(await hooks.postToolUse(s.host, bashCall, result, 1)).toEqual(result);
    expect(s.of("hookResult")[1]).toMatchObject({ exitCode: -1, stderr: expect.stringContaining("the hook could not be run:"), decision: "" });
  });

  it("Hooks - PostToolUse: a block's reason and additionalContext are added to the result; failed calls get no hooks", async () => {
    const s = new FakeSession({ hooks: { PostToolUse: [{ matcher: "Write|Edit", hooks: [cmd("lint.sh"), cmd("ctx.sh"), cmd("lint.sh")] }] } });
    s.respond = (command) => (command === "lint.sh"
      ? reply({ stdout: JSON.stringify({ decision: "block", reason: "lint: missing semicolon" }) })
      : reply({ stdout: JSON.stringify({ hookSpecificOutput: { hookEventName: "PostToolUse", additionalContext: "formatted with prettier" } }) }));
    const hooks = new Hooks({ ...noHome, requests: s.requests });
    const call: ToolCall = { id: "w1", name: "write", arguments: JSON.stringify({ path: "a.ts", content: "x" }) };
    const result = await hooks.postToolUse(s.host, call, CallToolResponse.fromPartial({ content: "Wrote a.ts" }), 1);
    expect(result.content).toBe("Wrote a.ts\n\nHook .claude/settings.json (PostToolUse): lint: missing semicolon\nHook .claude/settings.json (PostToolUse): formatted with prettier");
    // Identical commands run once.
    expect(s.runs.map((r) => r.command)).toEqual(["lint.sh", "ctx.sh"]);
    expect(JSON.parse(s.runs[0]!.input)).toMatchObject({ hook_event_name: "PostToolUse", tool_name: "Write", tool_response: { content: "Wrote a.ts", is_error: false } });
    const failed = CallToolResponse.fromPartial({ content: "no such file", isError: true });
    expect(await hooks.postToolUse(s.host, call, failed, 1)).toBe(failed);
    expect(s.runs).toHaveLength(2);
  });

  it("Hooks - SessionStart (first turn only) and UserPromptSubmit stdout become hook/context events the model reads", async () => {
    const s = new FakeSession({ hooks: { SessionStart: [{ matcher: "startup", hooks: [cmd("git-status.sh")] }], UserPromptSubmit: [{ hooks: [cmd("ticket.sh")] }] } });
    s.respond = (command, input) => reply({ stdout: command === "git-status.sh" ? `on branch main (${String(input.source)})\n` : `prompt was: ${String(input.prompt)}` });
    const hooks = new Hooks({ ...noHome, requests: s.requests });
    expect(await hooks.userPromptSubmit(s.host, 1, await s.user("fix the bug"))).toEqual({ blocked: false });
    expect(s.of("hookContext")).toEqual([
      { hookEvent: "SessionStart", source: ".claude/settings.json", text: "on branch main (startup)" },
      { hookEvent: "UserPromptSubmit", source: ".claude/settings.json", text: "prompt was: fix the bug" },
    ]);
    const context = s.events.filter((e) => e.payload?.$case === "hookContext");
    expect(context.every((e) => e.surface?.kind === Surface_Kind.KIND_APPEND && e.surface.origin === "hook")).toBe(true);
    await hooks.userPromptSubmit(s.host, 2, await s.user("again"));
    expect(s.runs.map((r) => r.command)).toEqual(["git-status.sh", "ticket.sh", "ticket.sh"]);
  });

  it("Hooks - a blocked prompt is replaced in the model's view by a hook/context saying it was removed", async () => {
    const s = new FakeSession({ hooks: { UserPromptSubmit: [{ hooks: [cmd("secrets.sh")] }] } });
    s.respond = () => reply({ stdout: JSON.stringify({ decision: "block", reason: "the prompt holds an API key" }) });
    const hooks = new Hooks({ ...noHome, requests: s.requests });
    const seq = await s.user("my key is sk-123");
    expect(await hooks.userPromptSubmit(s.host, 1, seq)).toEqual({ blocked: true });
    const context = s.events.at(-1)!;
    expect(context.payload).toEqual({ $case: "hookContext", value: { hookEvent: "UserPromptSubmit", source: ".claude/settings.json", text: HOOK_TEXT.promptBlocked(".claude/settings.json") } });
    expect(context.surface).toMatchObject({ kind: Surface_Kind.KIND_REPLACE, replaceFromSeq: seq, replaceToSeq: seq });
    expect(s.of("hookResult")[0]).toMatchObject({ decision: "block", reason: "the prompt holds an API key" });
    // What the model would read: the hook's line where the prompt was, never the prompt.
    await s.host.append(draft("requestHeader", { reason: "initial", model: "m" }, "loop"));
    const text = hookContextText({ hookEvent: "UserPromptSubmit", source: ".claude/settings.json", text: HOOK_TEXT.promptBlocked(".claude/settings.json") });
    expect(deriveRequest(s.events).messages.map((m) => m.content)).toEqual([text]);
  });

  it("Hooks - Stop: decision block keeps the turn going with the reason as hook/context; stop_hook_active says so the next time", async () => {
    const s = new FakeSession({ hooks: { Stop: [{ hooks: [cmd("tests.sh")] }] } });
    s.respond = (_c, input) => (input.stop_hook_active ? reply({}) : reply({ stdout: JSON.stringify({ decision: "block", reason: "run the tests first" }) }));
    const hooks = new Hooks({ ...noHome, requests: s.requests });
    expect(await hooks.stop(s.host, 1)).toBe(true);
    expect(s.of("hookContext")).toEqual([{ hookEvent: "Stop", source: ".claude/settings.json", text: "run the tests first" }]);
    expect(s.of("hookResult")[0]).toMatchObject({ decision: "continue", reason: "run the tests first" });
    expect(await hooks.stop(s.host, 1)).toBe(false);
    expect(s.runs.map((r) => JSON.parse(r.input).stop_hook_active)).toEqual([false, true]);
  });

  it("Hooks - continue false: the call is refused with the stop reason and the session is told to end the turn once", async () => {
    const s = new FakeSession({ hooks: { PreToolUse: [{ hooks: [cmd("halt.sh")] }] } });
    s.respond = () => reply({ stdout: JSON.stringify({ continue: false, stopReason: "build is broken" }) });
    const hooks = new Hooks({ ...noHome, requests: s.requests });
    expect(await hooks.preToolUse(s.host, bashCall, RUN, 1, 1)).toEqual({ kind: "refuse", content: HOOK_TEXT.stopped(".claude/settings.json", "build is broken") });
    expect(hooks.takeStop()).toEqual({ source: ".claude/settings.json", reason: "build is broken" });
    expect(hooks.takeStop()).toBeUndefined();
  });

  it("Hooks - user-level files come from the home folder on the loop's host and run before the workspace's; a warning is logged once", async () => {
    const home = mkdtempSync(join(tmpdir(), "tack-hooks-home-"));
    homes.push(home);
    mkdirSync(join(home, ".claude"));
    mkdirSync(join(home, ".tack"));
    writeFileSync(join(home, ".claude/settings.json"), JSON.stringify({ hooks: { Stop: [{ hooks: [cmd("user.sh")] }] } }));
    writeFileSync(join(home, ".tack/hooks.json"), JSON.stringify({ hooks: { Stopp: [] } }));
    const s = new FakeSession({ hooks: { Stop: [{ hooks: [cmd("project.sh")] }] } });
    const hooks = new Hooks({ home, requests: s.requests });
    await hooks.stop(s.host, 1);
    expect(s.of("hookInvoked").map((i) => [i.source, i.command])).toEqual([["user:~/.claude/settings.json", "user.sh"], [".claude/settings.json", "project.sh"]]);
    expect(s.of("hookWarning")).toEqual([{ source: "user:~/.tack/hooks.json", message: expect.stringContaining('unknown hook event "Stopp"') }]);
    await hooks.stop(s.host, 2);
    expect(s.of("hookWarning")).toHaveLength(1);
    expect(s.of("hookInvoked").map((i) => i.invocationId)).toEqual(["Stop-1", "Stop-2", "Stop-3", "Stop-4"]);
  });
});
