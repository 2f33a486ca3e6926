// Public names of MCP tools: valid short names kept, the rest hashed.
import { describe, expect, it } from "vitest";
import { publicToolName, toolHash } from "../src/index.js";

describe("public tool names", () => {
  it("keeps a valid short name and hashes the rest, as a pure function of (server, tool)", () => {
    expect(publicToolName("github", "create_issue")).toBe("mcp__github__create_issue");
    expect(publicToolName("a-b", "c-d_1")).toBe("mcp__a-b__c-d_1");
    expect(toolHash("s", "t")).toMatch(/^[0-9a-f]{12}$/);
    expect(toolHash("s", "t")).toBe(toolHash("s", "t"));
    expect(publicToolName("fs", "read.file")).toBe(`mcp__fs__read_file__${toolHash("fs", "read.file")}`);
    // Two tools that sanitize alike still get two names.
    expect(publicToolName("fs", "read file")).not.toBe(publicToolName("fs", "read.file"));
    // The hash covers the pair, so moving "__" between server and tool changes it.
    expect(toolHash("a__b", "c")).not.toBe(toolHash("a", "b__c"));
    const long = publicToolName("server", "x".repeat(60));
    expect(long).toBe(`mcp__server__${"x".repeat(37)}__${toolHash("server", "x".repeat(60))}`);
    expect(long).toHaveLength(64);
    // 64 exactly still fits as it is.
    const fits = "y".repeat(64 - "mcp__s__".length);
    expect(publicToolName("s", fits)).toBe(`mcp__s__${fits}`);
    expect(publicToolName("s", `${fits}y`)).toHaveLength(64);
    expect(publicToolName("s", "ünïcode")).toMatch(/^mcp__s___n_code__[0-9a-f]{12}$/);
  });
});
