import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { Event } from "@tack/proto";
import { listTools } from "@tack/tools-service";
import { buildRules, operatorRulesPaths, sameRules, touchedDirs, type RulesSource } from "../src/rules.js";

const sha = (data: string | Uint8Array) => createHash("sha256").update(data).digest("hex");
function source(label: string, text: string | Uint8Array, fields: Partial<RulesSource> = {}): RulesSource {
  const head = typeof text === "string" ? Buffer.from(text) : text;
  return { label, where: `/workspace/${label}`, head, bytes: head.length, sha256: sha(head), error: "", ...fields };
}
const call = (name: string, args: unknown) => Event.fromPartial({
  seq: 1, type: "assistant/message", payload: { $case: "assistantMessage", value: { toolCalls: [{ id: "c", name, arguments: JSON.stringify(args) }] } },
});

describe("rules: dedupe, cap, labels", () => {
  it("buildRules - identical contents count once under the first label; every file keeps its label and whole-file hash", () => {
    const built = buildRules([source("operator:/etc/tack/AGENTS.md", "op"), source("AGENTS.md", "same\n"), source("CLAUDE.md", "same\n"), source("src/CLAUDE.md", "nested")]);
    expect(built).toEqual({
      files: [
        { label: "operator:/etc/tack/AGENTS.md", content: "op", sha256: sha("op"), truncated: false },
        { label: "AGENTS.md", content: "same\n", sha256: sha("same\n"), truncated: false },
        { label: "src/CLAUDE.md", content: "nested", sha256: sha("nested"), truncated: false },
      ],
      warnings: [],
    });
  });

  it("buildRules - a file over the cap is cut on a character boundary with a note saying where the whole file is", () => {
    // "é" is two bytes: a cut at 5 bytes would split the third one.
    const text = "ééééé-and-more";
    const whole = Buffer.from(text);
    // As the tools service sends it: a head shorter than the file, with the whole size and hash.
    const [file] = buildRules([source("AGENTS.md", whole.subarray(0, 8), { bytes: whole.length, sha256: sha(whole) })], 5).files;
    expect(file).toEqual({
      label: "AGENTS.md", sha256: sha(whole), truncated: true,
      content: `éé\n\n[... cut at 4 of ${whole.length} bytes; the whole file is /workspace/AGENTS.md ...]`,
    });
    // A head the tools service cut mid-character, under the cap, ends on the last whole one.
    const [head] = buildRules([source("AGENTS.md", whole.subarray(0, 5), { bytes: whole.length, sha256: sha(whole) })], 100).files;
    expect(head!.content.startsWith("éé\n\n[... cut at 4 of")).toBe(true);
    // Exactly at the cap is whole.
    expect(buildRules([source("AGENTS.md", "12345")], 5).files[0]).toMatchObject({ content: "12345", truncated: false });
  });

  it("buildRules - unreadable and binary files become one warning each naming the file; empty files are skipped silently", () => {
    const built = buildRules([
      source("docs/AGENTS.md", "", { error: "is not a regular file" }),
      source("bin/CLAUDE.md", Buffer.from([0x41, 0, 0x42])),
      source("latin/AGENTS.md", Buffer.from([0x63, 0x61, 0x66, 0xe9])),
      source("empty/AGENTS.md", "  \n"),
      source("AGENTS.md", "ok"),
    ]);
    expect(built.files.map((f) => f.label)).toEqual(["AGENTS.md"]);
    expect(built.warnings).toEqual([
      { label: "docs/AGENTS.md", message: "rules file /workspace/docs/AGENTS.md is not a regular file; it was left out (fix or remove it)" },
      { label: "bin/CLAUDE.md", message: "rules file /workspace/bin/CLAUDE.md is not UTF-8 text (binary?); it was left out (rules files must be text)" },
      { label: "latin/AGENTS.md", message: "rules file /workspace/latin/AGENTS.md is not UTF-8 text (binary?); it was left out (rules files must be text)" },
    ]);
  });

  it("sameRules - compares labels and hashes in order", () => {
    const a = buildRules([source("AGENTS.md", "a"), source("x/CLAUDE.md", "b")]).files;
    expect(sameRules(a, buildRules([source("AGENTS.md", "a"), source("x/CLAUDE.md", "b")]).files)).toBe(true);
    expect(sameRules(a, buildRules([source("AGENTS.md", "a"), source("x/CLAUDE.md", "c")]).files)).toBe(false);
    expect(sameRules(a, buildRules([source("AGENTS.md", "a"), source("y/CLAUDE.md", "b")]).files)).toBe(false);
    expect(sameRules(a, a.slice(0, 1))).toBe(false);
  });

  it("touchedDirs - the root, then each folder on the way to a path a call named; paths outside /workspace are ignored", () => {
    expect(touchedDirs([])).toEqual(["."]);
    expect(touchedDirs([
      // The tools as the tools service lists them: which take only files (path_is_file) comes from there.
      Event.fromPartial({ seq: 1, payload: { $case: "requestHeader", value: { tools: listTools("standard") } } }),
      call("read", { path: "src/api/handler.ts" }),
      call("bash", { command: "ls", workdir: "/workspace/pkg" }),
      call("glob", { pattern: "*", path: "/etc" }),
      call("grep", { pattern: "x", path: "../outside" }),
      call("write", { path: "/workspace/src/../docs/a.md", content: "" }),
      call("bash", { command: "cat /workspace/secret/x" }),
      Event.fromPartial({ seq: 2, payload: { $case: "toolInner", value: { name: "read", arguments: '{"path":"lib/x.js"}' } } }),
      Event.fromPartial({ seq: 3, payload: { $case: "assistantMessage", value: { toolCalls: [{ id: "b", name: "read", arguments: "{not json" }] } } }),
      call("grep", { pattern: "x", path: "test/unit" }),
    ])).toEqual([".", "docs", "lib", "pkg", "src", "test", "src/api", "test/unit"]);
  });

  it("touchedDirs - a tool no logged header marks path_is_file may name a folder: its path counts as one", () => {
    const calls = [call("read", { path: "src/a.ts" }), call("grep", { pattern: "x", path: "lib/util" })];
    expect(touchedDirs(calls)).toEqual([".", "lib", "src", "lib/util", "src/a.ts"]);
    const header = Event.fromPartial({ seq: 1, payload: { $case: "requestHeader", value: { tools: [{ name: "read", pathIsFile: true }, { name: "grep" }] } } });
    expect(touchedDirs([header, ...calls])).toEqual([".", "lib", "src", "lib/util"]);
  });

  it("operatorRulesPaths - TACK_RULES_FILES is colon-separated and optional", () => {
    expect(operatorRulesPaths({})).toEqual([]);
    expect(operatorRulesPaths({ TACK_RULES_FILES: "/etc/tack/AGENTS.md::/home/op/rules.md" })).toEqual(["/etc/tack/AGENTS.md", "/home/op/rules.md"]);
  });
});
