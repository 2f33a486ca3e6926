import { readFileSync } from "node:fs";
import { z } from "zod";
import { defineTool } from "../tool.js";
import { carriedOutBySession } from "./session.js";

/** session_search: the loop searches the session's own log, compacted-away parts included. */
export const session_search = defineTool({
  name: "session_search",
  sessionOperation: "search",
  description: readFileSync(new URL("./session_search.txt", import.meta.url), "utf8").trim(),
  parameters: z.strictObject({
    query: z.string().min(1).max(500).describe("Text to find, case-insensitive"),
    regex: z.boolean().default(false).describe("Read query as a JavaScript regular expression"),
    limit: z.number().int().min(1).max(50).default(20).describe("Most matches to return"),
  }),
  handler: "session",
  execute: carriedOutBySession("session_search"),
});
