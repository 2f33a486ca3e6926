// `tack skills add` from a local bare git repository (file:// URL), a tarball made by `npm pack` and a
// local folder, validated with the skills service's parser, under the operator's skills.install
// setting. Nothing here reaches the network.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { parseCommand, type SkillsCommand } from "../src/args.js";
import { skillsCommand } from "../src/commands/skills.js";
import { classifySkillSource } from "../src/skill-install.js";

const scratch = mkdtempSync(join(tmpdir(), "tack-skills-add-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

let dir: string;
let home: string;
let project: string;
let env: NodeJS.ProcessEnv;
let stdout: string;
let stderr: string;

beforeEach(() => {
  dir = mkdtempSync(join(scratch, "case-"));
  home = join(dir, "home");
  project = join(dir, "project");
  mkdirSync(home, { recursive: true });
  mkdirSync(project, { recursive: true });
  // The built-in operator configuration (install allowed from every kind of source) unless a test sets TACK_CONFIG.
  env = { HOME: home, PATH: process.env.PATH, TACK_STATE_DIR: join(dir, "state") };
  stdout = "";
  stderr = "";
  vi.spyOn(process.stdout, "write").mockImplementation((chunk: string | Uint8Array) => {
    stdout += String(chunk);
    return true;
  });
  vi.spyOn(process.stderr, "write").mockImplementation((chunk: string | Uint8Array) => {
    stderr += String(chunk);
    return true;
  });
});
afterEach(() => vi.restoreAllMocks());

async function tackSkills(...argv: string[]): Promise<number> {
  return skillsCommand(parseCommand(["skills", ...argv]) as SkillsCommand, project, env);
}

function write(path: string, text: string): void {
  mkdirSync(join(path, ".."), { recursive: true });
  writeFileSync(path, text);
}

const skillText = (description: string, extra = "") => `---\n${extra}description: ${description}\n---\nDo the thing.\n`;
const userSkills = () => join(home, ".tack", "skills");
const tree = (root: string): string[] => readdirSync(root, { recursive: true, withFileTypes: true })
  .filter((e) => !e.isDirectory()).map((e) => join(e.parentPath, e.name).slice(root.length + 1)).sort();

/** A bare repository holding `files` on its default branch, as a file:// URL. */
function gitRepo(name: string, files: Record<string, string>): string {
  const work = join(dir, `${name}-work`);
  for (const [path, text] of Object.entries(files)) write(join(work, path), text);
  const git = (cwd: string, ...args: string[]) => execFileSync("git", ["-c", "user.email=test@example.invalid", "-c", "user.name=test", "-c", "init.defaultBranch=main", ...args], { cwd, stdio: "pipe" });
  git(work, "init", "-q");
  git(work, "add", "-A");
  git(work, "commit", "-q", "-m", "skills");
  const bare = join(dir, `${name}.git`);
  git(dir, "init", "-q", "--bare", bare);
  git(work, "push", "-q", bare, "HEAD:refs/heads/main");
  return `file://${bare}`;
}

/** `npm pack` of a package made of `files`; returns the tarball's path. */
function npmTarball(files: Record<string, string>): string {
  const pkg = join(dir, "pkg");
  for (const [path, text] of Object.entries(files)) write(join(pkg, path), text);
  const out = join(dir, "packed");
  mkdirSync(out);
  const printed = execFileSync("npm", ["pack", pkg, "--pack-destination", out, "--json", "--ignore-scripts"], {
    cwd: dir, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, npm_config_update_notifier: "false", npm_config_offline: "true" },
  });
  return join(out, (JSON.parse(printed) as Array<{ filename: string }>)[0]!.filename);
}

describe("tack skills add", () => {
  it("skills-add - a local folder with SKILL.md is one skill named after the folder; symbolic links are left out", async () => {
    const source = join(dir, "Code_Review");
    write(join(source, "SKILL.md"), skillText("Reviews code."));
    write(join(source, "checklist.md"), "- tests\n");
    symlinkSync("/etc/passwd", join(source, "passwd"));
    expect(await tackSkills("add", source)).toBe(0);
    expect(stdout).toBe([
      "✓ installed skill code-review in ~/.tack/skills/code-review",
      "  left out passwd (a symbolic link to /etc/passwd)",
      "  Every workspace sees it; `tack skills list` shows the catalog.",
      "",
    ].join("\n"));
    expect(tree(join(userSkills(), "code-review"))).toEqual(["SKILL.md", "checklist.md"]);
    expect(readdirSync(userSkills())).toEqual(["code-review"]);

    // Installed already: refused without --force, replaced with it; --scope workspace installs under ./.tack/skills.
    await expect(tackSkills("add", source)).rejects.toMatchObject({
      code: "cli.skill_exists", message: `skill "code-review" is installed already at ${join(userSkills(), "code-review")}; pass --force to replace it`,
    });
    write(join(source, "SKILL.md"), skillText("Reviews code, v2."));
    expect(await tackSkills("add", source, "--force")).toBe(0);
    expect(stdout).toContain("✓ replaced skill code-review in ~/.tack/skills/code-review");
    expect(readFileSync(join(userSkills(), "code-review", "SKILL.md"), "utf8")).toContain("v2");
    expect(await tackSkills("add", source, "--scope", "workspace", "--name", "review")).toBe(0);
    expect(existsSync(join(project, ".tack", "skills", "review", "SKILL.md"))).toBe(true);
  });

  it("skills-add - a git URL is cloned (--depth 1) with a spinner, and every skills/<name>/SKILL.md folder is installed without .git", async () => {
    const url = gitRepo("repo", {
      "README.md": "# skills\n",
      "skills/pdf-forms/SKILL.md": skillText("Fills PDF forms."),
      "skills/pdf-forms/scripts/fill.py": "print('fill')\n",
      "skills/renamed/SKILL.md": skillText("Named in its front matter.", "name: real-name\n"),
      "skills/notes.txt": "not a skill\n",
    });
    expect(await tackSkills("add", url)).toBe(0);
    expect(stderr).toBe(`cloning ${url}…\n✓ cloned ${url}\n`);
    expect(stdout).toContain("✓ installed skill pdf-forms in ~/.tack/skills/pdf-forms\n✓ installed skill real-name in ~/.tack/skills/real-name\n  Every workspace sees them;");
    expect(tree(userSkills())).toEqual(["pdf-forms/SKILL.md", "pdf-forms/scripts/fill.py", "real-name/SKILL.md"]);

    // A repository with SKILL.md at its root is one skill, the whole checkout but .git.
    const single = gitRepo("Single-Skill", { "SKILL.md": skillText("One skill."), "helper.sh": "echo hi\n" });
    expect(await tackSkills("add", single, "--scope", "workspace")).toBe(0);
    expect(tree(join(project, ".tack", "skills", "single-skill"))).toEqual(["SKILL.md", "helper.sh"]);

    // A clone that fails says what git said.
    await expect(tackSkills("add", `file://${join(dir, "missing.git")}`)).rejects.toMatchObject({
      code: "cli.skill_fetch", message: expect.stringMatching(new RegExp(`^git clone of file://${join(dir, "missing.git")} failed \\(exit code 128\\):\\n.*does not appear to be a git repository`)),
    });
    expect(stderr).toContain(`✗ git clone of file://${join(dir, "missing.git")} failed\n`);
  });

  it("skills-add - an npm tarball is unpacked through npm pack; a root SKILL.md is named after the package", async () => {
    const tarball = npmTarball({
      "package.json": JSON.stringify({ name: "@acme/Changelog-Skill", version: "1.0.0" }),
      "SKILL.md": skillText("Writes changelogs."),
      "template.md": "## Changes\n",
    });
    expect(await tackSkills("add", tarball)).toBe(0);
    expect(stderr).toBe(`fetching ${tarball} (npm pack)…\n✓ fetched ${tarball}\n`);
    expect(stdout).toContain("✓ installed skill changelog-skill in ~/.tack/skills/changelog-skill");
    expect(tree(join(userSkills(), "changelog-skill"))).toEqual(["SKILL.md", "package.json", "template.md"]);
  });

  it("skills-add - an invalid SKILL.md refuses the whole install, naming the file and the field", async () => {
    const url = gitRepo("mixed", {
      "skills/good/SKILL.md": skillText("Fine."),
      "skills/bad/SKILL.md": "---\nname: bad\n---\nno description\n",
    });
    await expect(tackSkills("add", url)).rejects.toMatchObject({
      code: "cli.skill_invalid", message: `nothing was installed: skills/bad/SKILL.md (from ${url}): field "description" is missing`,
    });
    expect(existsSync(userSkills())).toBe(false);
    // --name picks one skill of several; the invalid one is then not in the way.
    expect(await tackSkills("add", url, "--name", "good")).toBe(0);
    expect(readdirSync(userSkills())).toEqual(["good"]);
    await expect(tackSkills("add", url, "--name", "other")).rejects.toMatchObject({ code: "cli.skill_name", message: `${url} has no skill named "other"; it has bad (invalid), good` });

    const folder = join(dir, "folder");
    write(join(folder, "SKILL.md"), "no front matter\n");
    await expect(tackSkills("add", folder)).rejects.toMatchObject({ message: expect.stringMatching(/^nothing was installed: SKILL\.md \(from .*folder\): no front matter, so field "description" is missing/) });
    write(join(folder, "SKILL.md"), skillText("x", "name: fixed\n"));
    await expect(tackSkills("add", folder, "--name", "other")).rejects.toMatchObject({
      code: "cli.skill_name", message: `SKILL.md (from ${folder}) names itself "fixed" in its front matter, which is the name it gets; drop --name other, or use --name fixed`,
    });
    const empty = join(dir, "empty");
    write(join(empty, "README.md"), "nothing\n");
    await expect(tackSkills("add", empty)).rejects.toMatchObject({ code: "cli.skill_none", message: expect.stringContaining(`${empty} has no SKILL.md at its root and no skills/<name>/SKILL.md folder`) });
  });

  it("skills-add - the operator's skills.install forbids installs, or a kind of source, naming the setting before anything is fetched", async () => {
    const config = join(dir, "config.yaml");
    env.TACK_CONFIG = config;
    const folder = join(dir, "ok");
    write(join(folder, "SKILL.md"), skillText("ok"));
    writeFileSync(config, "skills:\n  install:\n    allow: false\n");
    await expect(tackSkills("add", folder)).rejects.toMatchObject({ code: "cli.skill_install_forbidden", message: `the operator does not allow installing skills: skills.install.allow is false in ${config}` });
    writeFileSync(config, "skills:\n  install:\n    sources: [path]\n");
    await expect(tackSkills("add", `file://${join(dir, "never-cloned.git")}`)).rejects.toMatchObject({
      message: `the operator does not allow installing skills from git repositories: skills.install.sources in ${config} is [path], without git`,
    });
    await expect(tackSkills("add", "some-skills-package")).rejects.toMatchObject({ message: expect.stringContaining("from npm packages: skills.install.sources") });
    expect(stderr).toBe("");
    expect(await tackSkills("add", folder)).toBe(0);
    writeFileSync(config, "skills:\n  install:\n    sources: [svn]\n");
    await expect(tackSkills("add", folder)).rejects.toMatchObject({ code: "config.invalid", message: `${config} is invalid: skills.install.sources.0: must be one of git, npm, path` });
  });

  it("skills-add - SOURCE is told apart: .tgz and package names are npm, URLs and user@host: are git, paths are folders", () => {
    const cwd = "/work";
    expect(classifySkillSource("./x-1.0.0.tgz", cwd)).toMatchObject({ kind: "npm", spec: "/work/x-1.0.0.tgz", defaultName: "x" });
    expect(classifySkillSource("@scope/pdf-skills@2.1.0", cwd)).toMatchObject({ kind: "npm", spec: "@scope/pdf-skills@2.1.0", defaultName: "pdf-skills" });
    expect(classifySkillSource("https://github.com/acme/Review-Skills.git", cwd)).toMatchObject({ kind: "git", defaultName: "review-skills" });
    expect(classifySkillSource("git@github.com:acme/skills.git", cwd)).toMatchObject({ kind: "git", defaultName: "skills" });
    expect(classifySkillSource("file:///srv/repo.git/", cwd)).toMatchObject({ kind: "git", defaultName: "repo" });
    expect(classifySkillSource("../my skill", cwd)).toMatchObject({ kind: "path", spec: "/my skill", defaultName: "my-skill" });
    expect(() => classifySkillSource("Not A Package!", cwd)).toThrow(/cannot tell what "Not A Package!" is: give a git URL/);
  });
});
