import { describe, expect, it } from "vitest";
import { MAX_FRONT_MATTER_CHARS, parseSkill } from "../src/index.js";

const skill = (frontMatter: string) => `---\ndescription: d\n${frontMatter}\n---\nbody`;

// YAML parsing is not linear on hostile input; the front matter a skill may have is bounded.
describe("skills: front matter budget", () => {
  it("parseSkill - a huge front matter (60,000 keys) is refused at once, saying the limit", () => {
    const started = performance.now();
    expect(() => parseSkill("evil/SKILL.md", skill(Array.from({ length: 60_000 }, (_, i) => `k${i}: v`).join("\n")), "evil"))
      .toThrow(new RegExp(`^evil/SKILL\\.md: the front matter is 58890\\d characters, more than the ${MAX_FRONT_MATTER_CHARS} a skill's may have; keep name, description and short fields there and move the rest into the body$`));
    expect(performance.now() - started).toBeLessThan(500);
  });

  it("parseSkill - a deeply nested front matter is refused before the parser recurses", () => {
    const started = performance.now();
    for (const nested of ["a: " + "[".repeat(4000) + "]".repeat(4000), "- ".repeat(4000) + "x", "a: " + "{b: ".repeat(100) + "c" + "}".repeat(100)]) {
      expect(() => parseSkill("deep/SKILL.md", skill(nested), "deep")).toThrow("deep/SKILL.md: the front matter nests more than 32 levels deep (lists or maps in lists or maps); flatten it");
    }
    expect(performance.now() - started).toBeLessThan(500);
    // Ordinary nesting and brackets in quoted text still parse.
    expect(parseSkill("ok/SKILL.md", skill("metadata:\n  tags: [a, [b, {c: d}]]\n  - x\nlicense: '[[[[ not nesting'").replace("  - x\n", ""), "ok").description).toBe("d");
  });
});
