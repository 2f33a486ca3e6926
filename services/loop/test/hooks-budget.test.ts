import { describe, expect, it } from "vitest";
import { matcherTest, parseHooks } from "../src/hooks.js";

// A hook matcher comes from a repository and the name it is tested on from the model: it runs on
// a linear-time engine. On the old code (a native RegExp) this test never ends.
describe("hooks: matcher budget", () => {
  it("matcherTest - an evil matcher ^(a+)+$ on a 40-character name answers at once", () => {
    const started = performance.now();
    expect(matcherTest("^(a+)+$")("a".repeat(39) + "!")).toBe(false);
    expect(matcherTest("^(a+)+$")("a".repeat(40))).toBe(true);
    expect(performance.now() - started).toBeLessThan(500);
  });

  it("parseHooks - a matcher with a lookahead is refused, naming it", () => {
    const text = JSON.stringify({ hooks: { PreToolUse: [{ matcher: "^(?=Bash)B", hooks: [{ type: "command", command: "x.sh" }] }] } });
    const loaded = parseHooks([{ source: ".claude/settings.json", text, error: "" }], [{ name: "bash", hookAliases: ["Bash"] }]);
    expect(loaded.hooks).toEqual([]);
    expect(loaded.warnings[0]!.message).toContain('matcher "^(?=Bash)B" is not a valid regular expression (uses a lookahead (`(?=`): patterns here run on a linear-time engine (RE2)');
  });
});
