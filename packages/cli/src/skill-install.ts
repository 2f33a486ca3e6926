// `tack skills add`: fetch a source (git clone, npm pack, or a local folder), find its skills
// (SKILL.md at the root, or skills/<name>/SKILL.md folders), validate each with the skills
// service's own parser, and copy them into a skills root the skills service reads.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { lstat, mkdir, mkdtemp, readdir, readFile, rename, rm, stat, copyFile, readlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, isAbsolute, join, relative, resolve } from "node:path";
import { TackError } from "@tack/bus";
import type { OperatorConfig } from "@tack/config";
import { parseSkill, type ParsedSkill } from "@tack/skills-format";
import type { Scope } from "./args.js";

/** A kind of source, as the operator's `skills.install.sources` names it. */
export type SkillSourceKind = OperatorConfig["skills"]["install"]["sources"][number];

/** What SOURCE of `tack skills add` names. */
export interface SkillSource {
  readonly kind: SkillSourceKind;
  /** The URL, the package (or absolute .tgz path), or the absolute folder. */
  readonly spec: string;
  /** How messages name it. */
  readonly label: string;
  /** The name a root SKILL.md without a `name` field gets (normalised from the repository, package or folder name). */
  readonly defaultName: string;
}

/** The largest skill file accepted, as the skills service does. */
const MAX_SKILL_BYTES = 256 * 1024;
/** What is never copied into an installed skill. */
const NOT_COPIED = new Set([".git"]);
const NPM_PACKAGE = /^(?:@[a-z0-9][a-z0-9._~-]*\/)?[a-z0-9][a-z0-9._~-]*(?:@[A-Za-z0-9._~^<>=|*-]+)?$/;

/**
 * Tells what `source` is: a `.tgz`/`.tar.gz` file (npm), a URL or `user@host:path` (git), a path
 * (`/…`, `./…`, `../…`, or an existing directory), else an npm package name.
 */
export function classifySkillSource(source: string, cwd: string): SkillSource {
  if (/\.(tgz|tar\.gz)$/i.test(source) && !/^[a-z]+:\/\//i.test(source)) {
    const file = resolve(cwd, source);
    return { kind: "npm", spec: file, label: file, defaultName: skillName(basename(file).replace(/\.(tgz|tar\.gz)$/i, "").replace(/-\d+\.\d+\.\d+.*$/, "")) };
  }
  if (/^(https?|ssh|git|file):\/\//i.test(source) || /^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:/.test(source)) {
    const last = source.replace(/[/]+$/, "").split(/[/:]/).pop() ?? "";
    return { kind: "git", spec: source, label: source, defaultName: skillName(last.replace(/\.git$/i, "")) };
  }
  const path = resolve(cwd, source);
  if (/^(\/|\.\.?(\/|$)|~\/)/.test(source) || existsSync(path)) {
    return { kind: "path", spec: path, label: path, defaultName: skillName(basename(path)) };
  }
  if (NPM_PACKAGE.test(source)) {
    const name = source.replace(/^(@[^/]+\/)?([^@]+).*$/, "$2");
    return { kind: "npm", spec: source, label: `npm package ${source}`, defaultName: skillName(name) };
  }
  throw new TackError("cli.skill_source", `cannot tell what ${JSON.stringify(source)} is: give a git URL (https://…, file://…, git@host:repo), an npm package name or .tgz, or a folder (./path or /path)`);
}

/** A repository, package or folder name as a skill name: lowercase, other characters as single hyphens. */
function skillName(name: string): string {
  return name.toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 64).replace(/-+$/, "");
}

/** Refuses an install the operator's configuration forbids, naming the setting. */
export function checkInstallAllowed(source: SkillSource, config: OperatorConfig): void {
  const where = config.source ?? "the built-in operator configuration";
  if (!config.skills.install.allow) {
    throw new TackError("cli.skill_install_forbidden", `the operator does not allow installing skills: skills.install.allow is false in ${where}`);
  }
  if (!config.skills.install.sources.includes(source.kind)) {
    const kinds = { git: "git repositories", npm: "npm packages", path: "local folders" } as const;
    throw new TackError("cli.skill_install_forbidden", `the operator does not allow installing skills from ${kinds[source.kind]}: skills.install.sources in ${where} is [${config.skills.install.sources.join(", ")}], without ${source.kind}`);
  }
}

/** Progress while a source is fetched (a spinner on a terminal). */
export interface Progress {
  update(text: string): void;
  done(text: string): void;
  fail(text: string): void;
}

/** A fetched source: the folder to look in, and a cleanup for whatever was fetched. */
export interface FetchedSource {
  readonly root: string;
  readonly defaultName: string;
  cleanup(): Promise<void>;
}

/**
 * Brings the source onto this machine: `git clone --depth 1` or `npm pack` (scripts off) and
 * unpacking into a temporary folder; a local folder is used where it is.
 */
export async function fetchSkillSource(source: SkillSource, progress: Progress): Promise<FetchedSource> {
  if (source.kind === "path") {
    const info = await stat(source.spec).catch(() => undefined);
    if (!info?.isDirectory()) throw new TackError("cli.skill_source", `${source.spec} is not a folder; give a folder holding SKILL.md or skills/<name>/SKILL.md`);
    return { root: source.spec, defaultName: source.defaultName, cleanup: async () => undefined };
  }
  const temporary = await mkdtemp(join(tmpdir(), "tack-skill-"));
  const cleanup = () => rm(temporary, { recursive: true, force: true });
  try {
    if (source.kind === "git") {
      const root = join(temporary, "repo");
      progress.update(`cloning ${source.spec}`);
      await run("git", ["clone", "--depth", "1", "--quiet", "--", source.spec, root], temporary, `git clone of ${source.spec}`, progress);
      progress.done(`cloned ${source.spec}`);
      return { root, defaultName: source.defaultName, cleanup };
    }
    progress.update(`fetching ${source.label} (npm pack)`);
    // A local tarball needs no registry: --offline keeps npm from asking one anything.
    const offline = isAbsolute(source.spec) ? ["--offline"] : [];
    const packed = await run("npm", ["pack", source.spec, "--pack-destination", temporary, "--json", "--ignore-scripts", "--loglevel=error", ...offline], temporary, `npm pack ${source.spec}`, progress);
    let filename: string;
    try {
      filename = (JSON.parse(packed) as Array<{ filename: string }>)[0]!.filename;
    } catch (error) {
      progress.fail(`npm pack ${source.spec} failed`);
      throw new TackError("cli.skill_fetch", `npm pack ${source.spec} printed no package file (${packed.trim().slice(0, 200) || "no output"})`, { cause: error });
    }
    const unpacked = join(temporary, "unpacked");
    await mkdir(unpacked);
    // npm tarballs hold everything under package/; tar refuses absolute names and `..`.
    await run("tar", ["-xzf", join(temporary, basename(filename)), "-C", unpacked, "--no-same-owner", "--no-same-permissions"], temporary, `unpacking ${filename}`, progress);
    progress.done(`fetched ${source.label}`);
    const root = join(unpacked, "package");
    // The package's own name is the better default for a root SKILL.md than the tarball's.
    const name = await readFile(join(root, "package.json"), "utf8").then((text) => (JSON.parse(text) as { name?: unknown }).name, () => undefined);
    return { root, defaultName: typeof name === "string" ? skillName(name.replace(/^@[^/]+\//, "")) || source.defaultName : source.defaultName, cleanup };
  } catch (error) {
    await cleanup();
    throw error;
  }
}

/** Runs a command to completion; a failure ends the progress line and says what the command printed. */
function run(command: string, args: string[], cwd: string, what: string, progress: Progress): Promise<string> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(command, args, { cwd, stdio: ["ignore", "pipe", "pipe"], env: {
      ...process.env,
      // Never wait for a password or a host-key question nobody sees: fail and say what git said.
      GIT_TERMINAL_PROMPT: "0", GIT_SSH_COMMAND: process.env.GIT_SSH_COMMAND ?? "ssh -o BatchMode=yes",
      npm_config_update_notifier: "false", npm_config_fund: "false",
    } });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
    child.on("error", (error: NodeJS.ErrnoException) => {
      progress.fail(`${what} failed`);
      reject(new TackError("cli.skill_fetch", error.code === "ENOENT" ? `${what} failed: ${command} is not installed (not found on PATH)` : `${what} failed: ${error.message}`, { cause: error }));
    });
    child.on("close", (code, signal) => {
      if (code === 0) return resolvePromise(stdout);
      progress.fail(`${what} failed`);
      const said = stderr.trim().split("\n").slice(-5).join("\n") || stdout.trim().split("\n").slice(-5).join("\n");
      reject(new TackError("cli.skill_fetch", `${what} failed (${signal ? `killed by ${signal}` : `exit code ${code}`})${said ? `:\n${said}` : ""}`));
    });
  });
}

/** One skill found in a source, validated. */
export interface FoundSkill {
  /** The folder that is copied. */
  readonly dir: string;
  /** Its SKILL.md relative to the source, for messages. */
  readonly file: string;
  readonly skill: ParsedSkill;
}

/**
 * The skills of a fetched source: SKILL.md at its root (the whole source is that skill) or the
 * folders skills/<name>/ holding a SKILL.md. Every SKILL.md is checked with the skills service's
 * parser; any invalid one (of those selected by `only`) refuses the install, naming file and field.
 */
export async function findSkills(fetched: FetchedSource, label: string, only: string | undefined): Promise<FoundSkill[]> {
  const root = fetched.root;
  const candidates: Array<{ dir: string; fallback: string }> = [];
  if (await isFile(join(root, "SKILL.md"))) {
    candidates.push({ dir: root, fallback: only ?? fetched.defaultName });
  } else if ((await lstat(join(root, "skills")).catch(() => undefined))?.isDirectory()) {
    for (const entry of (await readdir(join(root, "skills"), { withFileTypes: true })).sort((a, b) => a.name.localeCompare(b.name))) {
      if (entry.isDirectory() && !entry.name.startsWith(".") && (await isFile(join(root, "skills", entry.name, "SKILL.md")))) {
        candidates.push({ dir: join(root, "skills", entry.name), fallback: entry.name });
      }
    }
  }
  if (candidates.length === 0) {
    throw new TackError("cli.skill_none", `${label} has no SKILL.md at its root and no skills/<name>/SKILL.md folder; a skill is a folder whose SKILL.md starts with front matter holding at least "description: …"`);
  }
  const parsed = await Promise.all(candidates.map(async ({ dir, fallback }) => {
    const file = relative(root, join(dir, "SKILL.md"));
    const where = `${file} (from ${label})`;
    try {
      const info = await lstat(join(dir, "SKILL.md"));
      if (info.size > MAX_SKILL_BYTES) throw new Error(`${where}: the file is ${Math.ceil(info.size / 1024)} KB; a skill file may be at most ${MAX_SKILL_BYTES / 1024} KB`);
      const skill = parseSkill(where, await readFile(join(dir, "SKILL.md"), "utf8"), fallback);
      return { dir, file, fallback, skill, problem: undefined };
    } catch (error) {
      return { dir, file, fallback, skill: undefined, problem: (error as Error).message };
    }
  }));
  let selected = parsed;
  if (only !== undefined) {
    selected = parsed.filter((p) => (p.skill ? p.skill.name === only : p.fallback === only));
    if (selected.length === 0) {
      if (candidates.length === 1 && parsed[0]!.skill) {
        throw new TackError("cli.skill_name", `${parsed[0]!.file} (from ${label}) names itself "${parsed[0]!.skill.name}" in its front matter, which is the name it gets; drop --name ${only}, or use --name ${parsed[0]!.skill.name}`);
      }
      throw new TackError("cli.skill_name", `${label} has no skill named "${only}"; it has ${parsed.map((p) => p.skill?.name ?? `${p.fallback} (invalid)`).join(", ")}`);
    }
  }
  const problems = selected.filter((p) => p.problem !== undefined).map((p) => p.problem!);
  if (problems.length > 0) {
    throw new TackError("cli.skill_invalid", `nothing was installed: ${problems.length === 1 ? problems[0] : `${problems.length} skill files are invalid:\n${problems.map((p) => `  - ${p}`).join("\n")}`}`);
  }
  const found = selected.map((p) => ({ dir: p.dir, file: p.file, skill: p.skill! }));
  const names = new Map<string, string>();
  for (const { file, skill } of found) {
    const first = names.get(skill.name);
    if (first) throw new TackError("cli.skill_invalid", `nothing was installed: ${first} and ${file} (from ${label}) are both named "${skill.name}"; install one of them with --name, after renaming the other`);
    names.set(skill.name, file);
  }
  return found;
}

async function isFile(path: string): Promise<boolean> {
  return (await lstat(path).catch(() => undefined))?.isFile() === true;
}

/** The skills root of a scope: `~/.tack/skills` or `<cwd>/.tack/skills`, both read by the skills service. */
export function skillsRoot(scope: Scope, home: string, cwd: string): string {
  return scope === "user" ? join(home, ".tack", "skills") : join(cwd, ".tack", "skills");
}

/** What an install did. */
export interface InstalledSkill {
  readonly name: string;
  readonly path: string;
  readonly replaced: boolean;
  /** Symbolic links and special files that were left out. */
  readonly skipped: string[];
}

/**
 * Copies each skill's folder to `<root>/<name>/` (through a temporary folder and a rename).
 * Refuses, before copying anything, when one is installed already unless `force`; symbolic
 * links and special files are left out (a link could point at any file of this machine).
 */
export async function installSkills(found: readonly FoundSkill[], root: string, force: boolean): Promise<InstalledSkill[]> {
  for (const { skill, dir } of found) {
    const target = join(root, skill.name);
    if (resolve(dir) === target) throw new TackError("cli.skill_exists", `${dir} is where skill "${skill.name}" would be installed; it is installed already`);
    if (!force && existsSync(target)) {
      throw new TackError("cli.skill_exists", `skill "${skill.name}" is installed already at ${target}; pass --force to replace it${found.length > 1 ? " (nothing was installed)" : ""}`);
    }
  }
  await mkdir(root, { recursive: true, mode: 0o755 });
  const installed: InstalledSkill[] = [];
  for (const { skill, dir } of found) {
    const target = join(root, skill.name);
    const staging = join(root, `.${skill.name}.${process.pid}.${randomBytes(4).toString("hex")}.tmp`);
    const skipped: string[] = [];
    try {
      await copyTree(dir, staging, "", skipped);
      const replaced = existsSync(target);
      if (replaced) await rm(target, { recursive: true, force: true });
      await rename(staging, target);
      installed.push({ name: skill.name, path: target, replaced, skipped });
    } catch (error) {
      await rm(staging, { recursive: true, force: true });
      throw new TackError("cli.skill_install", `cannot install skill "${skill.name}" into ${target} (${(error as NodeJS.ErrnoException).code ?? (error as Error).message}); check that ${root} is writable`, { cause: error });
    }
  }
  return installed;
}

async function copyTree(from: string, to: string, rel: string, skipped: string[]): Promise<void> {
  await mkdir(to, { recursive: true });
  for (const entry of await readdir(from, { withFileTypes: true })) {
    const path = rel ? `${rel}/${entry.name}` : entry.name;
    if (NOT_COPIED.has(entry.name) && rel === "") continue;
    if (entry.isDirectory()) await copyTree(join(from, entry.name), join(to, entry.name), path, skipped);
    else if (entry.isFile()) await copyFile(join(from, entry.name), join(to, entry.name));
    else if (entry.isSymbolicLink()) skipped.push(`${path} (a symbolic link to ${await readlink(join(from, entry.name)).catch(() => "?")})`);
    else skipped.push(`${path} (not a regular file)`);
  }
}

/** `dir` when it is an existing directory (the workspace of `--workspace`), else an error saying so. */
export async function existingWorkspace(dir: string): Promise<string> {
  if (!(await stat(dir).catch(() => undefined))?.isDirectory()) {
    throw new TackError("cli.bad_workspace", `the workspace ${dir} is not an existing directory; pass --workspace DIR with a project directory (default: the current directory)`);
  }
  return dir;
}

/** `path` shown with `~` for the home directory. */
export function tildePath(path: string, home: string): string {
  const rel = relative(home, path);
  return !rel.startsWith("..") && !isAbsolute(rel) ? (rel === "" ? "~" : `~/${rel}`) : path;
}
