// Hooks in Claude Code's format: read once per session (a snapshot, as Claude Code takes), run in the session's sandbox, each invocation logged.
import { readFile } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import { z } from "zod";
import { DEFAULT_SILENCE_MS, TackError, ToolsRpc, type Bus } from "@tack/bus";
import { WORKSPACE } from "@tack/config";
import { draft, type Draft, type SessionState } from "@tack/log";
import { CallToolResponse, RunHookRequest, RunHookResponse, Surface_Kind, type Event, type HooksFileRead, type ToolCall, type ToolSpec } from "@tack/proto";
import type { Logger } from "@tack/telemetry";
import { LinearRegExp } from "@tack/linear-regex";
import { toolApprovalPlan, type CallPlan } from "./approvals.js";

/** The hook events of Claude Code's format that Tack accepts (SubagentStart/SubagentStop never fire: Tack has no sub-agents yet). */
export const HOOK_EVENTS = ["SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop", "SubagentStart", "SubagentStop"] as const;
/** One of HOOK_EVENTS. */
export type HookEvent = (typeof HOOK_EVENTS)[number];

/** Claude Code's tools that no Tack tool stands for: a matcher that matches only these is named in the warning. */
export const CLAUDE_ONLY_TOOLS: readonly string[] = ["Task", "NotebookEdit", "LS"];

/** What hooks need of a tool: its name and the Claude Code names the tools service gives it (`hook_aliases`). */
export type HookTool = Pick<ToolSpec, "name" | "hookAliases">;

/** The timeout of a hook that gives none, as in Claude Code. */
export const DEFAULT_HOOK_TIMEOUT_S = 60;
/** A longer timeout is cut to this (the longest command the sandbox runs). */
export const MAX_HOOK_TIMEOUT_S = 600;
/** Text a hook adds for the model is cut here. */
export const HOOK_CONTEXT_CAP = 10_000;
/** A user-level hooks file larger than this is a warning instead. */
const USER_FILE_MAX_BYTES = 256 * 1024;
/** Bus allowance on top of a hook's own timeout. */
const RUN_MARGIN_MS = 15_000;
const SOURCE = "loop";
/** What `source` a SessionStart hook's matcher is tested against: Tack starts each session once. */
const SESSION_START_SOURCE = "startup";

/** Wording the model reads for what hooks decided. */
export const HOOK_TEXT = {
  blocked: (source: string, reason: string) => `Blocked by hook ${source}: ${reason}`,
  stopped: (source: string, reason: string) => `Stopped by hook ${source}${reason ? `: ${reason}` : ""}; the tool did not run and the turn ends.`,
  feedback: (source: string, reason: string) => `Hook ${source} (PostToolUse): ${reason}`,
  promptBlocked: (source: string) => `The user's message here was blocked by hook ${source} and removed; it was not processed.`,
  noReason: "(the hook gave no reason)",
} as const;

// Claude Code's settings shape, checked one level at a time so that one bad entry drops only itself.
const HookCommand = z.object({
  type: z.literal("command"),
  command: z.string().trim().min(1),
  timeout: z.number().positive().optional(),
});
const MatcherGroup = z.object({ matcher: z.string().optional(), hooks: z.array(z.unknown()) });

/** One hook command as configured, with where it came from. */
export interface HookSpec {
  readonly event: HookEvent;
  /** As written ("" for none); for tool events a compiled test of Claude Code's and Tack's tool names. */
  readonly matcher: string;
  readonly command: string;
  readonly timeoutMs: number;
  /** The hooks file, e.g. `.claude/settings.json`, `user:~/.claude/settings.json`. */
  readonly source: string;
}

/** The hooks a turn uses and what was wrong with the files. */
export interface LoadedHooks {
  readonly hooks: readonly HookSpec[];
  readonly warnings: readonly { source: string; message: string }[];
}

/** A hooks file's text (or why it could not be read) and its label. */
export interface HooksFileText {
  readonly source: string;
  readonly text: string;
  readonly error: string;
}

/**
 * The hooks of `files` (in order): bad JSON, an unknown event, an entry that is not a command
 * hook, a bad matcher regex, a matcher that can match no tool of `tools` (by its name or a
 * Claude Code name of it), a timeout cut to the maximum — each is one warning naming the file; the rest is used.
 */
export function parseHooks(files: readonly HooksFileText[], tools: readonly HookTool[]): LoadedHooks {
  const hooks: HookSpec[] = [];
  const warnings: { source: string; message: string }[] = [];
  for (const file of files) {
    const warn = (message: string) => warnings.push({ source: file.source, message: `hooks file ${file.source}: ${message}` });
    if (file.error) {
      warn(`${file.error}; its hooks are not used (fix or remove it)`);
      continue;
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(file.text);
    } catch (error) {
      warn(`is not valid JSON (${(error as Error).message}); none of its hooks are used until it parses`);
      continue;
    }
    if (!isObject(parsed)) {
      warn(`must hold a JSON object with a "hooks" key, as Claude Code's settings do; none of its hooks are used`);
      continue;
    }
    if (parsed.hooks === undefined) continue;
    if (!isObject(parsed.hooks)) {
      warn(`"hooks" must be an object of event names (${HOOK_EVENTS.join(", ")}) to lists of matcher groups; none of its hooks are used`);
      continue;
    }
    for (const [event, groups] of Object.entries(parsed.hooks)) {
      if (!(HOOK_EVENTS as readonly string[]).includes(event)) {
        warn(`unknown hook event ${JSON.stringify(event)}; use one of ${HOOK_EVENTS.join(", ")} (its hooks are not used)`);
        continue;
      }
      if (!Array.isArray(groups)) {
        warn(`hooks.${event} must be a list of {"matcher", "hooks"} groups; its hooks are not used`);
        continue;
      }
      groups.forEach((raw, g) => {
        const where = `hooks.${event}[${g}]`;
        const group = MatcherGroup.safeParse(raw);
        if (!group.success) {
          warn(`${where} must be {"matcher": "...", "hooks": [{"type": "command", "command": "..."}]}: ${zodProblem(group.error)}; it is not used`);
          return;
        }
        const matcher = group.data.matcher ?? "";
        const problem = matcherProblem(event as HookEvent, matcher, tools);
        if (problem) {
          warn(`${where} matcher ${JSON.stringify(matcher)} ${problem}; its hooks are not used`);
          return;
        }
        group.data.hooks.forEach((rawHook, h) => {
          const hook = HookCommand.safeParse(rawHook);
          if (!hook.success) {
            const type = isObject(rawHook) ? rawHook.type : undefined;
            warn(type !== undefined && type !== "command"
              ? `${where}.hooks[${h}] has type ${JSON.stringify(type)}; Tack runs only "command" hooks, so it is not used`
              : `${where}.hooks[${h}] must be {"type": "command", "command": "...", "timeout": seconds}: ${zodProblem(hook.error)}; it is not used`);
            return;
          }
          let seconds = hook.data.timeout ?? DEFAULT_HOOK_TIMEOUT_S;
          if (seconds > MAX_HOOK_TIMEOUT_S) {
            warn(`${where}.hooks[${h}] timeout ${seconds} s is more than the ${MAX_HOOK_TIMEOUT_S} s a hook may run; it runs with ${MAX_HOOK_TIMEOUT_S} s`);
            seconds = MAX_HOOK_TIMEOUT_S;
          }
          hooks.push({ event: event as HookEvent, matcher, command: hook.data.command, timeoutMs: Math.max(1, Math.round(seconds * 1000)), source: file.source });
        });
      });
    }
  }
  return { hooks, warnings };
}

/** Why `matcher` cannot be used for `event`, or undefined when it can match something. */
function matcherProblem(event: HookEvent, matcher: string, tools: readonly HookTool[]): string | undefined {
  let test: (name: string) => boolean;
  try {
    test = matcherTest(matcher);
  } catch (error) {
    return `is not a valid regular expression (${(error as Error).message}); fix it or use names joined by |, e.g. "Bash|Edit"`;
  }
  if (event === "PreToolUse" || event === "PostToolUse") {
    if (matcher.includes("mcp__")) return undefined; // MCP tools may come and go with their servers
    if (tools.some((tool) => namesOf(tool).some(test))) return undefined;
    const unmapped = CLAUDE_ONLY_TOOLS.filter((name) => test(name));
    const why = unmapped.length > 0 ? ` (${unmapped.join(", ")} has no counterpart in Tack)` : "";
    return `matches no tool of this session${why}; Claude Code names are mapped (${mappedList(tools)}) and Tack's own names match too (${tools.map((t) => t.name).join(", ")})`;
  }
  if (event === "SessionStart" && !test(SESSION_START_SOURCE)) {
    return `does not match "${SESSION_START_SOURCE}", the only way a Tack session starts (Tack has no resume, clear or compact start)`;
  }
  return undefined;
}

/** The Claude Code names of `tools`, each with the tool it stands for, in the order the tools are listed. */
function mappedList(tools: readonly HookTool[]): string {
  return tools.flatMap((tool) => tool.hookAliases.map((alias) => `${alias}→${tool.name}`)).join(", ");
}

/**
 * Claude Code's matcher rule: empty or `*` matches everything, names of letters, digits, `_`
 * joined by `|` match exactly, anything else is a regular expression (case-sensitive, unanchored).
 */
export function matcherTest(matcher: string): (name: string) => boolean {
  if (matcher === "" || matcher === "*") return () => true;
  if (/^[A-Za-z0-9_|]+$/.test(matcher)) {
    const names = new Set(matcher.split("|"));
    return (name) => names.has(name);
  }
  // The matcher comes from a repository's settings and the name it is tested on from the model:
  // a backtracking engine could spend minutes on one pair, so it runs on RE2 (linear time).
  const regex = new LinearRegExp(matcher);
  return (name) => regex.test(name);
}

/** The names a Tack tool answers to in a matcher: its own and every Claude Code name the tools service gives it. */
function namesOf(tool: HookTool): string[] {
  return [tool.name, ...tool.hookAliases];
}

/** The name a hook's input gives a Tack tool: its first Claude Code name, else its own. */
export function claudeToolName(tool: HookTool): string {
  return tool.hookAliases[0] ?? tool.name;
}

/** How one hook ended, as Claude Code reads it. */
export interface HookOutcome {
  /** `block` (PreToolUse deny, exit 2, decision block), `allow`, `ask`, `continue` (a Stop hook keeps the turn going), `stop` (`"continue": false`), or "". */
  readonly decision: string;
  /** The reason of a decision (a block's reaches the model), or the `stopReason`. */
  readonly reason: string;
  /** Text for the model: SessionStart/UserPromptSubmit stdout or `additionalContext`, PostToolUse `additionalContext`. */
  readonly context: string;
}

/**
 * What a hook's exit code and output mean for `event`: exit 2 blocks with stderr as the reason;
 * exit 0 with a JSON object on stdout is read for `continue`/`stopReason`, `decision`/`reason`
 * and `hookSpecificOutput` (`permissionDecision`, `additionalContext`); other stdout of a
 * SessionStart or UserPromptSubmit hook is context; any other exit (or a timeout) decides nothing.
 */
export function interpret(event: HookEvent, result: RunHookResponse): HookOutcome {
  const none = { decision: "", reason: "", context: "" };
  if (result.timedOut) return none;
  const blockDecision = event === "Stop" || event === "SubagentStop" ? "continue" : "block";
  if (result.exitCode === 2) return { decision: blockDecision, reason: result.stderr.trim() || HOOK_TEXT.noReason, context: "" };
  if (result.exitCode !== 0) return none;
  const json = parseObject(result.stdout);
  const addsContext = event === "SessionStart" || event === "UserPromptSubmit";
  if (!json) return { ...none, context: addsContext ? result.stdout.trim() : "" };
  const specific = isObject(json.hookSpecificOutput) ? json.hookSpecificOutput : {};
  const context = typeof specific.additionalContext === "string" ? specific.additionalContext.trim() : "";
  if (json.continue === false) return { decision: "stop", reason: typeof json.stopReason === "string" ? json.stopReason : "", context };
  const reasonOf = (value: unknown) => (typeof value === "string" && value.trim() ? value.trim() : HOOK_TEXT.noReason);
  if (event === "PreToolUse") {
    const permission = specific.permissionDecision;
    if (permission === "deny") return { decision: "block", reason: reasonOf(specific.permissionDecisionReason ?? json.reason), context };
    if (permission === "ask" || permission === "allow") return { decision: permission, reason: typeof specific.permissionDecisionReason === "string" ? specific.permissionDecisionReason : "", context };
    // The older form, still accepted by Claude Code.
    if (json.decision === "block") return { decision: "block", reason: reasonOf(json.reason), context };
    if (json.decision === "approve") return { decision: "allow", reason: typeof json.reason === "string" ? json.reason : "", context };
    return { ...none, context };
  }
  if (json.decision === "block") return { decision: blockDecision, reason: reasonOf(json.reason), context };
  return { ...none, context };
}

function parseObject(text: string): Record<string, unknown> | undefined {
  const trimmed = text.trim();
  if (!trimmed.startsWith("{")) return undefined;
  try {
    const value: unknown = JSON.parse(trimmed);
    return isObject(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function zodProblem(error: z.ZodError): string {
  const issue = error.issues[0];
  if (!issue) return "it does not fit";
  return `${issue.path.length ? `${issue.path.join(".")}: ` : ""}${issue.message}`;
}

/** How hooks reach the sandbox: the tools service over the bus, or a fake in unit tests. */
export interface HookRequests {
  /** The workspace's hooks files that exist (`tools.hook_config`). */
  readConfig(host: HooksReadHost): Promise<HooksFileRead[]>;
  /** Runs one hook command (`tools.hook_run`). */
  run(host: HooksHost, request: Pick<RunHookRequest, "command" | "input" | "timeoutMs" | "invocationId">): Promise<RunHookResponse>;
}

/** HookRequests over the bus, to the tools service, in the session's sandbox mode. */
export const busHookRequests: HookRequests = {
  async readConfig(host) {
    const { bus } = host;
    const response = await bus.request(ToolsRpc.ReadHooksConfig, {
      sessionId: host.sessionId, tenant: host.tenant, workspace: host.workspace, sandboxMode: host.state.sandboxMode,
    }, { timeoutMs: 60_000, silenceMs: DEFAULT_SILENCE_MS });
    return response.files;
  },
  run(host, request) {
    const { bus } = host;
    return bus.request(ToolsRpc.RunHook, {
      sessionId: host.sessionId, tenant: host.tenant, workspace: host.workspace, sandboxMode: host.state.sandboxMode, ...request,
    }, { timeoutMs: request.timeoutMs + RUN_MARGIN_MS, silenceMs: DEFAULT_SILENCE_MS });
  },
};

/** What hooks need from their session. */
export interface HooksHost {
  readonly bus: Bus;
  readonly sessionId: string;
  readonly tenant: string;
  readonly workspace: string;
  readonly events: readonly Event[];
  /** The session's state as the log says it now (sandbox mode, approval policy, plan mode). */
  readonly state: SessionState;
  readonly append: (...drafts: Draft[]) => Promise<Event[]>;
  readonly log: Logger;
  /** The session's tools as the tools service lists them (matchers are checked against their names and Claude Code names). */
  readonly tools: () => Promise<readonly HookTool[]>;
}

/** What reading the hooks files needs from the session (no log writes: a read at session creation logs nothing). */
export type HooksReadHost = Pick<HooksHost, "bus" | "sessionId" | "tenant" | "workspace" | "events" | "state" | "log">;

/** How a Hooks instance finds its files and runs its commands. */
export interface HooksOptions {
  /** Folder whose `.claude/settings.json` and `.tack/hooks.json` are the user-level hooks; "" for none. Default: TACK_HOOKS_HOME, else the home directory. */
  readonly home?: string;
  readonly requests?: HookRequests;
}

/** What the session does with a user's prompt after UserPromptSubmit hooks. */
export interface PromptOutcome {
  /** True when a hook blocked it: the turn ends without running it. */
  readonly blocked: boolean;
}

/** The user-level hooks folder: TACK_HOOKS_HOME when set (empty: none), else the home directory of the loop's user. */
export function userHooksHome(env: NodeJS.ProcessEnv = process.env): string {
  return env.TACK_HOOKS_HOME ?? homedir();
}

/**
 * The session's hooks: the files are read once per session, a snapshot (workspace files through
 * the tools service, user-level files on the loop's host), as Claude Code snapshots hooks at
 * session start; each turn checks the snapshot against the session's tools then. They run at each
 * point the session reaches, each run logged as `hook/invoked` + `hook/result`. With no hooks
 * configured a point costs nothing but a lookup.
 */
export class Hooks {
  readonly #home: string | undefined;
  readonly #requests: HookRequests;
  #turn = 0;
  /** The session's hooks files (the snapshot): undefined until a read starts, and again after a read failed. */
  #files: Promise<readonly HooksFileText[]> | undefined;
  /** This turn's hooks: the snapshot checked against the session's tools (warnings logged once). */
  #loaded: Promise<readonly HookSpec[]> | undefined;
  /** The session's tools by name, as this turn's hooks were checked against them: what a call's name matches and is shown as. */
  #tools: ReadonlyMap<string, HookTool> = new Map();
  /** Invocations started by this runtime, on top of those in the log when it started. */
  #invocations: number | undefined;
  /** Set by a hook's `"continue": false`: the turn ends at its next step boundary. */
  #stop: { source: string; reason: string } | undefined;
  /** Stop hooks that made this turn go on (Claude Code's `stop_hook_active`). */
  #stopActive = false;

  constructor(options: HooksOptions = {}) {
    this.#home = options.home;
    this.#requests = options.requests ?? busHookRequests;
  }

  /**
   * Starts reading the session's hooks files unless a read has started: at the session's creation
   * (alongside the sandbox pre-warm, while the person writes the first message), else at the first
   * point that needs them (a session loaded by this loop after another one held it reads them then).
   * Nothing is logged here. A read that fails leaves no snapshot: the next point reads again.
   */
  snapshot(host: HooksReadHost): void {
    if (this.#files) return;
    const reading = this.#read(host);
    this.#files = reading;
    reading.catch(() => {
      if (this.#files === reading) this.#files = undefined;
    });
  }

  /**
   * Starts loading the hooks of `turn` (the snapshot, read now if no read has started, checked
   * once per turn), so that a read runs while the session does other work; a read already done
   * costs no wait. A failed read counts as no hooks for the point that needed it and is tried
   * again at the next point, so that a tools worker back from a restart brings the hooks back within the turn.
   */
  prefetch(host: HooksHost, turn: number): void {
    if (turn === this.#turn && this.#loaded) return;
    if (turn !== this.#turn) {
      this.#turn = turn;
      this.#stopActive = false;
      this.#stop = undefined;
    }
    const loading: Promise<readonly HookSpec[]> = this.#load(host).catch((error: unknown) => {
      host.log.warn("hooks files not read; no hooks run at this point, the read is tried again at the next", { session: host.sessionId, error: (error as Error).message });
      if (this.#loaded === loading) this.#loaded = undefined;
      return [];
    });
    this.#loaded = loading;
  }

  /** The `"continue": false` a hook of this turn returned, taken once: the session ends the turn (reason `hook_stopped`). */
  takeStop(): { source: string; reason: string } | undefined {
    const stop = this.#stop;
    this.#stop = undefined;
    return stop;
  }

  /**
   * Runs SessionStart hooks (at the session's first turn) and UserPromptSubmit hooks for the
   * prompt logged at `userSeq`; their text for the model is logged as `hook/context`. A block
   * replaces the prompt in the model's view with a `hook/context` saying it was removed.
   */
  async userPromptSubmit(host: HooksHost, turn: number, userSeq: number): Promise<PromptOutcome> {
    this.prefetch(host, turn);
    const hooks = await this.#loaded!;
    if (hooks.length === 0) return { blocked: false };
    if (turn === 1 && !host.events.some((e) => e.payload?.$case === "hookInvoked" && e.payload.value.hookEvent === "SessionStart")) {
      const started = await this.#runAll(host, hooks, "SessionStart", SESSION_START_SOURCE, { source: SESSION_START_SOURCE });
      await this.#logContext(host, "SessionStart", started);
    }
    const user = host.events.find((e) => e.seq === userSeq)?.payload;
    const prompt = user?.$case === "userMessage" ? user.value.text : "";
    const ran = await this.#runAll(host, hooks, "UserPromptSubmit", "", { prompt });
    const block = ran.find((r) => r.outcome.decision === "block" || r.outcome.decision === "stop");
    if (block) {
      await host.append(draft("hookContext", { hookEvent: "UserPromptSubmit", source: block.hook.source, text: HOOK_TEXT.promptBlocked(block.hook.source) }, SOURCE, {
        kind: Surface_Kind.KIND_REPLACE, replaceFromSeq: userSeq, replaceToSeq: userSeq, sourceSeqs: [userSeq], origin: "hook",
      }));
      return { blocked: true };
    }
    await this.#logContext(host, "UserPromptSubmit", ran);
    return { blocked: false };
  }

  /**
   * Runs the PreToolUse hooks matching `call` before the call runs: a block (exit 2, `deny`,
   * `decision: block`) or a `"continue": false` refuses it with the hook's reason; `ask` turns a
   * call that would simply run into a per-call tool approval a person answers (refused under policy `never`). `allow` widens nothing: Tack's
   * sandbox and approvals stay in force. Calls Tack already refuses get no hooks.
   */
  async preToolUse(host: HooksHost, call: ToolCall, plan: CallPlan, turn: number, step: number): Promise<CallPlan> {
    if (plan.kind === "refuse") return plan;
    const hooks = await this.#hooksFor(host, turn);
    if (!hooks.some((h) => h.event === "PreToolUse")) return plan;
    const ran = await this.#runAll(host, hooks, "PreToolUse", call.name, this.#toolInput(call), call.id);
    const stop = ran.find((r) => r.outcome.decision === "stop");
    if (stop) return { kind: "refuse", content: HOOK_TEXT.stopped(stop.hook.source, stop.outcome.reason) };
    const blocks = ran.filter((r) => r.outcome.decision === "block");
    if (blocks.length > 0) return { kind: "refuse", content: blocks.map((r) => HOOK_TEXT.blocked(r.hook.source, r.outcome.reason)).join("\n") };
    const ask = ran.find((r) => r.outcome.decision === "ask");
    if (!ask || plan.kind !== "run" || plan.note) return plan;
    const asking = toolApprovalPlan(call, { mode: plan.mode, policy: host.state.approvalPolicy, turn, step }, `${call.name} ${call.arguments}`.slice(0, 2000));
    const justification = `Hook ${ask.hook.source} asks for a person's yes${ask.outcome.reason ? `: ${ask.outcome.reason}` : ""}`;
    return asking.kind === "ask" ? { ...asking, asked: { ...asking.asked, justification } } : asking;
  }

  /**
   * Runs the PostToolUse hooks matching `call` after it succeeded (a failed call gets none, as in
   * Claude Code); what they tell the model (a block's reason, exit 2's stderr, `additionalContext`)
   * is added to the call's result, so it reaches the model with it. `"continue": false` ends the turn after this step.
   */
  async postToolUse(host: HooksHost, call: ToolCall, result: CallToolResponse, turn: number): Promise<CallToolResponse> {
    if (result.isError) return result;
    const hooks = await this.#hooksFor(host, turn);
    if (!hooks.some((h) => h.event === "PostToolUse")) return result;
    const ran = await this.#runAll(host, hooks, "PostToolUse", call.name, { ...this.#toolInput(call), tool_response: { content: result.content, is_error: result.isError } }, call.id);
    const notes = ran.flatMap((r) => [
      ...(r.outcome.decision === "block" ? [HOOK_TEXT.feedback(r.hook.source, r.outcome.reason)] : []),
      ...(r.outcome.context ? [HOOK_TEXT.feedback(r.hook.source, capContext(r.outcome.context))] : []),
    ]);
    return notes.length === 0 ? result : { ...result, content: `${result.content}\n\n${notes.join("\n")}` };
  }

  /**
   * Runs the Stop hooks when the model has finished the turn. Returns true when one decided the
   * turn goes on (`decision: block` or exit 2): its reason is logged as `hook/context`, which the
   * model reads at the next step. The input's `stop_hook_active` tells a hook it already did so this turn.
   */
  async stop(host: HooksHost, turn: number): Promise<boolean> {
    const hooks = await this.#hooksFor(host, turn);
    if (!hooks.some((h) => h.event === "Stop")) return false;
    const ran = await this.#runAll(host, hooks, "Stop", "", { stop_hook_active: this.#stopActive });
    if (ran.some((r) => r.outcome.decision === "stop")) return false;
    const goOn = ran.filter((r) => r.outcome.decision === "continue");
    if (goOn.length === 0) return false;
    this.#stopActive = true;
    await host.append(...goOn.map((r) => contextDraft("Stop", r.hook.source, r.outcome.reason)));
    return true;
  }

  /** Tool `name` as the session's list gives it; a tool not listed (an MCP tool) answers to its own name only. */
  #tool(name: string): HookTool {
    return this.#tools.get(name) ?? { name, hookAliases: [] };
  }

  /** `tool_name`, `tool_input` and `tool_use_id` of a call as a Claude Code hook reads them (`path` is also given as `file_path`). */
  #toolInput(call: ToolCall): Record<string, unknown> {
    return toolInput(call, claudeToolName(this.#tool(call.name)));
  }

  async #hooksFor(host: HooksHost, turn: number): Promise<readonly HookSpec[]> {
    this.prefetch(host, turn);
    return this.#loaded!;
  }

  /** The hooks files of the user (on this host) and of the workspace (in the sandbox), in the order their hooks run. */
  async #read(host: HooksReadHost): Promise<readonly HooksFileText[]> {
    const home = this.#home ?? userHooksHome();
    const [user, workspace] = await Promise.all([
      home ? Promise.all([".claude/settings.json", ".tack/hooks.json"].map((path) => readUserFile(home, path))) : Promise.resolve([]),
      this.#requests.readConfig(host),
    ]);
    return [
      ...user.filter((f): f is HooksFileText => f !== undefined),
      ...workspace.map((f) => ({ source: f.path, text: Buffer.from(f.content).toString("utf8"), error: f.error })),
    ];
  }

  async #load(host: HooksHost): Promise<readonly HookSpec[]> {
    this.snapshot(host);
    const files = await this.#files!;
    if (files.length === 0) return [];
    const tools = await host.tools();
    this.#tools = new Map(tools.map((t) => [t.name, t]));
    const loaded = parseHooks(files, tools);
    const warned = new Set(host.events.flatMap((e) => (e.payload?.$case === "hookWarning" ? [`${e.payload.value.source}\n${e.payload.value.message}`] : [])));
    const fresh = loaded.warnings.filter((w) => !warned.has(`${w.source}\n${w.message}`));
    if (fresh.length > 0) await host.append(...fresh.map((w) => draft("hookWarning", w, SOURCE)));
    return loaded.hooks;
  }

  /** Runs every hook of `event` whose matcher fits `subject`, at once (identical commands once), logging each. */
  async #runAll(host: HooksHost, hooks: readonly HookSpec[], event: HookEvent, subject: string, fields: Record<string, unknown>, callId = ""): Promise<{ hook: HookSpec; outcome: HookOutcome }[]> {
    const seen = new Set<string>();
    const chosen = hooks.filter((h) => {
      if (h.event !== event || seen.has(h.command)) return false;
      const test = matcherTest(h.matcher);
      const fits = event === "PreToolUse" || event === "PostToolUse" ? namesOf(this.#tool(subject)).some(test) : event === "SessionStart" ? test(subject) : true;
      if (fits) seen.add(h.command);
      return fits;
    });
    if (chosen.length === 0) return [];
    this.#invocations ??= host.events.filter((e) => e.payload?.$case === "hookInvoked").length;
    const input = JSON.stringify({
      session_id: host.sessionId, transcript_path: "", cwd: WORKSPACE, permission_mode: host.state.planMode ? "plan" : "default",
      hook_event_name: event, ...fields,
    });
    const runs = chosen.map((hook) => ({ hook, id: `${event}-${++this.#invocations!}` }));
    await host.append(...runs.map(({ hook, id }) => draft("hookInvoked", {
      invocationId: id, hookEvent: event, matcher: hook.matcher, command: hook.command, source: hook.source, callId, timeoutMs: hook.timeoutMs,
    }, SOURCE)));
    return Promise.all(runs.map(async ({ hook, id }) => {
      const started = performance.now();
      let result: RunHookResponse;
      try {
        result = await this.#requests.run(host, { command: hook.command, input, timeoutMs: hook.timeoutMs, invocationId: id });
      } catch (error) {
        // Like any hook error that is not exit 2: logged, and the session goes on as if the hook had not run.
        const e = TackError.from(error, "loop.hook_failed");
        result = { exitCode: -1, stdout: "", stderr: `the hook could not be run: ${e.code}: ${e.message}`, timedOut: false, durationMs: performance.now() - started };
      }
      const outcome = interpret(event, result);
      if (outcome.decision === "stop") this.#stop ??= { source: hook.source, reason: outcome.reason };
      const reason = result.timedOut ? `killed after its timeout of ${hook.timeoutMs / 1000} s; it decided nothing (raise "timeout" in ${hook.source} if it needs longer)` : outcome.reason;
      await host.append(draft("hookResult", {
        invocationId: id, exitCode: result.exitCode, stdout: result.stdout, stderr: result.stderr, timedOut: result.timedOut, durationMs: result.durationMs,
        decision: outcome.decision, reason,
      }, SOURCE));
      return { hook, outcome };
    }));
  }

  async #logContext(host: HooksHost, event: HookEvent, ran: readonly { hook: HookSpec; outcome: HookOutcome }[]): Promise<void> {
    const drafts = ran.filter((r) => r.outcome.context).map((r) => contextDraft(event, r.hook.source, capContext(r.outcome.context)));
    if (drafts.length > 0) await host.append(...drafts);
  }
}

/** A call's hook input, the tool named `toolName`. */
function toolInput(call: ToolCall, toolName: string): Record<string, unknown> {
  let args: unknown;
  try {
    args = JSON.parse(call.arguments);
  } catch {
    args = {};
  }
  const input: Record<string, unknown> = isObject(args) ? { ...args } : {};
  if (typeof input.path === "string" && input.file_path === undefined) input.file_path = input.path;
  return { tool_name: toolName, tool_input: input, tool_use_id: call.id };
}

function capContext(text: string): string {
  return text.length <= HOOK_CONTEXT_CAP ? text : `${text.slice(0, HOOK_CONTEXT_CAP)}\n[... cut at ${HOOK_CONTEXT_CAP} of ${text.length} characters ...]`;
}

function contextDraft(event: HookEvent, source: string, text: string): Draft {
  return draft("hookContext", { hookEvent: event, source, text }, SOURCE, { kind: Surface_Kind.KIND_APPEND, replaceFromSeq: 0, replaceToSeq: 0, sourceSeqs: [], origin: "hook" });
}

/** A user-level hooks file on this host, labelled `user:~/<path>`; undefined when it does not exist. */
async function readUserFile(home: string, path: string): Promise<HooksFileText | undefined> {
  const source = `user:~/${path}`;
  try {
    const data = await readFile(join(home, path));
    if (data.length > USER_FILE_MAX_BYTES) return { source, text: "", error: `is ${data.length} bytes, more than the ${USER_FILE_MAX_BYTES} a hooks file may have` };
    return { source, text: data.toString("utf8"), error: "" };
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ENOENT" || code === "ENOTDIR") return undefined;
    return { source, text: "", error: `could not be read on the loop's host (${code ?? (error as Error).message})` };
  }
}
