import { ToolsRpc } from "@tack/bus";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ReadHooksConfigRequest, RunHookRequest } from "@tack/proto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HOOKS_FILE_MAX_BYTES } from "../src/hooks.js";
import { ToolsOverBus } from "./support/over-bus.js";

// tools.hook_config and tools.hook_run against the real tools and sandbox services: files are read and hooks run inside the session's container.
describe("hooks in the sandbox", () => {
  let s: ToolsOverBus;
  beforeAll(async () => {
    s = await ToolsOverBus.start({ mode: "standard", sessionId: "h1" });
  });
  afterAll(() => s?.stop());

  const session = () => ({ sessionId: "h1", tenant: "t1", workspace: s.workspace, sandboxMode: "workspace-write" });
  const config = () => s.bus.request(ToolsRpc.ReadHooksConfig, ReadHooksConfigRequest.fromPartial(session()), { timeoutMs: 60_000 });
  const run = (command: string, fields: Partial<RunHookRequest> = {}) => s.bus.request(ToolsRpc.RunHook, RunHookRequest.fromPartial({
    ...session(), command, input: "{}", timeoutMs: 10_000, invocationId: "PreToolUse-1-0", ...fields,
  }), { timeoutMs: 60_000 });

  it("tools.hook_config - reads the workspace's hooks files that exist, whole, and says why one cannot be used", async () => {
    expect((await config()).files).toEqual([]);
    mkdirSync(join(s.workspace, ".claude"), { recursive: true });
    mkdirSync(join(s.workspace, ".tack/hooks.json"), { recursive: true });
    writeFileSync(join(s.workspace, ".claude/settings.json"), '{"hooks": {}}\n');
    writeFileSync(join(s.workspace, ".claude/settings.local.json"), "x".repeat(HOOKS_FILE_MAX_BYTES + 1));
    const { files } = await config();
    expect(files.map((f) => ({ ...f, content: Buffer.from(f.content).toString("utf8") }))).toEqual([
      { path: ".claude/settings.json", content: '{"hooks": {}}\n', error: "" },
      { path: ".claude/settings.local.json", content: "", error: `is ${HOOKS_FILE_MAX_BYTES + 1} bytes, more than the ${HOOKS_FILE_MAX_BYTES} a hooks file may have` },
      { path: ".tack/hooks.json", content: "", error: "is not a regular file" },
    ]);
  });

  it("tools.hook_run - runs bash -c in /workspace as the sandbox user with the input on stdin and CLAUDE_PROJECT_DIR set", async () => {
    const result = await run('read -r line; echo "in=$line pwd=$(pwd) dir=$CLAUDE_PROJECT_DIR uid=$(id -u)"; echo oops >&2; exit 2', { input: '{"a":1}\n' });
    expect(result).toMatchObject({ exitCode: 2, stdout: 'in={"a":1} pwd=/workspace dir=/workspace uid=1000\n', stderr: "oops\n", timedOut: false });
  });

  it("tools.hook_run - a hook that hangs is killed at its timeout", async () => {
    const started = performance.now();
    const result = await run("echo started; sleep 30", { timeoutMs: 500 });
    expect(result).toMatchObject({ timedOut: true, stdout: "started\n" });
    expect(performance.now() - started).toBeLessThan(10_000);
  });

  it("tools.hook_run - an empty command or a timeout out of range is refused saying what to send", async () => {
    await expect(run("  ")).rejects.toMatchObject({ code: "tools.invalid_request", message: expect.stringContaining("empty command") });
    await expect(run("true", { timeoutMs: 0 })).rejects.toMatchObject({ code: "tools.invalid_request", message: expect.stringContaining("send 1 to 600000") });
  });
});
