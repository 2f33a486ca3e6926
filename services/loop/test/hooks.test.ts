import { chmodSync, chownSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { draft, materialize, now, SessionState, type Draft } from "@tack/log";
import { CallToolResponse, Surface_Kind, type Event } from "@tack/proto";
import { logger } from "@tack/telemetry";
import { listTools } from "@tack/tools-service";
import { Hooks, type HooksHost } from "../src/hooks.js";
import { ToolsOverBus } from "../../tools/test/support/over-bus.js";

// The hooks module against the real tools and sandbox services (NATS JetStream, Docker): the
// workspace's settings are read and its hook scripts run inside the session's container.
const TOOLS = listTools("standard").filter((t) => ["read", "write", "edit", "bash"].includes(t.name));
let s: ToolsOverBus;
let events: Event[];
let state: SessionState;
let host: HooksHost;

beforeAll(async () => {
  s = await ToolsOverBus.start({ mode: "standard", sessionId: "hk1" });
  events = [];
  state = new SessionState();
  host = {
    bus: s.bus, sessionId: "hk1", tenant: "t1", workspace: s.workspace, events, state, log: logger("hooks-test"), tools: async () => TOOLS,
    append: async (...drafts: Draft[]) => drafts.map((d) => {
      const e = materialize(d, events.length + 1, now());
      events.push(e);
      state.apply(e);
      return e;
    }),
  };
  const write = (path: string, content: string, mode = 0o644) => {
    const full = join(s.workspace, path);
    mkdirSync(join(full, ".."), { recursive: true });
    writeFileSync(full, content);
    chmodSync(full, mode);
    if (process.getuid?.() === 0) {
      chownSync(join(full, ".."), 1000, 1000);
      chownSync(full, 1000, 1000);
    }
  };
  // Written the way a Claude Code project has them: a script under .claude/hooks named through $CLAUDE_PROJECT_DIR.
  write(".claude/hooks/guard.sh", [
    "#!/usr/bin/env bash",
    "input=$(cat)",
    'if printf "%s" "$input" | grep -q "rm -rf"; then echo "rm -rf is not allowed in $(pwd)" >&2; exit 2; fi',
    'printf "%s" "$input" > "$CLAUDE_PROJECT_DIR/last-hook-input.json"',
    "",
  ].join("\n"), 0o755);
  write(".claude/settings.json", JSON.stringify({
    permissions: { allow: ["Bash(npm test)"] },
    hooks: {
      PreToolUse: [
        { matcher: "Bash", hooks: [{ type: "command", command: '"$CLAUDE_PROJECT_DIR"/.claude/hooks/guard.sh', timeout: 10 }] },
        { matcher: "Read", hooks: [{ type: "command", command: "sleep 30", timeout: 1 }] },
        { matcher: "Task", hooks: [{ type: "command", command: "true" }] },
      ],
      UserPromptSubmit: [{ hooks: [{ type: "command", command: "echo \"uid $(id -u) in $PWD\"" }] }],
    },
  }));
  write(".tack/hooks.json", JSON.stringify({ hooks: { PostToolUse: [{ matcher: "Write|Edit", hooks: [{ type: "command", command: "python3 -c 'import json,sys; i=json.load(sys.stdin); print(json.dumps({\"decision\": \"block\", \"reason\": \"check \" + i[\"tool_input\"][\"file_path\"]}))'" }] }] } }));
}, 120_000);

afterAll(() => s?.stop());

const of = <C extends NonNullable<Event["payload"]>["$case"]>(type: C) =>
  events.flatMap((e) => (e.payload?.$case === type ? [e.payload.value as Extract<NonNullable<Event["payload"]>, { $case: C }>["value"]] : []));

describe("hooks in the session's sandbox", () => {
  it("hooks - workspace hooks load from the sandbox with one warning per bad matcher, block, time out and add context for real", async () => {
    const hooks = new Hooks({ home: "" });
    const [user] = await host.append(draft("userMessage", { text: "hello" }, "gateway", { kind: Surface_Kind.KIND_APPEND, replaceFromSeq: 0, replaceToSeq: 0, sourceSeqs: [], origin: "user" }));
    expect(await hooks.userPromptSubmit(host, 1, user!.seq)).toEqual({ blocked: false });
    expect(of("hookWarning")).toEqual([{ source: ".claude/settings.json", message: expect.stringContaining('hooks.PreToolUse[2] matcher "Task" matches no tool of this session') }]);
    expect(of("hookContext")).toEqual([{ hookEvent: "UserPromptSubmit", source: ".claude/settings.json", text: "uid 1000 in /workspace" }]);

    const blocked = await hooks.preToolUse(host, { id: "c1", name: "bash", arguments: JSON.stringify({ command: "rm -rf build" }) }, { kind: "run", mode: "workspace-write" }, 1, 1);
    expect(blocked).toEqual({ kind: "refuse", content: "Blocked by hook .claude/settings.json: rm -rf is not allowed in /workspace" });

    const allowed = await hooks.preToolUse(host, { id: "c2", name: "bash", arguments: JSON.stringify({ command: "ls" }) }, { kind: "run", mode: "workspace-write" }, 1, 1);
    expect(allowed).toEqual({ kind: "run", mode: "workspace-write" });
    expect(JSON.parse(readFileSync(join(s.workspace, "last-hook-input.json"), "utf8"))).toEqual({
      session_id: "hk1", transcript_path: "", cwd: "/workspace", permission_mode: "default", hook_event_name: "PreToolUse",
      tool_name: "Bash", tool_input: { command: "ls" }, tool_use_id: "c2",
    });

    const started = performance.now();
    const slow = await hooks.preToolUse(host, { id: "c3", name: "read", arguments: JSON.stringify({ path: "a" }) }, { kind: "run", mode: "workspace-write" }, 1, 1);
    expect(slow).toEqual({ kind: "run", mode: "workspace-write" });
    expect(performance.now() - started).toBeLessThan(10_000);
    expect(of("hookResult").at(-1)).toMatchObject({ timedOut: true, decision: "", reason: expect.stringContaining("killed after its timeout of 1 s") });

    const written = await hooks.postToolUse(host, { id: "c4", name: "write", arguments: JSON.stringify({ path: "src/a.ts", content: "x" }) }, CallToolResponse.fromPartial({ content: "Wrote src/a.ts" }), 1);
    expect(written.content).toBe("Wrote src/a.ts\n\nHook .tack/hooks.json (PostToolUse): check src/a.ts");
    expect(of("hookInvoked").map((i) => `${i.invocationId} ${i.source} ${i.callId}`)).toEqual([
      "UserPromptSubmit-1 .claude/settings.json ", "PreToolUse-2 .claude/settings.json c1", "PreToolUse-3 .claude/settings.json c2",
      "PreToolUse-4 .claude/settings.json c3", "PostToolUse-5 .tack/hooks.json c4",
    ]);
    expect(of("hookResult")).toHaveLength(5);
  }, 120_000);
});
