import { readFileSync } from "node:fs";
import { z } from "zod";
import { defineTool } from "../tool.js";
import { carriedOutBySession } from "./session.js";

/** ask_user_question: the loop logs `question/asked` and waits (durably) for a person's answers, which are the result. */
export const ask_user_question = defineTool({
  name: "ask_user_question",
  hookAliases: ["AskUserQuestion"],
  sessionOperation: "question",
  description: readFileSync(new URL("./ask_user_question.txt", import.meta.url), "utf8").trim(),
  parameters: z.strictObject({
    questions: z.array(z.strictObject({
      header: z.string().min(1).max(30).describe("Short label of the question, at most 30 characters"),
      question: z.string().min(1).max(1_000).describe("The whole question"),
      options: z.array(z.strictObject({
        label: z.string().min(1).max(100).describe("The choice, in a few words"),
        description: z.string().max(500).optional().describe("What choosing it means"),
      })).min(2).max(4).describe("2-4 choices; the user may also answer in their own words"),
      multi_select: z.boolean().default(false).describe("Allow more than one choice"),
    })).min(1).max(4).describe("1-4 questions, asked together"),
  }),
  handler: "session",
  execute: carriedOutBySession("ask_user_question"),
});
