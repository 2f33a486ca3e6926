import { describe, expect, it } from "vitest";
import { CallToolRequest, type CallToolResponse, type DefinedTool } from "@tack/proto";
import { LinearRegExp } from "@tack/linear-regex";
import { callTool } from "../src/registry.js";
import { htmlToMarkdown, parseHtmlWithin } from "../src/web/markdown.js";

// Untrusted input parsed in this service has a budget: linear-time algorithms, or a time limit
// that yields to other calls. On the old code each of these ran for minutes (or forever).

const EVIL = "a".repeat(39) + "!";

function call(name: string, args: unknown, defined: DefinedTool[] = []): Promise<CallToolResponse> {
  return callTool(CallToolRequest.fromPartial({
    sessionId: "s1", tenant: "t1", callId: "call-1", name, arguments: JSON.stringify(args), workspace: "/nonexistent",
    sandboxMode: "workspace-write", attempt: 1, firstAttemptAtMs: Date.now(), sessionMode: "creator", defined: { tools: defined },
  }), { sandbox: { ensure: async () => undefined } as never, spills: { get: async () => undefined }, signal: new AbortController().signal });
}

const definition = (pattern: string) => ({
  name: "echo_word", description: "Echo a word", language: "bash", code: "cat",
  parameters: { type: "object", properties: { word: { type: "string", pattern } }, required: ["word"] },
});

describe("budgets: JSON Schema patterns of defined tools", () => {
  it("budget - a defined tool with pattern ^(a+)+$ refuses a 40-character 'aaaa…!' argument at once, naming the pattern", async () => {
    const defined = (await call("define_tool", definition("^(a+)+$"))).defined!;
    expect(defined.name).toBe("echo_word");
    const started = performance.now();
    const result = await call("echo_word", { word: EVIL }, [defined]);
    expect(performance.now() - started).toBeLessThan(1000);
    expect(result).toMatchObject({ isError: true, content: "Invalid arguments for echo_word: word: Invalid string: must match pattern /^(a+)+$/" });
  });

  it("budget - patternProperties and propertyNames run on the linear engine too", async () => {
    const defined = (await call("define_tool", {
      ...definition("^a"), parameters: { type: "object", patternProperties: { "^(x+)+$": { type: "number" } }, propertyNames: { pattern: "^(x+)+$" } },
    })).defined!;
    const started = performance.now();
    const result = await call("echo_word", { ["x".repeat(39) + "!"]: 1 }, [defined]);
    expect(performance.now() - started).toBeLessThan(1000);
    expect(result.isError).toBe(true);
    expect(result.content).toMatch(/^Invalid arguments for echo_word: /);
  });

  it("budget - define_tool refuses backreferences and lookaround, naming the construct", async () => {
    for (const [pattern, construct] of [["^(a)\\1$", "a backreference (`\\1`)"], ["^a(?=b)", "a lookahead (`(?=`)"], ["(?<!x)y", "a negative lookbehind (`(?<!`)"], ["(?<n>a)\\k<n>", "a named backreference (`\\k<name>`)"]]) {
      const result = await call("define_tool", definition(pattern!));
      expect(result.isError).toBe(true);
      expect(result.content).toBe(`parameters of echo_word: pattern ${JSON.stringify(pattern)} uses ${construct}: patterns here run on a linear-time engine (RE2), which has no backreferences or lookaround; rewrite the pattern without it`);
      expect(result.defined).toBeUndefined();
    }
  });

  it("budget - LinearRegExp reads JavaScript syntax and leaves the global RegExp alone", () => {
    expect(new LinearRegExp("^\\u00e9(?<x>[^]{2})$").exec("éab")?.groups).toEqual({ x: "ab" });
    expect("xaay".replace(new LinearRegExp("a+"), "-")).toBe("x-y");
    expect(new RegExp("a").constructor).toBe(RegExp);
  });
});

describe("budgets: HTML to Markdown", () => {
  it("budget - a <pre> of a million spaces between two letters converts in well under a second", () => {
    const started = performance.now();
    const markdown = htmlToMarkdown(`<pre>a${" ".repeat(1_000_000)}b</pre><p><b>x${"<br>".repeat(20_000)}y</b></p>`);
    expect(performance.now() - started).toBeLessThan(2000);
    expect(markdown).toBe(`\`\`\`\na${" ".repeat(1_000_000)}b\n\`\`\`\n\n**x\n\ny**`);
  });

  it("budget - deep nesting converts without a stack overflow, and a parse past its time limit fails and yields meanwhile", async () => {
    expect(htmlToMarkdown(`${"<div>".repeat(20_000)}deep`)).toBe("deep");
    let last = performance.now();
    let longestGap = 0;
    const timer = setInterval(() => {
      longestGap = Math.max(longestGap, performance.now() - last);
      last = performance.now();
    }, 10);
    const started = performance.now();
    await expect(parseHtmlWithin("<div>".repeat(1_000_000), { timeoutMs: 1000 })).rejects.toThrow(/could not be parsed within 1 s \(\d+% read\): it is nested too deeply or is too large/);
    clearInterval(timer);
    expect(performance.now() - started).toBeLessThan(3000);
    // The event loop kept running while it parsed: other calls are answered.
    expect(longestGap).toBeLessThan(500);
  });
});
