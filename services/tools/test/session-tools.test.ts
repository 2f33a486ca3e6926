import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { listTools } from "../src/registry.js";
import { makeWorkspace, type Workspace } from "./support/call.js";

// What the loop learns of each tool from its ToolSpec: what a sandbox mode can deny it, the
// argument an approval card shows, and which tools the loop carries out itself.
describe("tool specs for the loop", () => {
  const standard = listTools("standard");

  it("specs - a tool takes sandbox_permissions exactly when it declares what a mode can deny it", () => {
    for (const tool of standard) {
      const takes = "sandbox_permissions" in (JSON.parse(tool.parametersJson) as { properties: object }).properties;
      expect({ tool: tool.name, declares: tool.deniable.length > 0 }).toEqual({ tool: tool.name, declares: takes });
    }
    const declared = Object.fromEntries(standard.filter((t) => t.deniable.length > 0).map((t) => [t.name, t.deniable]));
    expect(declared).toEqual({ write: ["writes"], edit: ["writes"], bash: ["writes", "network"] });
  });

  it("specs - bash shows its command on an approval card; the session tools are the loop's", () => {
    expect(standard.filter((t) => t.operationArgument).map((t) => [t.name, t.operationArgument])).toEqual([["bash", "command"]]);
    expect(standard.filter((t) => t.handler === "session").map((t) => t.name)).toEqual(["todo_write", "ask_user_question", "exit_plan_mode", "session_search"]);
    expect(standard.filter((t) => t.handler !== "session").every((t) => t.handler === "")).toBe(true);
  });
});

describe("session tools in the tools service", () => {
  let ws: Workspace;
  beforeEach(async () => {
    ws = await makeWorkspace();
  });
  afterEach(async () => {
    await ws.remove();
  });

  it("session tools - a call that reaches the tools service is refused, saying only a direct call works", async () => {
    const result = await ws.call("todo_write", { todos: [{ content: "write tests", status: "pending" }] });
    expect(result).toMatchObject({
      isError: true, content: "Not run: todo_write changes the session, so only a direct call of it works (not one from inside another tool such as run_code).",
    });
  });

  it("session tools - their arguments are still checked by their schema first", async () => {
    const result = await ws.call("ask_user_question", { questions: [{ header: "Lang", question: "Which?", options: [{ label: "only one" }] }] });
    expect(result.isError).toBe(true);
    expect(result.content).toBe("Invalid arguments for ask_user_question: questions.0.options: Too small: expected array to have >=2 items");
  });
});
