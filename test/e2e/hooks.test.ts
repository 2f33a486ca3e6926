// End to end: hooks in Claude Code's format through every service process (the launcher `tack up`
// uses), the machine's NATS JetStream and real Docker sandboxes, driven over the HTTP API with a
// scripted model. The workspace's `.claude/settings.json` is read and its hooks run inside the
// session's sandbox; a user-level `~/.tack/hooks.json` is read by the loop from TACK_HOOKS_HOME.
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiStack, type EventJson } from "./support/api-stack.js";

let stack: ApiStack;
let home: string;
const savedHome = process.env.TACK_HOOKS_HOME;

const turnEnds = (n: number) => (e: EventJson[]) => e.filter((x) => x.type === "turn/end").length >= n;
const payloads = (e: EventJson[], type: string, key: string) => e.filter((x) => x.type === type).map((x) => x[key]!);
const python = (code: string) => `python3 -c '${code}'`;

beforeAll(async () => {
  home = mkdtempSync(join(tmpdir(), "tack-e2e-hooks-home-"));
  mkdirSync(join(home, ".tack"));
  writeFileSync(join(home, ".tack/hooks.json"), JSON.stringify({ hooks: { SessionStart: [{ hooks: [{ type: "command", command: "echo user-level start hook ran" }] }] } }));
  // The launcher passes its environment to every service: the loop reads user-level hooks from here.
  process.env.TACK_HOOKS_HOME = home;
  stack = await ApiStack.launch("hooks");
}, 120_000);

afterAll(async () => {
  if (savedHome === undefined) delete process.env.TACK_HOOKS_HOME;
  else process.env.TACK_HOOKS_HOME = savedHome;
  await stack?.stop();
  rmSync(home, { recursive: true, force: true });
});

describe("hooks end to end", () => {
  it("e2e hooks - a guard blocks rm -rf, a hanging hook is killed, PostToolUse feedback reaches the result, a Stop hook keeps the turn going once", async () => {
    const settings = {
      hooks: {
        PreToolUse: [
          { matcher: "Bash", hooks: [{ type: "command", command: '"$CLAUDE_PROJECT_DIR"/.claude/hooks/guard.sh', timeout: 10 }] },
          { matcher: "Read", hooks: [{ type: "command", command: "sleep 30", timeout: 1 }] },
          { matcher: "Task", hooks: [{ type: "command", command: "true" }] },
        ],
        PostToolUse: [{ matcher: "Write|Edit", hooks: [{ type: "command", command: python('import json,sys; i=json.load(sys.stdin); print(json.dumps({"decision": "block", "reason": "run the linter on " + i["tool_input"]["file_path"]}))') }] }],
        UserPromptSubmit: [{ hooks: [{ type: "command", command: "echo ticket TACK-1" }] }],
        Stop: [{ hooks: [{ type: "command", command: python('import json,sys; i=json.load(sys.stdin); print("" if i["stop_hook_active"] else json.dumps({"decision": "block", "reason": "write DONE.txt first"}))') }] }],
      },
    };
    const ws = stack.workspaceWith("guarded", {
      ".claude/settings.json": JSON.stringify(settings),
      ".claude/hooks/guard.sh": '#!/usr/bin/env bash\nif grep -q "rm -rf"; then echo "rm -rf is not allowed" >&2; exit 2; fi\n',
      "hi.txt": "hi\n",
    });
    const model = stack.script("hooks-guard", [
      { tool_calls: [{ name: "bash", arguments: { command: "rm -rf build" } }] },
      { tool_calls: [{ name: "read", arguments: { path: "hi.txt" } }] },
      { content: "All done." },
      { tool_calls: [{ name: "write", arguments: { path: "DONE.txt", content: "done\n" } }] },
      { content: "Finished." },
    ]);
    const id = await stack.session(ws, model);
    expect((await stack.json("POST", `/v1/sessions/${id}/messages`, { text: "clean up" })).status).toBe(202);
    const events = await stack.logWhen(id, "the turn to end", turnEnds(1), 120_000);

    expect(events.at(-1)!.turnEnd).toMatchObject({ reason: "completed" });
    expect(payloads(events, "hook/warning", "hookWarning")).toEqual([
      { source: ".claude/settings.json", message: expect.stringContaining('hooks.PreToolUse[2] matcher "Task" matches no tool of this session') },
    ]);
    expect(payloads(events, "hook/context", "hookContext")).toEqual([
      { hookEvent: "SessionStart", source: "user:~/.tack/hooks.json", text: "user-level start hook ran" },
      { hookEvent: "UserPromptSubmit", source: ".claude/settings.json", text: "ticket TACK-1" },
      { hookEvent: "Stop", source: ".claude/settings.json", text: "write DONE.txt first" },
    ]);
    const results = Object.fromEntries(payloads(events, "tool/result", "toolResult").map((r) => [r.callId as string, r]));
    // The blocked call never reached the tools service.
    expect(results.call_0_0).toMatchObject({ isError: true, content: "Blocked by hook .claude/settings.json: rm -rf is not allowed" });
    expect(payloads(events, "tool/call", "toolCall").map((c) => c.callId)).toEqual(["call_1_0", "call_3_0"]);
    expect(results.call_1_0!.isError).toBeFalsy();
    expect(results.call_3_0!.content).toMatch(/\n\nHook \.claude\/settings\.json \(PostToolUse\): run the linter on DONE\.txt$/);
    expect(existsSync(join(ws, "DONE.txt"))).toBe(true);

    const invoked = payloads(events, "hook/invoked", "hookInvoked");
    const outcome = Object.fromEntries(payloads(events, "hook/result", "hookResult").map((r) => [r.invocationId as string, r]));
    expect(invoked.map((i) => `${i.hookEvent} ${i.callId ?? ""}`)).toEqual([
      "SessionStart ", "UserPromptSubmit ", "PreToolUse call_0_0", "PreToolUse call_1_0", "Stop ", "PostToolUse call_3_0", "Stop ",
    ]);
    const hung = invoked.find((i) => i.callId === "call_1_0")!;
    expect(hung).toMatchObject({ command: "sleep 30", timeoutMs: 1000, matcher: "Read" });
    expect(outcome[hung.invocationId as string]).toMatchObject({ timedOut: true, reason: expect.stringContaining("killed after its timeout of 1 s") });
    expect(outcome[invoked[2]!.invocationId as string]).toMatchObject({ exitCode: 2, decision: "block", reason: "rm -rf is not allowed" });
    expect(outcome[invoked[4]!.invocationId as string]).toMatchObject({ decision: "continue", reason: "write DONE.txt first" });
    // The second time stop_hook_active is true: exit 0, no decision (JSON leaves out zero values).
    expect(outcome[invoked[6]!.invocationId as string]).toMatchObject({ stdout: "\n" });
    expect(outcome[invoked[6]!.invocationId as string]!.exitCode ?? 0).toBe(0);
    expect(outcome[invoked[6]!.invocationId as string]!.decision).toBeFalsy();
  }, 180_000);

  it("e2e hooks - a UserPromptSubmit block ends the turn before any model call and takes the prompt out of the model's view; the next prompt runs", async () => {
    const ws = stack.workspaceWith("prompt-guard", {
      ".claude/settings.local.json": JSON.stringify({ hooks: { UserPromptSubmit: [{ hooks: [{ type: "command", command: python('import json,sys; p=json.load(sys.stdin)["prompt"]; print(json.dumps({"decision": "block", "reason": "the prompt holds an API key"}) if "sk-" in p else "")') }] }] } }),
    });
    const id = await stack.session(ws, stack.script("hooks-prompt", [{ content: "Hello." }]));
    expect((await stack.json("POST", `/v1/sessions/${id}/messages`, { text: "my key is sk-123" })).status).toBe(202);
    const blocked = await stack.logWhen(id, "the blocked turn to end", turnEnds(1), 60_000);
    expect(blocked.at(-1)!.turnEnd).toMatchObject({ reason: "hook_blocked" });
    expect(blocked.some((e) => e.type === "assistant/message" || e.type === "step/start")).toBe(false);
    const user = blocked.find((e) => e.type === "user/message")!;
    const context = blocked.find((e) => e.type === "hook/context" && e.hookContext!.hookEvent === "UserPromptSubmit")! as EventJson & { surface?: Record<string, unknown> };
    expect(context.hookContext).toMatchObject({ hookEvent: "UserPromptSubmit", source: ".claude/settings.local.json", text: expect.stringContaining("was blocked by hook") });
    expect(context.surface).toMatchObject({ kind: "KIND_REPLACE" });
    expect(Number(context.surface!.replaceFromSeq)).toBe(user.seq);
    expect(payloads(blocked, "hook/result", "hookResult").map((r) => r.decision)).toEqual([undefined, "block"]);
    expect(payloads(blocked, "hook/result", "hookResult")[1]).toMatchObject({ reason: "the prompt holds an API key" });

    expect((await stack.json("POST", `/v1/sessions/${id}/messages`, { text: "hello" })).status).toBe(202);
    const done = await stack.logWhen(id, "the second turn to end", turnEnds(2), 60_000);
    expect(done.at(-1)!.turnEnd).toMatchObject({ reason: "completed" });
    expect(payloads(done, "assistant/message", "assistantMessage").map((m) => m.content)).toEqual(["Hello."]);
    // SessionStart ran once, at the first turn, even though that turn was blocked.
    expect(payloads(done, "hook/invoked", "hookInvoked").map((i) => i.hookEvent)).toEqual(["SessionStart", "UserPromptSubmit", "UserPromptSubmit"]);
  }, 120_000);
});
