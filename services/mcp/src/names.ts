// Public names of MCP tools as the model sees them. Providers accept `^[A-Za-z0-9_-]{1,64}$`,
// so a name that does not fit gets a hash of (server, tool) instead of being rejected.
import { createHash } from "node:crypto";

/** Longest public name; the strictest provider limit (OpenAI and Anthropic tool names). */
export const MAX_PUBLIC_NAME = 64;
const VALID = /^[A-Za-z0-9_-]+$/;

/** The first 12 hex digits of SHA-256 over `JSON.stringify([server, tool])`: a pair maps to one hash, whatever its characters. */
export function toolHash(server: string, tool: string): string {
  return createHash("sha256").update(JSON.stringify([server, tool])).digest("hex").slice(0, 12);
}

/**
 * `mcp__<server>__<tool>` when that is at most 64 characters of `[A-Za-z0-9_-]`; otherwise
 * `mcp__<s>__<hash12>` where `<s>` is `<server>__<tool>` with every other character turned
 * into `_` and cut to 45 characters (5 + 45 + 2 + 12 = 64), and `<hash12>` is `toolHash`.
 * A pure function of the pair: the same tool keeps its name across restarts and replicas.
 */
export function publicToolName(server: string, tool: string): string {
  const plain = `mcp__${server}__${tool}`;
  if (plain.length <= MAX_PUBLIC_NAME && VALID.test(plain)) return plain;
  const readable = `${server}__${tool}`.replace(/[^A-Za-z0-9_-]/g, "_").slice(0, MAX_PUBLIC_NAME - 5 - 2 - 12);
  return `mcp__${readable}__${toolHash(server, tool)}`;
}
