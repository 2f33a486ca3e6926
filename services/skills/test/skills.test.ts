// The skills registry over real files in temp dirs: a workspace, a fake home, an operator root,
// a runtime root and a bundled root.
import { mkdir, mkdtemp, rm, symlink, unlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { TackError } from "@tack/bus";
import { waitFor } from "@tack/testkit";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Skills, type SkillsOptions } from "../src/index.js";

let dir: string;
let ws: string;
let home: string;
let operator: string;
let runtime: string;
let bundled: string;
const open: Skills[] = [];

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "tack-skills-"));
  [ws, home, operator, runtime, bundled] = ["ws", "home", "operator", "runtime", "bundled"].map((d) => join(dir, d)) as [string, string, string, string, string];
  for (const d of [ws, home, operator, runtime, bundled]) await mkdir(d);
});

afterEach(async () => {
  for (const skills of open.splice(0)) skills.close();
  await rm(dir, { recursive: true, force: true });
});

function registry(options: SkillsOptions = {}): Skills {
  const skills = new Skills({ home, operatorRoots: [operator], bundledRoot: bundled, ...options });
  open.push(skills);
  return skills;
}

async function put(path: string, text: string): Promise<string> {
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, text);
  return path;
}

const md = (front: string, body = "Do the thing.\n") => `---\n${front}\n---\n${body}`;
const wsRoot = (r: "tack" | "agents" | "claude") => join(ws, `.${r}`, "skills");
const homeRoot = (r: "tack" | "agents" | "claude") => join(home, `.${r}`, "skills");

async function refusal(promise: Promise<unknown>): Promise<TackError> {
  const error = await promise.then(() => undefined, (e: unknown) => e);
  expect(error).toBeInstanceOf(TackError);
  return error as TackError;
}

describe("discovery", () => {
  it("a name in a higher root hides it lower; every root takes part, in the documented order", async () => {
    const roots: Array<[string, string]> = [
      [wsRoot("tack"), "workspace:.tack/skills"], [wsRoot("agents"), "workspace:.agents/skills"], [wsRoot("claude"), "workspace:.claude/skills"],
      [runtime, "runtime"], [operator, "operator"],
      [homeRoot("tack"), "user:.tack/skills"], [homeRoot("agents"), "user:.agents/skills"], [homeRoot("claude"), "user:.claude/skills"],
      [bundled, "bundled"],
    ];
    // Root i defines "shared" and its own "only-<i>"; the shared one of each lower root is hidden.
    for (const [i, [root]] of roots.entries()) {
      await put(join(root, "shared", "SKILL.md"), md(`description: shared from ${i}`));
      await put(join(root, `only-${i}.md`), md(`description: only in root ${i}`));
    }
    const skills = registry();
    skills.addRoot(runtime);
    const catalog = await skills.catalog(ws);
    expect(catalog.warnings).toEqual([]);
    expect(catalog.entries.map((e) => e.name)).toEqual([...roots.keys()].map((i) => `only-${i}`).concat("shared"));
    for (const [i, [root, label]] of roots.entries()) {
      expect(catalog.entries.find((e) => e.name === `only-${i}`)!.source).toEqual({ root: label, path: join(root, `only-${i}.md`) });
    }
    expect(catalog.entries.find((e) => e.name === "shared")).toEqual({
      name: "shared", description: "shared from 0", source: { root: "workspace:.tack/skills", path: join(wsRoot("tack"), "shared", "SKILL.md") },
      modelInvocable: true, userInvocable: true,
    });
    // Remove the top two: the third root's copy shows through.
    await rm(join(wsRoot("tack"), "shared"), { recursive: true });
    await rm(join(wsRoot("agents"), "shared"), { recursive: true });
    await skills.invalidate(join(wsRoot("tack"), "shared"));
    await skills.invalidate(join(wsRoot("agents"), "shared"));
    expect((await skills.catalog(ws)).entries.find((e) => e.name === "shared")!.description).toBe("shared from 2");
  });

  it("only <folder>/SKILL.md and <name>.md directly in a root are skills; the name in the file wins over the folder's", async () => {
    const root = wsRoot("claude");
    await put(join(root, "folder-skill", "SKILL.md"), md("description: from a folder"));
    await put(join(root, "single.md"), md("description: a single file"));
    await put(join(root, "renamed-folder", "SKILL.md"), md("name: real-name\ndescription: named in the file"));
    await put(join(root, "renamed-file.md"), md("name: file-name\ndescription: named in the file too"));
    // Not skills: deeper files, a folder without SKILL.md, other files, hidden entries.
    await put(join(root, "group", "nested", "SKILL.md"), md("description: too deep"));
    await put(join(root, "group", "deeper.md"), md("description: too deep as well"));
    await put(join(root, "notes.txt"), "not markdown");
    await put(join(root, ".hidden.md"), md("description: hidden"));
    const catalog = await registry().catalog(ws);
    expect(catalog.entries.map((e) => [e.name, e.source.path])).toEqual([
      ["file-name", join(root, "renamed-file.md")],
      ["folder-skill", join(root, "folder-skill", "SKILL.md")],
      ["real-name", join(root, "renamed-folder", "SKILL.md")],
      ["single", join(root, "single.md")],
    ]);
    expect(catalog.warnings).toEqual([]);
  });

  it("each invalid skill is dropped with exactly one warning naming its file and field; the others load", async () => {
    const root = wsRoot("tack");
    const bad: Array<[string, string, RegExp]> = [
      ["bad-yaml.md", md("description: [unclosed"), /not valid YAML/],
      ["bad-name.md", md("name: Bad_Name\ndescription: x"), /field "name" must be 1-64 lowercase letters.*got "Bad_Name"/],
      ["long-name.md", md(`name: ${"a".repeat(65)}\ndescription: x`), /field "name" must be 1-64/],
      ["no-description.md", md("name: no-description"), /field "description" is missing/],
      ["empty-description.md", md("description: '   '"), /field "description" must not be empty/],
      ["wrong-type.md", md("description: x\ndisable-model-invocation: 'yes'"), /field "disable-model-invocation" must be a boolean, not "yes"/],
      ["wrong-type-2.md", md("description: x\nuser-invocable: 1"), /field "user-invocable" must be a boolean, not 1/],
      ["number-description.md", md("description: 42"), /field "description" must be a string, not 42/],
      ["no-front-matter.md", "# Just markdown\n", /no front matter, so field "description" is missing/],
      ["not-a-mapping.md", md("- a list"), /not a mapping of fields, so field "description" is missing/],
      ["unclosed.md", "---\ndescription: x\n", /never closed/],
      ["Bad Folder/SKILL.md", md("description: folder name is no valid name"), /field "name" is missing and the "Bad Folder" it defaults to is not a valid name/],
      ["zz-dupe.md", md("name: good\ndescription: same name as good/SKILL.md (the first entry in name order wins)"), /field "name" is "good", which .*good\/SKILL\.md already defines in the same root/],
    ];
    for (const [file, text] of bad) await put(join(root, file), text);
    await put(join(root, "good", "SKILL.md"), md("description: fine"));
    await put(join(root, "also-good.md"), md("description: fine too\nlicense: MIT\nallowed-tools: [read]"));
    const catalog = await registry().catalog(ws);
    expect(catalog.entries.map((e) => e.name)).toEqual(["also-good", "good"]);
    expect(catalog.warnings).toHaveLength(bad.length);
    for (const [file, , pattern] of bad) {
      const mine = catalog.warnings.filter((w) => w.startsWith(`${join(root, file)}:`));
      expect(mine, file).toHaveLength(1);
      expect(mine[0], file).toMatch(pattern);
    }
  });

  it("descriptions are cut to 500 characters in the catalog", async () => {
    await put(join(operator, "long.md"), md(`description: ${"é".repeat(700)}`));
    await put(join(operator, "short.md"), md(`description: ${"x".repeat(500)}`));
    const { entries } = await registry().catalog(ws);
    expect(entries.map((e) => Array.from(e.description).length)).toEqual([500, 500]);
    expect(entries[0]!.description).toBe("é".repeat(500));
  });

  it("a workspace skill may not lead outside the workspace through a symlink", async () => {
    const outside = await put(join(dir, "secret.md"), md("description: not for the model", "secret body"));
    await mkdir(join(wsRoot("tack"), "escape"), { recursive: true });
    await symlink(outside, join(wsRoot("tack"), "escape", "SKILL.md"));
    await mkdir(join(ws, ".agents"), { recursive: true });
    await mkdir(join(dir, "elsewhere"));
    await symlink(join(dir, "elsewhere"), join(ws, ".agents", "skills"));
    await put(join(dir, "elsewhere", "other.md"), md("description: outside too"));
    const skills = registry();
    const catalog = await skills.catalog(ws);
    expect(catalog.entries).toEqual([]);
    expect(catalog.warnings).toEqual([
      expect.stringMatching(/escape\/SKILL\.md: leads outside the workspace/),
      expect.stringMatching(/\.agents\/skills: leads outside the workspace/),
    ]);
    expect((await refusal(skills.load(ws, "escape", "user"))).code).toBe("skills.unknown");
  });
});

describe("bundled", () => {
  it("the bundled skills load without warnings, below every other root", async () => {
    await put(join(homeRoot("tack"), "other.md"), md("description: not bundled"));
    const skills = new Skills({ home, operatorRoots: [] });
    open.push(skills);
    const catalog = await skills.catalog(ws);
    expect(catalog.warnings).toEqual([]);
    expect(catalog.entries.find((e) => e.name === "write-skill")).toMatchObject({ source: { root: "bundled" }, modelInvocable: true, userInvocable: true });
    expect((await skills.load(ws, "write-skill", "model")).body).toMatch(/^# Writing a skill/);
    // A workspace skill of the same name hides it.
    await put(join(wsRoot("tack"), "write-skill.md"), md("description: the project's own"));
    await skills.invalidate(join(wsRoot("tack"), "write-skill.md"));
    expect((await skills.catalog(ws)).entries.find((e) => e.name === "write-skill")!.source.root).toBe("workspace:.tack/skills");
  });
});

describe("catalog digest", () => {
  it("is stable across calls and registries and changes when a description changes", async () => {
    const file = await put(join(wsRoot("tack"), "a.md"), md("description: first"));
    await put(join(homeRoot("claude"), "b", "SKILL.md"), md("description: second"));
    const skills = registry();
    const one = await skills.catalog(ws);
    expect(one.digest).toMatch(/^[0-9a-f]{64}$/);
    expect((await skills.catalog(ws)).digest).toBe(one.digest);
    expect((await registry().catalog(ws)).digest).toBe(one.digest);
    await writeFile(file, md("description: first, changed"));
    await skills.invalidate(file);
    const changed = await skills.catalog(ws);
    expect(changed.digest).not.toBe(one.digest);
    await writeFile(file, md("description: first"));
    await skills.invalidate(file);
    expect((await skills.catalog(ws)).digest).toBe(one.digest);
  });
});

describe("watching", () => {
  it("picks up a skill added, edited and removed within the debounce", async () => {
    await put(join(wsRoot("tack"), "existing.md"), md("description: here from the start"));
    const changes: string[] = [];
    const skills = registry({ debounceMs: 100, onChange: (root) => changes.push(root) });
    expect((await skills.catalog(ws)).entries.map((e) => e.name)).toEqual(["existing"]);
    const names = async () => (await skills.catalog(ws)).entries.map((e) => `${e.name}:${e.description}`).join(",");
    const file = await put(join(wsRoot("tack"), "added", "SKILL.md"), md("description: new"));
    await waitFor("the added skill in the catalog", async () => (await names()) === "added:new,existing:here from the start", { timeoutMs: 5_000, intervalMs: 50 });
    await writeFile(file, md("description: edited"));
    await waitFor("the edited description", async () => (await names()) === "added:edited,existing:here from the start", { timeoutMs: 5_000, intervalMs: 50 });
    await rm(join(wsRoot("tack"), "added"), { recursive: true });
    await waitFor("the removed skill gone", async () => (await names()) === "existing:here from the start", { timeoutMs: 5_000, intervalMs: 50 });
    expect(changes.length).toBeGreaterThan(0);
    expect(new Set(changes)).toEqual(new Set([wsRoot("tack")]));
  });

  it("a root that appears later is found at the next catalog request and watched from then on", async () => {
    const skills = registry({ debounceMs: 100 });
    expect((await skills.catalog(ws)).entries).toEqual([]);
    await put(join(homeRoot("agents"), "late.md"), md("description: the root did not exist"));
    expect((await skills.catalog(ws)).entries.map((e) => e.name)).toEqual(["late"]);
    await put(join(homeRoot("agents"), "later.md"), md("description: watched now"));
    await waitFor("the second skill of the new root", async () => (await skills.catalog(ws)).entries.length === 2, { timeoutMs: 5_000, intervalMs: 50 });
  });

  it("invalidate reads the root again at once, long before the debounce", async () => {
    const file = await put(join(wsRoot("claude"), "x.md"), md("description: before"));
    const skills = registry({ debounceMs: 60_000 });
    expect((await skills.catalog(ws)).entries[0]!.description).toBe("before");
    await writeFile(file, md("description: after"));
    await put(join(wsRoot("claude"), "y.md"), md("description: new"));
    expect(await skills.invalidate(file)).toBe(true);
    expect((await skills.catalog(ws)).entries.map((e) => `${e.name}:${e.description}`)).toEqual(["x:after", "y:new"]);
    // A path under no skills root reads nothing again.
    expect(await skills.invalidate(join(ws, "src", "main.ts"))).toBe(false);
    // Removing the root's parent folder counts as under it.
    await rm(join(ws, ".claude"), { recursive: true });
    expect(await skills.invalidate(join(ws, ".claude"))).toBe(true);
    expect((await skills.catalog(ws)).entries).toEqual([]);
    await expect(skills.invalidate("relative/path")).rejects.toThrow(/not absolute/);
  });
});

describe("load", () => {
  beforeEach(async () => {
    await put(join(wsRoot("tack"), "both", "SKILL.md"), md("description: anyone", "# Both\n\nSteps.\n"));
    await put(join(wsRoot("tack"), "both", "scripts", "run.sh"), "echo hi\n");
    await put(join(wsRoot("tack"), "both", "reference.md"), "more\n");
    await put(join(wsRoot("tack"), "user-only.md"), md("description: only /user-only\ndisable-model-invocation: true"));
    await put(join(operator, "model-only.md"), md("description: only the model\nuser-invocable: false"));
  });

  it("returns the body without front matter, the path and the files next to SKILL.md", async () => {
    const skills = registry();
    const loaded = await skills.load(ws, "both", "model");
    expect(loaded).toEqual({
      name: "both", body: "# Both\n\nSteps.\n", path: join(wsRoot("tack"), "both", "SKILL.md"),
      files: ["reference.md", join("scripts", "run.sh")], filesTruncated: false,
      source: { root: "workspace:.tack/skills", path: join(wsRoot("tack"), "both", "SKILL.md") },
    });
    expect((await skills.load(ws, "both", "user")).body).toBe("# Both\n\nSteps.\n");
    expect(await skills.load(ws, "model-only", "model")).toMatchObject({ name: "model-only", files: [], body: "Do the thing.\n" });
    expect((await skills.load(ws, "user-only", "user")).path).toBe(join(wsRoot("tack"), "user-only.md"));
    const catalog = await skills.catalog(ws);
    expect(catalog.entries.map((e) => [e.name, e.modelInvocable, e.userInvocable])).toEqual([
      ["both", true, true], ["model-only", true, false], ["user-only", false, true],
    ]);
  });

  it("refuses the model a skill with disable-model-invocation and the user one with user-invocable: false", async () => {
    const skills = registry();
    const model = await refusal(skills.load(ws, "user-only", "model"));
    expect(model.code).toBe("skills.model_not_allowed");
    expect(model.message).toMatch(/disable-model-invocation: true .*only the user can run it, by typing \/user-only/);
    const user = await refusal(skills.load(ws, "model-only", "user"));
    expect(user.code).toBe("skills.user_not_allowed");
    expect(user.message).toMatch(/user-invocable: false .*cannot be run with \/model-only/);
    expect((await refusal(skills.load(ws, "both", "admin" as "user"))).message).toMatch(/by is "admin"; say who invokes the skill: "model" or "user"/);
  });

  it("an unknown name names the close matches", async () => {
    const error = await refusal(registry().load(ws, "bth", "user"));
    expect(error.code).toBe("skills.unknown");
    expect(error.message).toBe('no skill named "bth"; did you mean "both"?');
    expect((await refusal(registry().load(ws, "zzzzzz", "user"))).message).toBe('no skill named "zzzzzz"; the skills are both, model-only, user-only');
  });

  it("re-reads the file: a skill deleted or broken since the catalog fails clearly, a changed one loads as it is now", async () => {
    const skills = registry({ debounceMs: 60_000 });
    await skills.catalog(ws);
    await unlink(join(wsRoot("tack"), "user-only.md"));
    const gone = await refusal(skills.load(ws, "user-only", "user"));
    expect(gone.code).toBe("skills.gone");
    expect(gone.message).toBe(`skill "user-only" is gone: ${join(wsRoot("tack"), "user-only.md")} was deleted or renamed since the catalog was made; ask for the catalog again`);
    await writeFile(join(operator, "model-only.md"), md("user-invocable: false"));
    const broken = await refusal(skills.load(ws, "model-only", "model"));
    expect(broken.code).toBe("skills.gone");
    expect(broken.message).toMatch(/can no longer be loaded: .*model-only\.md: field "description" is missing/);
    await writeFile(join(wsRoot("tack"), "both", "SKILL.md"), md("description: anyone\ndisable-model-invocation: true", "new body\n"));
    expect((await refusal(skills.load(ws, "both", "model"))).code).toBe("skills.model_not_allowed");
    expect((await skills.load(ws, "both", "user")).body).toBe("new body\n");
  });
});
