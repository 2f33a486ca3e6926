// Extensions in the loop: the skills catalog and the `skill` tool (skills service), `/name`, and MCP tools (MCP bridge).
import { posix } from "node:path";
import { McpRpc, SkillsRpc, TackError, type Bus } from "@tack/bus";
import { WORKSPACE } from "@tack/config";
import { draft, type Draft, type Projection } from "@tack/log";
import {
  CallMcpToolResponse, CallToolResponse, LoadSkillResponse, SkillCatalogResponse, Surface_Kind, type Event, type SkillsCatalog, type ToolCall, type ToolSpec,
} from "@tack/proto";
import type { Logger } from "@tack/telemetry";

const SOURCE = "loop";
/** Longest wait for the skills service (it reads files on its host; a catalog is a few ms). */
const SKILLS_TIMEOUT_MS = 5_000;
/** Longest wait for the MCP tool list: the first one of a session starts its stdio servers in the sandbox. */
const MCP_LIST_TIMEOUT_MS = 30_000;
/** A call waits this much longer than the bridge's own call timeout (60 s), so the bridge's answer arrives first. */
const MCP_CALL_TIMEOUT_MS = 70_000;
/** Arguments shown on an approval card are cut to this many characters. */
const OPERATION_CAP = 2_000;

/** The `skill` tool: carried out by the loop through the skills service (handler `skills`). */
export const SKILL_TOOL: ToolSpec = {
  name: "skill",
  description: "Load a skill from the skills list: returns its instructions (and the files in its folder). Call it before a task that matches a skill's description, then follow the instructions.",
  parametersJson: JSON.stringify({
    type: "object",
    properties: { name: { type: "string", description: "The skill's name, as in the skills list." } },
    required: ["name"],
    additionalProperties: false,
  }),
  deniable: [],
  operationArgument: "",
  handler: "skills",
  approval: "",
  hookAliases: [],
  pathIsFile: false,
  writesPath: false,
  sessionOperation: "",
};

/** What the extensions need from their session. */
export interface ExtensionsHost {
  readonly bus: Bus;
  readonly sessionId: string;
  readonly tenant: string;
  /** Absolute host path of the workspace (mounted at /workspace in the sandbox). */
  readonly workspace: string;
  readonly sandboxMode: string;
  readonly events: readonly Event[];
  readonly projection: Projection;
  readonly append: (...drafts: Draft[]) => Promise<Event[]>;
  readonly log: Logger;
}

/** The extension tools of one step, fetched at its start. */
export interface StepExtensions {
  /** The skills service's catalog, or undefined when it did not answer (no `skill` tool then). */
  readonly catalog: SkillCatalogResponse | undefined;
  /** MCP tools as the model sees them, sorted by name (empty when the bridge did not answer). */
  readonly mcpTools: ToolSpec[];
  /** Warnings of the MCP servers (`server`, `message`). */
  readonly mcpWarnings: { server: string; message: string }[];
}

/**
 * The session's extensions: asks the skills service and the MCP bridge at each step (both
 * answer from memory after the first time), logs a `skills/catalog` only when the catalog's
 * digest changes (or a summary took the last one out of the model's view), and logs each new
 * skills and MCP warning once.
 */
export class Extensions {
  #pending: Promise<StepExtensions> | undefined;
  /** A fetch started at the session's creation (`prefetchAhead`) for its first step. */
  #ahead: { pending: Promise<{ step: StepExtensions; complete: boolean }>; until: number; sandboxMode: string } | undefined;
  #skillsDownLogged = false;
  #mcpDownLogged = false;
  /** What the log holds so far of what `record` needs: warnings logged, the last catalog; read up to `#read` events. */
  readonly #logged = { warned: new Set<string>(), lastCatalog: undefined as { seq: number; value: SkillsCatalog } | undefined, read: 0, of: undefined as readonly Event[] | undefined };

  /**
   * Starts fetching a new session's first catalog and MCP tools while the person writes the first
   * message (the MCP bridge starts the session's servers meanwhile). The first step uses them if it
   * starts within `freshMs`, with extensions, in the same sandbox mode, and both services answered;
   * otherwise it fetches them again. Nothing is logged in the session here.
   */
  prefetchAhead(host: ExtensionsHost, withExtensions: boolean, freshMs: number): void {
    if (!withExtensions || this.#pending || this.#ahead) return;
    this.#ahead = { pending: this.#fetchAll(host), until: Date.now() + freshMs, sandboxMode: host.sandboxMode };
  }

  /** Starts fetching the step's catalog and MCP tools, so that they run while the step does its other work. */
  prefetch(host: ExtensionsHost, withExtensions: boolean): void {
    if (this.#pending) return;
    const ahead = this.#ahead;
    this.#ahead = undefined;
    if (ahead && withExtensions && Date.now() <= ahead.until && ahead.sandboxMode === host.sandboxMode) {
      this.#pending = ahead.pending.then(({ step, complete }) => (complete ? step : this.#fetch(host)));
      return;
    }
    this.#pending = withExtensions ? this.#fetch(host) : Promise.resolve({ catalog: undefined, mcpTools: [], mcpWarnings: [] });
  }

  /** The step's extensions (fetched by `prefetch`, or now). */
  async take(host: ExtensionsHost, withExtensions: boolean): Promise<StepExtensions> {
    this.prefetch(host, withExtensions);
    const pending = this.#pending!;
    this.#pending = undefined;
    return pending;
  }

  /** The tools the extensions add to the service's, in a stable order: `skill`, then MCP tools by name. */
  static tools(step: StepExtensions): ToolSpec[] {
    return [...(step.catalog ? [SKILL_TOOL] : []), ...step.mcpTools];
  }

  async #fetch(host: ExtensionsHost): Promise<StepExtensions> {
    return (await this.#fetchAll(host)).step;
  }

  /** The step's extensions, and whether both services answered (`complete`). */
  async #fetchAll(host: ExtensionsHost): Promise<{ step: StepExtensions; complete: boolean }> {
    const { bus } = host;
    let complete = true;
    const [catalog, mcp] = await Promise.all([
      bus.request(SkillsRpc.Catalog, { workspace: host.workspace }, { timeoutMs: SKILLS_TIMEOUT_MS })
        .catch((error: unknown) => {
          complete = false;
          if (!this.#skillsDownLogged) host.log.warn("skills service did not answer; the session has no skills for now", { session: host.sessionId, error: (error as Error).message });
          this.#skillsDownLogged = true;
          return undefined;
        }),
      bus.request(McpRpc.ListTools, {
        tenant: host.tenant, sessionId: host.sessionId, workspace: host.workspace, sandboxMode: host.sandboxMode,
      }, { timeoutMs: MCP_LIST_TIMEOUT_MS }).catch((error: unknown) => {
        complete = false;
        const e = TackError.from(error);
        if (e.code !== "bus.no_responders" && !this.#mcpDownLogged) host.log.warn("MCP bridge did not answer; the session has no MCP tools for now", { session: host.sessionId, error: e.message });
        this.#mcpDownLogged = true;
        return undefined;
      }),
    ]);
    const mcpTools = (mcp?.tools ?? []).map((t): ToolSpec => ({
      name: t.publicName, description: t.description, parametersJson: t.parametersJson, deniable: [], operationArgument: "", handler: "mcp",
      approval: t.approval === "never" ? "" : "ask", hookAliases: [], pathIsFile: false, writesPath: false, sessionOperation: "",
    })).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    const mcpWarnings = (mcp?.servers ?? []).flatMap((s) => [
      ...s.warnings.map((message) => ({ server: s.name, message })),
      ...(s.state === "failed" && s.error ? [{ server: s.name, message: s.error }] : []),
    ]);
    return { step: { catalog, mcpTools, mcpWarnings }, complete };
  }

  /**
   * Logs what changed since the last step: new skills and MCP warnings, and a `skills/catalog`
   * when the digest differs from the last one logged or the model no longer sees that one.
   */
  async record(host: ExtensionsHost, step: StepExtensions): Promise<void> {
    const drafts: Draft[] = [];
    // A copy: what this step adds counts as logged once the append is in the log (read at the next step).
    const warned = new Set(this.#readLog(host.events));
    // Each warning once per session (the services repeat theirs at every answer).
    const once = (key: string, make: () => Draft) => {
      if (warned.has(key)) return;
      warned.add(key);
      drafts.push(make());
    };
    for (const message of step.catalog?.warnings ?? []) {
      const source = /^(\S+?):\s/.exec(message)?.[1] ?? "skills";
      once(`skills\n${source}\n${message}`, () => draft("skillsWarning", { source, message }, SOURCE));
    }
    for (const w of step.mcpWarnings) once(`mcp\n${w.server}\n${w.message}`, () => draft("mcpWarning", w, SOURCE));
    if (step.catalog) {
      const last = this.#logged.lastCatalog;
      const changed = last?.value.digest !== step.catalog.digest;
      const dropped = !changed && last !== undefined && !host.projection.entries().some((e) => e.seq === last.seq);
      if (changed || dropped) {
        const skills = step.catalog.entries.map((e) => ({
          name: e.name, description: e.description, source: e.source?.root ?? "", modelInvocable: e.modelInvocable, userInvocable: e.userInvocable,
        }));
        drafts.push(draft("skillsCatalog", { skills, digest: step.catalog.digest }, SOURCE, {
          kind: Surface_Kind.KIND_APPEND, replaceFromSeq: 0, replaceToSeq: 0, sourceSeqs: [], origin: "skills",
        }));
      }
    }
    if (drafts.length > 0) await host.append(...drafts);
  }

  /**
   * Brings `#logged` up to the end of the session's events, reading only those it has not read
   * (the log only grows; another array, a session loaded again, is read from its start), and
   * returns the warnings logged so far.
   */
  #readLog(events: readonly Event[]): Set<string> {
    const logged = this.#logged;
    if (logged.of !== events || events.length < logged.read) {
      logged.warned.clear();
      logged.lastCatalog = undefined;
      logged.read = 0;
      logged.of = events;
    }
    for (; logged.read < events.length; logged.read++) {
      const e = events[logged.read]!;
      const p = e.payload;
      if (p?.$case === "skillsWarning") logged.warned.add(`skills\n${p.value.source}\n${p.value.message}`);
      else if (p?.$case === "mcpWarning") logged.warned.add(`mcp\n${p.value.server}\n${p.value.message}`);
      else if (p?.$case === "skillsCatalog") logged.lastCatalog = { seq: e.seq, value: p.value };
    }
    return logged.warned;
  }
}

/** Where a host path of a skill is for the model: under /workspace when it is in the workspace, else the host path. */
export function modelPath(workspace: string, hostPath: string): string {
  const rel = posix.relative(workspace, hostPath);
  return rel && !rel.startsWith("..") && !posix.isAbsolute(rel) ? `${WORKSPACE}/${rel}` : hostPath;
}

/** Carries out a `skill` call: the skill's body from the skills service, refused when the model may not run it. */
export async function runSkillTool(host: ExtensionsHost, call: ToolCall): Promise<{ content: string; isError: boolean }> {
  let name: unknown;
  try {
    name = (JSON.parse(call.arguments) as { name?: unknown }).name;
  } catch {
    return { content: `The skill tool needs JSON arguments {"name": "<skill>"}; got ${JSON.stringify(call.arguments.slice(0, 200))}. Retry with a skill name from the skills list.`, isError: true };
  }
  if (typeof name !== "string" || !name.trim()) {
    return { content: "The skill tool needs a \"name\": the skill's name as in the skills list. Retry with one.", isError: true };
  }
  const { bus } = host;
  let loaded: LoadSkillResponse;
  try {
    loaded = await bus.request(SkillsRpc.LoadSkill, { workspace: host.workspace, name: name.trim(), by: "model" }, { timeoutMs: SKILLS_TIMEOUT_MS });
  } catch (error) {
    const e = TackError.from(error);
    return { content: `Skill ${JSON.stringify(name)} could not be loaded: ${e.message}`, isError: true };
  }
  const folder = posix.dirname(modelPath(host.workspace, loaded.path));
  const files = loaded.files.length
    ? `\n\nFiles in the skill's folder ${folder}${loaded.filesTruncated ? " (the first ones)" : ""}: ${loaded.files.join(", ")}`
    : "";
  return { content: `Skill ${loaded.name} (${loaded.source?.root ?? ""}, ${modelPath(host.workspace, loaded.path)}):\n\n${loaded.body.replace(/\n$/, "")}${files}`, isError: false };
}

/** `/name [arguments]` at the start of a user message: the skill's name and the rest. */
export function slashCommand(text: string): { name: string; args: string } | undefined {
  const m = /^\/([a-z0-9]+(?:-[a-z0-9]+)*)(?:\s+([\s\S]*))?$/.exec(text.trim());
  return m ? { name: m[1]!, args: (m[2] ?? "").trim() } : undefined;
}

/**
 * The `skill/invoked` for a user message that runs a skill (`/name [arguments]`), or undefined
 * when the message is not one (no such skill, or no skills service: it is a plain message then).
 * A skill the user may not run, or one deleted since the catalog, is refused with the skills
 * service's error.
 */
export async function userSkill(host: Pick<ExtensionsHost, "bus" | "workspace" | "log" | "sessionId">, text: string): Promise<Draft | undefined> {
  const command = slashCommand(text);
  if (!command) return undefined;
  const { bus } = host;
  let loaded: LoadSkillResponse;
  try {
    loaded = await bus.request(SkillsRpc.LoadSkill, { workspace: host.workspace, name: command.name, by: "user" }, { timeoutMs: SKILLS_TIMEOUT_MS });
  } catch (error) {
    const e = TackError.from(error);
    if (e.code === "skills.unknown") return undefined;
    if (e.code.startsWith("bus.")) {
      host.log.warn("skills service did not answer; /name sent as a plain message", { session: host.sessionId, error: e.message });
      return undefined;
    }
    throw e;
  }
  const location = posix.dirname(modelPath(host.workspace, loaded.path));
  return draft("skillInvoked", {
    name: loaded.name, source: loaded.source?.root ?? "", body: loaded.body, files: loaded.files, arguments: command.args, location,
  }, SOURCE, { kind: Surface_Kind.KIND_APPEND, replaceFromSeq: 0, replaceToSeq: 0, sourceSeqs: [], origin: "user" });
}

/** A call of a tool that writes its `path` (`writes_path`: write, edit) to a file under a `skills` folder: the host path the skills service should re-read at once. */
export function skillsPathTouched(workspace: string, call: ToolCall, tool: Pick<ToolSpec, "writesPath"> | undefined): string | undefined {
  if (!tool?.writesPath) return undefined;
  let path: unknown;
  try {
    path = (JSON.parse(call.arguments) as { path?: unknown }).path;
  } catch {
    return undefined;
  }
  if (typeof path !== "string") return undefined;
  const inBox = path.startsWith("/") ? path : posix.join(WORKSPACE, path);
  const normal = posix.normalize(inBox);
  if (normal !== WORKSPACE && !normal.startsWith(`${WORKSPACE}/`)) return undefined;
  if (!normal.split("/").includes("skills")) return undefined;
  return posix.join(workspace, normal.slice(WORKSPACE.length));
}

/** What the approval card shows for an MCP call: its arguments, compact and cut. */
export function mcpOperation(call: ToolCall): string {
  let shown = call.arguments;
  try {
    shown = JSON.stringify(JSON.parse(call.arguments));
  } catch {
    // Shown as the model wrote it.
  }
  return `${call.name} ${shown.length > OPERATION_CAP ? `${shown.slice(0, OPERATION_CAP)}…` : shown}`;
}

/**
 * Logs `tool/call`, calls the MCP tool through the bridge and logs its whole result as
 * `mcp/result`; the model reads the text (non-text parts as placeholders). Never retried once
 * sent: an MCP tool may not be safe to run twice. A bridge that cannot be reached is a result.
 */
export async function callMcpTool(host: ExtensionsHost, call: ToolCall, turn: number, step: number): Promise<CallToolResponse> {
  await host.append(draft("toolCall", { callId: call.id, name: call.name, arguments: call.arguments, turn, step }, SOURCE));
  const started = performance.now();
  const { bus } = host;
  let reply: CallMcpToolResponse;
  try {
    reply = await bus.request(McpRpc.CallTool, {
      publicName: call.name, argumentsJson: call.arguments, callId: call.id, tenant: host.tenant, sessionId: host.sessionId,
      workspace: host.workspace, sandboxMode: host.sandboxMode,
    }, { timeoutMs: MCP_CALL_TIMEOUT_MS });
  } catch (error) {
    const e = TackError.from(error);
    const content = e.code === "bus.timeout" || e.code === "bus.worker_lost"
      ? `Interrupted: the MCP bridge stopped answering while ${call.name} ran, so it may or may not have run. Check its effects before calling it again.`
      : `Tool ${call.name} could not run: ${e.message}`;
    return CallToolResponse.fromPartial({ content, isError: true, durationMs: performance.now() - started });
  }
  await host.append(draft("mcpResult", { callId: call.id, server: reply.server, tool: reply.tool, rawJson: reply.rawJson }, SOURCE));
  return CallToolResponse.fromPartial({ content: reply.content, isError: reply.isError, durationMs: performance.now() - started });
}
