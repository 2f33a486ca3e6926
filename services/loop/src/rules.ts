// Rules files (AGENTS.md, CLAUDE.md): read in the session's sandbox, logged as `rules/loaded` when they change.
import { createHash } from "node:crypto";
import { open } from "node:fs/promises";
import { posix } from "node:path";
import { TackError, ToolsRpc, type Bus } from "@tack/bus";
import { WORKSPACE } from "@tack/config";
import { draft, type Draft, type Projection, type SessionState } from "@tack/log";
import { Surface_Kind, type Event, type RulesFile } from "@tack/proto";
import type { Logger } from "@tack/telemetry";

/** Each file reaches the model cut to this many bytes (a note says where the whole file is). */
export const RULES_CAP_BYTES = 16 * 1024;
/** Folders whose rules files one check reads at most (the tools service takes 64 per request). */
const MAX_DIRS = 64;
const SOURCE = "loop";
/** Arguments of a tool call that name a file or folder in the workspace (read/write/edit/glob/grep/lsp `path`, bash `workdir`). */
const PATH_ARGUMENTS = ["path", "workdir"] as const;

/** One rules file as found, before dedupe and cap: its head, whole size and whole-file hash, or why it could not be read. */
export interface RulesSource {
  /** What the model and a UI see: `AGENTS.md`, `src/api/CLAUDE.md`, `operator:/etc/tack/AGENTS.md`. */
  readonly label: string;
  /** Where the whole file is, for the note on a cut one. */
  readonly where: string;
  readonly head: Uint8Array;
  readonly bytes: number;
  readonly sha256: string;
  /** Set when the file exists but could not be read. */
  readonly error: string;
}

/** Files for `rules/loaded` and the warnings about the ones left out. */
export interface BuiltRules {
  readonly files: RulesFile[];
  readonly warnings: { label: string; message: string }[];
}

/**
 * The rules the model reads from `sources` (in order): unreadable or binary files become
 * warnings; a content seen before counts once (the first label stays); each is cut to `capBytes`
 * at a character boundary, with a note saying where the whole file is.
 */
export function buildRules(sources: readonly RulesSource[], capBytes = RULES_CAP_BYTES): BuiltRules {
  const files: RulesFile[] = [];
  const warnings: { label: string; message: string }[] = [];
  const seen = new Set<string>();
  for (const s of sources) {
    if (s.error) {
      warnings.push({ label: s.label, message: `rules file ${s.where} ${s.error}; it was left out (fix or remove it)` });
      continue;
    }
    if (seen.has(s.sha256)) continue;
    const text = textHead(s.head, Math.min(capBytes, s.head.length), s.bytes > s.head.length);
    if (text === undefined) {
      warnings.push({ label: s.label, message: `rules file ${s.where} is not UTF-8 text (binary?); it was left out (rules files must be text)` });
      continue;
    }
    // An empty file says nothing; it is not worth a block.
    if (text.trim() === "") continue;
    seen.add(s.sha256);
    const truncated = s.bytes > Buffer.byteLength(text);
    const content = truncated
      ? `${text}\n\n[... cut at ${Buffer.byteLength(text)} of ${s.bytes} bytes; the whole file is ${s.where} ...]`
      : text;
    files.push({ label: s.label, content, sha256: s.sha256, truncated });
  }
  return { files, warnings };
}

/**
 * The first `end` bytes of `head` as text, ending on a whole character when more follows
 * (`more`, or bytes of `head` past `end`); undefined for a NUL byte or bytes that are not UTF-8.
 */
function textHead(head: Uint8Array, end: number, more: boolean): string | undefined {
  const cut = more || end < head.length;
  for (let back = 0; back <= (cut ? 3 : 0) && back <= end; back++) {
    const bytes = head.subarray(0, end - back);
    if (bytes.includes(0)) return undefined;
    try {
      return strictUtf8.decode(bytes);
    } catch {
      // a character split at the cut: try a byte shorter
    }
  }
  return undefined;
}

const strictUtf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** True when both lists name the same files with the same contents, in the same order. */
export function sameRules(a: readonly RulesFile[], b: readonly RulesFile[]): boolean {
  return a.length === b.length && a.every((f, i) => f.label === b[i]!.label && f.sha256 === b[i]!.sha256);
}

/**
 * The workspace folders whose rules files apply: the root, and every folder on the way to a path
 * a tool call of the log named (the path itself too unless the tool takes only files: `path_is_file`
 * in the tools the log's request headers list; a glob or grep path, a workdir, may be a folder itself).
 * Root first, then by depth and name; at most 64.
 */
export function touchedDirs(events: readonly Event[]): string[] {
  const fileTools = new Set<string>();
  for (const e of events) {
    if (e.payload?.$case === "requestHeader") for (const tool of e.payload.value.tools) if (tool.pathIsFile) fileTools.add(tool.name);
  }
  const dirs = new Set<string>(["."]);
  const add = (tool: string, args: string) => {
    let parsed: unknown;
    try {
      parsed = JSON.parse(args);
    } catch {
      return;
    }
    if (!parsed || typeof parsed !== "object") return;
    for (const key of PATH_ARGUMENTS) {
      const value = (parsed as Record<string, unknown>)[key];
      if (typeof value !== "string" || value.includes("\0")) continue;
      const absolute = posix.resolve(WORKSPACE, value);
      if (!absolute.startsWith(`${WORKSPACE}/`)) continue;
      const named = posix.relative(WORKSPACE, absolute);
      const first = key === "path" && fileTools.has(tool) ? posix.dirname(named) : named;
      for (let dir = first; dir !== "." && dir !== ""; dir = posix.dirname(dir)) dirs.add(dir);
    }
  };
  for (const e of events) {
    const p = e.payload;
    if (p?.$case === "assistantMessage") for (const call of p.value.toolCalls) add(call.name, call.arguments);
    else if (p?.$case === "toolInner") add(p.value.name, p.value.arguments);
  }
  const depth = (d: string) => (d === "." ? 0 : d.split("/").length);
  return [...dirs].sort((a, b) => depth(a) - depth(b) || (a < b ? -1 : a > b ? 1 : 0)).slice(0, MAX_DIRS);
}

/** The last `rules/loaded` of the log and its seq. */
export function lastRules(events: readonly Event[]): { seq: number; files: RulesFile[] } | undefined {
  for (let i = events.length - 1; i >= 0; i--) {
    const p = events[i]!.payload;
    if (p?.$case === "rulesLoaded") return { seq: events[i]!.seq, files: p.value.files };
  }
  return undefined;
}

/** The operator's rules files: TACK_RULES_FILES, colon-separated host paths (read at every check, so a change is seen). */
export function operatorRulesPaths(env: NodeJS.ProcessEnv = process.env): string[] {
  return (env.TACK_RULES_FILES ?? "").split(":").filter((p) => p !== "");
}

/** An operator rules file read on this host: its head, size and whole-file hash, or why it could not be read. */
async function readOperatorFile(path: string, headBytes: number): Promise<RulesSource> {
  const label = `operator:${path}`;
  const where = `the operator's file ${path} (on the loop's host, not in the sandbox)`;
  try {
    const file = await open(path, "r");
    try {
      const hash = createHash("sha256");
      let head = Buffer.alloc(0);
      let bytes = 0;
      for await (const chunk of file.createReadStream({ autoClose: false }) as AsyncIterable<Buffer>) {
        hash.update(chunk);
        if (head.length < headBytes) head = Buffer.concat([head, chunk.subarray(0, headBytes - head.length)]);
        bytes += chunk.length;
      }
      return { label, where, head, bytes, sha256: hash.digest("hex"), error: "" };
    } finally {
      await file.close();
    }
  } catch (error) {
    const why = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
    return { label, where: path, head: new Uint8Array(), bytes: 0, sha256: "", error: `could not be read (${why}); fix the path in TACK_RULES_FILES` };
  }
}

/** A rules read as `check` takes it: the files found, or why none could be read. */
type RulesRead = { sources: RulesSource[] } | { error: Error };

/** What a rules check needs from its session. */
export interface RulesHost {
  readonly bus: Bus;
  readonly sessionId: string;
  readonly tenant: string;
  readonly workspace: string;
  readonly events: readonly Event[];
  /** The session's state as the log says it now. */
  readonly state: SessionState;
  readonly projection: Projection;
  readonly append: (...drafts: Draft[]) => Promise<Event[]>;
  readonly log: Logger;
}

/**
 * Keeps the model's rules in step with the files: reads them at the first step of each turn and
 * when a tool call has touched a folder not read yet, and logs `rules/loaded` when the set (labels
 * and hashes) differs from the last one logged, or when a summary has taken the last one out of
 * the model's view. A failed read logs nothing (the last rules logged stay) and is tried again at the next turn.
 */
export class RulesTracker {
  #turn = 0;
  #dirs = new Set<string>();
  /** A read started by `prefetch` that `check` has not used yet (settled, never rejecting). */
  #pending: Promise<RulesRead> | undefined;
  /** A read started at the session's creation (`prefetchAhead`) for its first turn. */
  #ahead: { pending: Promise<RulesRead>; failed: boolean; until: number; dirs: string[]; sandboxMode: string } | undefined;

  /**
   * Starts the read a new session's first turn needs while the person writes the first message.
   * The first turn uses it if it starts within `freshMs`, in the same sandbox mode, and the read
   * did not fail; otherwise it reads the files again. Nothing is logged here.
   */
  prefetchAhead(host: RulesHost, freshMs: number): void {
    if (this.#turn !== 0 || this.#pending || this.#ahead) return;
    const dirs = touchedDirs(host.events);
    const ahead = { pending: this.#settled(host, dirs), failed: false, until: Date.now() + freshMs, dirs, sandboxMode: host.state.sandboxMode };
    void ahead.pending.then((read) => {
      ahead.failed = "error" in read;
    });
    this.#ahead = ahead;
  }

  /**
   * Starts the read the next `check` needs, if it needs one, so that it runs while the step does
   * its other work (header, compaction): the exec in the sandbox is most of a rules check's time.
   */
  prefetch(host: RulesHost, turn: number): void {
    const dirs = touchedDirs(host.events);
    if (turn === this.#turn && !dirs.some((d) => !this.#dirs.has(d))) return;
    const ahead = this.#ahead;
    this.#ahead = undefined;
    // Set before the read: a failed one is tried again at the next turn or new folder, not at every step.
    this.#turn = turn;
    this.#dirs = new Set(dirs);
    const usable = ahead && !ahead.failed && Date.now() <= ahead.until && ahead.sandboxMode === host.state.sandboxMode
      && ahead.dirs.length === dirs.length && ahead.dirs.every((d, i) => d === dirs[i]);
    this.#pending = usable ? ahead.pending : this.#settled(host, dirs);
  }

  #settled(host: RulesHost, dirs: string[]): Promise<RulesRead> {
    return this.#read(host, dirs).then((sources) => ({ sources }), (error: unknown) => ({ error: error as Error }));
  }

  async check(host: RulesHost, turn: number): Promise<void> {
    this.prefetch(host, turn);
    const pending = this.#pending;
    this.#pending = undefined;
    const last = lastRules(host.events);
    let files = last?.files ?? [];
    if (pending) {
      const read = await pending;
      if ("error" in read) {
        host.log.warn("rules files not read; the last ones logged stay, trying again at the next turn", { session: host.sessionId, error: read.error.message });
        return;
      }
      const built = buildRules(read.sources);
      const warned = new Set(host.events.flatMap((e) => (e.payload?.$case === "rulesWarning" ? [`${e.payload.value.label}\n${e.payload.value.message}`] : [])));
      const warnings = built.warnings.filter((w) => !warned.has(`${w.label}\n${w.message}`));
      if (warnings.length > 0) await host.append(...warnings.map((w) => draft("rulesWarning", w, SOURCE)));
      files = built.files;
    }
    const changed = last ? !sameRules(last.files, files) : files.length > 0;
    // A summary replaced the range that held them: the model would no longer see them.
    const dropped = !changed && last !== undefined && files.length > 0 && !host.projection.entries().some((e) => e.seq === last.seq);
    if (changed || dropped) {
      await host.append(draft("rulesLoaded", { files }, SOURCE, { kind: Surface_Kind.KIND_APPEND, replaceFromSeq: 0, replaceToSeq: 0, sourceSeqs: [], origin: "rules" }));
    }
  }

  async #read(host: RulesHost, dirs: string[]): Promise<RulesSource[]> {
    const operator = await Promise.all(operatorRulesPaths().map((p) => readOperatorFile(p, RULES_CAP_BYTES + 4)));
    const { bus } = host;
    const response = await bus.request(ToolsRpc.ReadRules, {
      sessionId: host.sessionId, tenant: host.tenant, workspace: host.workspace, sandboxMode: host.state.sandboxMode, dirs,
    }, { timeoutMs: 60_000 }).catch((error: unknown) => {
      throw TackError.from(error, "loop.rules_unreadable");
    });
    const workspace = response.files.map((f): RulesSource => ({
      label: f.path, where: `${WORKSPACE}/${f.path}`, head: f.content, bytes: Number(f.bytes), sha256: f.sha256, error: f.error,
    }));
    return [...operator, ...workspace];
  }
}
