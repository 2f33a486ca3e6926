import { ToolError } from "../tool.js";

/**
 * The `execute` of a tool the loop carries out itself (`handler: "session"`): such a call only
 * reaches the tools service from somewhere the loop does not see it, like a run_code program.
 */
export function carriedOutBySession(name: string): () => Promise<string> {
  return () => Promise.reject(new ToolError(`Not run: ${name} changes the session, so only a direct call of it works (not one from inside another tool such as run_code).`));
}
