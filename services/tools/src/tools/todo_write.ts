import { readFileSync } from "node:fs";
import { z } from "zod";
import { defineTool } from "../tool.js";
import { carriedOutBySession } from "./session.js";

/** todo_write: replaces the session's task list; the loop logs it (`todo/updated`) and the API shows it. */
export const todo_write = defineTool({
  name: "todo_write",
  hookAliases: ["TodoWrite"],
  sessionOperation: "todos",
  description: readFileSync(new URL("./todo_write.txt", import.meta.url), "utf8").trim(),
  parameters: z.strictObject({
    todos: z.array(z.strictObject({
      content: z.string().min(1).max(500).describe("The task, in one imperative sentence"),
      status: z.enum(["pending", "in_progress", "completed"]).describe("pending, in_progress (one at a time) or completed"),
      id: z.string().min(1).max(64).optional().describe("Stable id of the task, if you keep one"),
    })).max(50).describe("The whole list, replacing the previous one"),
  }),
  handler: "session",
  execute: carriedOutBySession("todo_write"),
});
