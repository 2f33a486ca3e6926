import { readFileSync } from "node:fs";
import { z } from "zod";
import { defineTool } from "../tool.js";
import { carriedOutBySession } from "./session.js";

/** exit_plan_mode: the loop logs `plan/submitted` and waits (durably) for a person to approve or reject the plan. */
export const exit_plan_mode = defineTool({
  name: "exit_plan_mode",
  hookAliases: ["ExitPlanMode"],
  sessionOperation: "plan",
  description: readFileSync(new URL("./exit_plan_mode.txt", import.meta.url), "utf8").trim(),
  parameters: z.strictObject({
    plan: z.string().min(1).max(50_000).describe("The plan in markdown: the steps, and the files each changes"),
  }),
  handler: "session",
  execute: carriedOutBySession("exit_plan_mode"),
});
