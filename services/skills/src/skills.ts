// Skill discovery across the roots, the catalog with its digest, body loading with the
// invoker checks, and watching of the roots.
import { createHash } from "node:crypto";
import { watch, type FSWatcher } from "node:fs";
import { open, readdir, realpath, stat } from "node:fs/promises";
import { homedir } from "node:os";
import { isAbsolute, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { TackError } from "@tack/bus";
import { capDescription, parseSkill, SkillProblem, type ParsedSkill } from "@tack/skills-format";

/** Who invokes a skill: the model through the skill tool, or the user with /name. */
export type Invoker = "model" | "user";

/** Where a skill was found: the root's label and the skill file. */
export interface SkillSource {
  readonly root: string;
  readonly path: string;
}

/** One catalog entry; the key order is the canonical one the digest is taken over. */
export interface CatalogEntry {
  readonly name: string;
  readonly description: string;
  readonly source: SkillSource;
  readonly modelInvocable: boolean;
  readonly userInvocable: boolean;
}

/** The skills a workspace sees. */
export interface Catalog {
  /** Sorted by name; a name in a higher root hides the same name lower. */
  readonly entries: CatalogEntry[];
  /** sha256 (hex) of the entries' canonical JSON. */
  readonly digest: string;
  /** Skills dropped because they are invalid or duplicated within a root, one line each. */
  readonly warnings: string[];
}

/** A loaded skill. */
export interface LoadedSkill {
  readonly name: string;
  /** The file without its front matter. */
  readonly body: string;
  readonly path: string;
  /** Files next to SKILL.md, relative to its folder, sorted; empty for a single-file skill. */
  readonly files: string[];
  readonly filesTruncated: boolean;
  readonly source: SkillSource;
}

/** How to find the skills. */
export interface SkillsOptions {
  /** Home directory of the user roots (default `os.homedir()`). */
  home?: string;
  /** Operator roots, highest precedence first (default: env TACK_SKILLS_ROOTS, colon separated). */
  operatorRoots?: readonly string[];
  /** The bundled skills (default services/skills/bundled). */
  bundledRoot?: string;
  /** Quiet time after a change under a root before it is read again (default 200 ms). */
  debounceMs?: number;
  /** Called after a watched root was read again because of a change (not on the first read). */
  onChange?: (root: string) => void;
}

/** Workspace roots, highest first, relative to the workspace. */
const WORKSPACE_ROOTS = [".tack/skills", ".agents/skills", ".claude/skills"];
/** User roots, highest first, relative to the home directory. */
const USER_ROOTS = [".tack/skills", ".agents/skills", ".claude/skills"];
/** A skill file larger than this is refused (it is meant to be read into a prompt). */
const MAX_SKILL_BYTES = 256 * 1024;
/** Most files listed next to a SKILL.md. */
const MAX_FILES = 200;
const BUNDLED = fileURLToPath(new URL("../bundled", import.meta.url));

interface Skill extends ParsedSkill {
  readonly path: string;
  /** Folder of a SKILL.md skill; undefined for a single-file skill. */
  readonly folder: string | undefined;
}

interface Scan {
  readonly skills: Skill[];
  readonly warnings: string[];
}

/** One root as the registry keeps it: its last reading and its watcher. */
interface Root {
  readonly path: string;
  /** Skills in a workspace root must stay inside the workspace (the model can write there; no symlink may lead it out). */
  readonly confine: string | undefined;
  scan: ScanResult | undefined;
  /** The reading in flight; a later one supersedes it. */
  pending: Promise<ScanResult> | undefined;
  version: number;
  watcher: FSWatcher | undefined;
  timer: NodeJS.Timeout | undefined;
}

interface RootRef {
  readonly label: string;
  readonly root: Root;
}

/** Operator roots from TACK_SKILLS_ROOTS (colon separated; empty entries skipped). */
export function operatorRootsFromEnv(env: NodeJS.ProcessEnv = process.env): string[] {
  const roots = (env.TACK_SKILLS_ROOTS ?? "").split(":").filter((entry) => entry.trim() !== "");
  for (const root of roots) {
    if (!isAbsolute(root)) throw new TackError("skills.invalid_options", `TACK_SKILLS_ROOTS entry ${JSON.stringify(root)} is not an absolute path; list absolute directories separated by ':'`);
  }
  return roots;
}

/**
 * The skills of every workspace asked about. Roots are read once and then kept current by
 * watching them (fs.watch, recursive, debounced) and by `invalidate`; a root that does not exist
 * is looked for again at each catalog request (a stat), and watched from the moment it appears.
 */
export class Skills {
  readonly #home: string;
  readonly #operator: string[];
  readonly #bundled: string;
  readonly #runtime: string[] = [];
  readonly #debounceMs: number;
  readonly #onChange: ((root: string) => void) | undefined;
  readonly #roots = new Map<string, Root>();
  #closed = false;

  constructor(options: SkillsOptions = {}) {
    this.#home = resolve(options.home ?? homedir());
    const operator = options.operatorRoots ?? operatorRootsFromEnv();
    for (const root of operator) {
      if (!isAbsolute(root)) throw new TackError("skills.invalid_options", `operator skills root ${JSON.stringify(root)} is not an absolute path; give absolute directories`);
    }
    this.#operator = operator.map((root) => resolve(root));
    this.#bundled = resolve(options.bundledRoot ?? BUNDLED);
    this.#debounceMs = options.debounceMs ?? 200;
    this.#onChange = options.onChange;
  }

  /** Adds a root of runtime-registered skills (below the workspace roots, above the operator's); earlier additions win. */
  addRoot(path: string): void {
    if (!isAbsolute(path)) throw new TackError("skills.invalid_root", `skills root ${JSON.stringify(path)} is not an absolute path; give an absolute directory`);
    const root = resolve(path);
    if (!this.#runtime.includes(root)) this.#runtime.push(root);
  }

  /** The catalog of `workspace` (an absolute host path). */
  async catalog(workspace: string): Promise<Catalog> {
    const refs = this.#refs(workspace);
    const scans = await Promise.all(refs.map((ref) => this.#current(ref.root)));
    return merge(refs, scans);
  }

  /**
   * Reads skill `name` for `by`, from the files as they are now (every root of the workspace is
   * read again, so a skill deleted or changed since the last catalog is seen as such).
   */
  async load(workspace: string, name: string, by: Invoker): Promise<LoadedSkill> {
    if (by !== "model" && by !== "user") throw new TackError("skills.invalid_request", `by is ${JSON.stringify(by)}; say who invokes the skill: "model" or "user"`);
    const refs = this.#refs(workspace);
    const before = refs.map((ref) => ref.root.scan);
    const scans = await Promise.all(refs.map((ref) => this.#refresh(ref.root)));
    for (const [i, ref] of refs.entries()) {
      const skill = scans[i]!.skills.find((s) => s.name === name);
      if (!skill) continue;
      const source = { root: ref.label, path: skill.path };
      if (by === "model" && !skill.modelInvocable) {
        throw new TackError("skills.model_not_allowed", `skill "${name}" sets disable-model-invocation: true (${skill.path}), so only the user can run it, by typing /${name}`, { details: { name, path: skill.path } });
      }
      if (by === "user" && !skill.userInvocable) {
        throw new TackError("skills.user_not_allowed", `skill "${name}" sets user-invocable: false (${skill.path}), so it cannot be run with /${name}; the model loads it when the task calls for it`, { details: { name, path: skill.path } });
      }
      const { files, truncated } = skill.folder ? await listFiles(skill.folder, skill.path) : { files: [], truncated: false };
      return { name, body: skill.body, path: skill.path, files, filesTruncated: truncated, source };
    }
    const was = before.flatMap((scan) => scan?.skills ?? []).find((s) => s.name === name);
    if (was) {
      const problem = scans.flatMap((scan) => scan.warnings).find((w) => w.startsWith(`${was.path}:`));
      throw new TackError("skills.gone", problem
        ? `skill "${name}" can no longer be loaded: ${problem}`
        : `skill "${name}" is gone: ${was.path} was deleted or renamed since the catalog was made; ask for the catalog again`, { details: { name, path: was.path } });
    }
    const known = [...new Set(scans.flatMap((scan) => scan.skills.map((s) => s.name)))];
    const close = closeMatches(name, known);
    throw new TackError("skills.unknown", `no skill named ${JSON.stringify(name)}${close.length ? `; did you mean ${close.map((c) => JSON.stringify(c)).join(" or ")}?` : known.length ? `; the skills are ${known.sort().slice(0, 20).join(", ")}` : "; this workspace sees no skills"}`, { details: { name } });
  }

  /**
   * Reads again, before resolving, every known root that holds `path` or lies under it (a file
   * written or deleted there, or a folder removed with its roots). Resolves true when there was one.
   * With `workspace`, that workspace's roots count as known even before its first catalog.
   */
  async invalidate(path: string, workspace?: string): Promise<boolean> {
    if (!isAbsolute(path)) throw new TackError("skills.invalid_request", `path ${JSON.stringify(path)} is not absolute; give the host path of the file that was written`);
    if (workspace) this.#refs(workspace);
    const target = resolve(path);
    const hit = [...this.#roots.values()].filter((root) => within(target, root.path) || within(root.path, target));
    await Promise.all(hit.map((root) => this.#refresh(root)));
    return hit.length > 0;
  }

  /** Stops every watcher; the registry answers no more. */
  close(): void {
    this.#closed = true;
    for (const root of this.#roots.values()) {
      clearTimeout(root.timer);
      root.watcher?.close();
      root.watcher = undefined;
    }
  }

  #refs(workspace: string): RootRef[] {
    if (this.#closed) throw new TackError("skills.closed", "the skills registry is closed; start the skills service again");
    if (!workspace || !isAbsolute(workspace)) throw new TackError("skills.invalid_request", `workspace ${JSON.stringify(workspace)} is not an absolute path; give the session's host workspace path`);
    const ws = resolve(workspace);
    return [
      ...WORKSPACE_ROOTS.map((r) => ({ label: `workspace:${r}`, root: this.#root(join(ws, r), ws) })),
      ...this.#runtime.map((r) => ({ label: "runtime", root: this.#root(r) })),
      ...this.#operator.map((r) => ({ label: "operator", root: this.#root(r) })),
      ...USER_ROOTS.map((r) => ({ label: `user:${r}`, root: this.#root(join(this.#home, r)) })),
      { label: "bundled", root: this.#root(this.#bundled) },
    ];
  }

  #root(path: string, confine?: string): Root {
    let root = this.#roots.get(path);
    if (!root) {
      root = { path, confine, scan: undefined, pending: undefined, version: 0, watcher: undefined, timer: undefined };
      this.#roots.set(path, root);
    }
    return root;
  }

  /** The root's reading: the one in flight, the kept one while it is watched, else a new one (a missing root is looked for again). */
  async #current(root: Root): Promise<Scan> {
    if (root.pending) return root.pending;
    if (root.scan && root.watcher) return root.scan;
    return this.#refresh(root);
  }

  /** Reads the root now; the latest reading started wins over an older one that ends later. */
  #refresh(root: Root): Promise<ScanResult> {
    const version = ++root.version;
    const pending = scanRoot(root).then((scan) => {
      if (root.version === version) {
        root.scan = scan;
        root.pending = undefined;
        this.#watch(root, scan);
      }
      return scan;
    }, (error: unknown) => {
      if (root.version === version) root.pending = undefined;
      throw error;
    });
    root.pending = pending;
    return pending;
  }

  #watch(root: Root, scan: ScanResult): void {
    if (!scan.exists || this.#closed) {
      root.watcher?.close();
      root.watcher = undefined;
      return;
    }
    if (root.watcher) return;
    try {
      root.watcher = watch(root.path, { recursive: true, persistent: false }, () => this.#changed(root));
      // The root itself removed (or unreadable): read it again, which drops the watcher if it is gone.
      root.watcher.on("error", () => {
        root.watcher?.close();
        root.watcher = undefined;
        this.#changed(root);
      });
    } catch (error) {
      // No watcher (inotify limit, say): the root is read again at each catalog request instead.
      root.watcher = undefined;
      scan.warnings.push(`${root.path}: cannot watch for changes (${(error as Error).message}); it is read again at each catalog request`);
    }
  }

  #changed(root: Root): void {
    if (this.#closed) return;
    clearTimeout(root.timer);
    root.timer = setTimeout(() => {
      root.timer = undefined;
      if (this.#closed) return;
      void this.#refresh(root).then(() => this.#onChange?.(root.path), () => undefined);
    }, this.#debounceMs);
    root.timer.unref();
  }
}

interface ScanResult extends Scan {
  readonly exists: boolean;
}

/** Reads the skills directly inside a root: `<folder>/SKILL.md` and `<name>.md`, nothing deeper. */
async function scanRoot(root: Root): Promise<ScanResult> {
  const skills: Skill[] = [];
  const warnings: string[] = [];
  let names: string[];
  try {
    if (!(await stat(root.path)).isDirectory()) return { skills, warnings, exists: false };
    if (root.confine && !(await confined(root.path, root.confine))) {
      warnings.push(`${root.path}: leads outside the workspace (a symlink); skills there are ignored, make it a real directory inside the workspace`);
      return { skills, warnings, exists: true };
    }
    names = (await readdir(root.path)).sort();
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT" || (error as NodeJS.ErrnoException).code === "ENOTDIR") return { skills, warnings, exists: false };
    warnings.push(`${root.path}: cannot read the skills root (${(error as Error).message}); check its permissions`);
    return { skills, warnings, exists: true };
  }
  for (const entry of names) {
    if (entry.startsWith(".")) continue;
    const full = join(root.path, entry);
    let info;
    try {
      info = await stat(full);
    } catch {
      continue; // A dangling symlink or a file removed meanwhile.
    }
    let path: string;
    let fallback: string;
    let folder: string | undefined;
    if (info.isDirectory()) {
      path = join(full, "SKILL.md");
      fallback = entry;
      folder = full;
    } else if (info.isFile() && entry.endsWith(".md")) {
      path = full;
      fallback = entry.slice(0, -".md".length);
    } else {
      continue;
    }
    let text: string | undefined;
    try {
      text = await readSkillFile(path, root.confine);
    } catch (error) {
      warnings.push(error instanceof SkillProblem ? error.message : `${path}: cannot be read (${(error as Error).message}); check its permissions`);
      continue;
    }
    if (text === undefined) continue; // A folder without SKILL.md is no skill.
    try {
      const parsed = parseSkill(path, text, fallback);
      const twin = skills.find((s) => s.name === parsed.name);
      if (twin) {
        warnings.push(`${path}: field "name" is "${parsed.name}", which ${twin.path} already defines in the same root; this one is ignored, rename one of them`);
        continue;
      }
      skills.push({ ...parsed, path, folder });
    } catch (error) {
      if (!(error instanceof SkillProblem)) throw error;
      warnings.push(error.message);
    }
  }
  return { skills, warnings, exists: true };
}

/** The text of a skill file, undefined when there is none; refuses non-files, big files and files outside `confine`. */
async function readSkillFile(path: string, confine: string | undefined): Promise<string | undefined> {
  let info;
  try {
    info = await stat(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT" || (error as NodeJS.ErrnoException).code === "ENOTDIR") return undefined;
    throw error;
  }
  if (!info.isFile()) throw new SkillProblem(`${path}: is not a regular file; make it a Markdown file`);
  if (info.size > MAX_SKILL_BYTES) throw new SkillProblem(`${path}: is ${info.size} bytes, more than the ${MAX_SKILL_BYTES} a skill may have; move the details into files next to it`);
  if (confine && !(await confined(path, confine))) throw new SkillProblem(`${path}: leads outside the workspace (a symlink); copy the skill into the workspace instead`);
  const handle = await open(path, "r");
  try {
    return await handle.readFile("utf8");
  } finally {
    await handle.close();
  }
}

async function confined(path: string, confine: string): Promise<boolean> {
  const [real, base] = await Promise.all([realpath(path), realpath(confine)]);
  return within(real, base) && real !== base;
}

/** Whether `path` is `base` or lies under it. */
function within(path: string, base: string): boolean {
  return path === base || path.startsWith(base.endsWith(sep) ? base : base + sep);
}

/** The files under a skill folder (not SKILL.md), relative and sorted; symlinks are listed, not followed. */
async function listFiles(folder: string, skillPath: string): Promise<{ files: string[]; truncated: boolean }> {
  const files: string[] = [];
  let truncated = false;
  const walk = async (dir: string): Promise<void> => {
    let entries;
    try {
      entries = await readdir(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const entry of entries.sort((a, b) => a.name.localeCompare(b.name))) {
      const full = join(dir, entry.name);
      if (entry.isDirectory()) {
        if (!entry.name.startsWith(".")) await walk(full);
      } else if (full !== skillPath) {
        if (files.length >= MAX_FILES) {
          truncated = true;
          return;
        }
        files.push(relative(folder, full));
      }
      if (truncated) return;
    }
  };
  await walk(folder);
  return { files: files.sort(), truncated };
}

function merge(refs: RootRef[], scans: Scan[]): Catalog {
  const byName = new Map<string, CatalogEntry>();
  const warnings: string[] = [];
  for (const [i, ref] of refs.entries()) {
    const scan = scans[i]!;
    warnings.push(...scan.warnings);
    for (const skill of scan.skills) {
      if (byName.has(skill.name)) continue; // Hidden by a higher root.
      byName.set(skill.name, {
        name: skill.name,
        description: capDescription(skill.description),
        source: { root: ref.label, path: skill.path },
        modelInvocable: skill.modelInvocable,
        userInvocable: skill.userInvocable,
      });
    }
  }
  const entries = [...byName.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  return { entries, digest: catalogDigest(entries), warnings };
}

/** sha256 (hex) over the entries as JSON with fixed key order. */
export function catalogDigest(entries: readonly CatalogEntry[]): string {
  const canonical = entries.map((e) => ({
    name: e.name,
    description: e.description,
    source: { root: e.source.root, path: e.source.path },
    modelInvocable: e.modelInvocable,
    userInvocable: e.userInvocable,
  }));
  return createHash("sha256").update(JSON.stringify(canonical)).digest("hex");
}

/** Up to three known names close to `name` (edit distance ≤ 2, or one containing the other). */
function closeMatches(name: string, known: string[]): string[] {
  return known
    .map((k) => ({ k, d: k.includes(name) || name.includes(k) ? 0.5 : distance(name, k) }))
    .filter((m) => m.d <= 2)
    .sort((a, b) => a.d - b.d || a.k.localeCompare(b.k))
    .slice(0, 3)
    .map((m) => m.k);
}

function distance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) row[j] = Math.min(prev[j]! + 1, row[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    prev = row;
  }
  return prev[b.length]!;
}
