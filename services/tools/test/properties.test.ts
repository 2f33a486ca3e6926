// What the loop reads of each tool besides its schema (ToolSpec fields 8-11): the loop spells no tool
// name, so hooks, rules, skills and session tools work only as far as these are right.
import { describe, expect, it } from "vitest";
import { listTools } from "../src/registry.js";

const byName = (mode: string) => new Map(listTools(mode).map((t) => [t.name, t]));

describe("tool properties for the loop", () => {
  it("properties - Claude Code's names for hook matchers (the first is what a hook's input says)", () => {
    const aliases = Object.fromEntries(listTools("standard").filter((t) => t.hookAliases.length > 0).map((t) => [t.name, t.hookAliases]));
    expect(aliases).toEqual({
      read: ["Read"], write: ["Write"], edit: ["Edit", "MultiEdit"], glob: ["Glob"], grep: ["Grep"], bash: ["Bash"], job_output: ["BashOutput"],
      job_kill: ["KillShell"], todo_write: ["TodoWrite"], ask_user_question: ["AskUserQuestion"], exit_plan_mode: ["ExitPlanMode"],
      web_fetch: ["WebFetch"], web_search: ["WebSearch"],
    });
  });

  it("properties - tools whose path is always a file, and those whose call writes it", () => {
    const standard = listTools("standard");
    expect(standard.filter((t) => t.pathIsFile).map((t) => t.name)).toEqual(["read", "write", "edit", "lsp"]);
    expect(standard.filter((t) => t.writesPath).map((t) => t.name)).toEqual(["write", "edit"]);
    expect(listTools("minimal").filter((t) => t.pathIsFile).map((t) => t.name)).toEqual(["editor"]);
    expect(listTools("minimal").filter((t) => t.writesPath)).toEqual([]);
  });

  it("properties - each session tool names what the loop does for it, and only session tools do", () => {
    const standard = listTools("standard");
    expect(Object.fromEntries(standard.filter((t) => t.sessionOperation).map((t) => [t.name, t.sessionOperation]))).toEqual({
      todo_write: "todos", ask_user_question: "question", exit_plan_mode: "plan", session_search: "search",
    });
    for (const tool of standard) expect(tool.handler === "session", tool.name).toBe(tool.sessionOperation !== "");
    expect(byName("code").get("run_code")).toMatchObject({ hookAliases: [], pathIsFile: false, writesPath: false, sessionOperation: "" });
  });
});
