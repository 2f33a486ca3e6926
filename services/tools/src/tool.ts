import type { Bus } from "@tack/bus";
import type { DefinedTool, ToolImage } from "@tack/proto";
import type { z } from "zod";
import type { Denied, SandboxMode } from "./permissions.js";
import type { SandboxClient } from "./sandbox.js";

/** What a tool's `execute` may use besides its arguments. */
export interface ToolContext {
  /** Session whose sandbox the tool runs in. */
  readonly sessionId: string;
  /** Id of this call, as the model gave it. */
  readonly callId: string;
  /** Aborted when the tools service stops; pass it to every sandbox call. */
  readonly signal: AbortSignal;
  /** The only way a tool reaches files or processes: the session's sandbox. */
  readonly sandbox: SandboxClient;
  /** Sandbox mode this call runs under (the loop's decision); every exec goes to that mode's container. */
  readonly mode: SandboxMode;
  /** The whole result of call `callId` of this same session that the loop spilled to the object store; undefined when there is none. */
  spilled(callId: string): Promise<Uint8Array | undefined>;
  /** Runs a standard-mode tool as part of this call (the normal callTool path, same session and sandbox mode); what run_code programs call. */
  callInner?(name: string, args: string): Promise<{ content: string; isError: boolean }>;
  /** The tools service's bus, for tools that describe the deployment (composition); absent where no bus runs. */
  readonly bus?: Bus;
  /** The tools this session defined (creator mode), as the loop sent them. */
  readonly defined?: readonly DefinedTool[];
  /** Adds an image to the call's result besides its text (`read` of an image); absent where results carry no images. */
  attach?(image: ToolImage): void;
}

/** Where the tools service finds results the loop spilled (in production the log's `SpillBucket`). */
export interface SpillReader {
  /** The whole spilled result of call `callId` of the session at `address`, or undefined when that session spilled none under that id. */
  get(address: { readonly tenant: string; readonly sessionId: string }, callId: string): Promise<Uint8Array | undefined>;
}

/**
 * A tool as the model sees it (name, description, zod parameters) plus its executor.
 * `execute` returns the text the model reads; it throws `ToolError` for a failure the
 * model can act on, and anything else for a protocol failure (the call is not answered).
 */
export interface Tool<S extends z.ZodType = z.ZodType> {
  readonly name: string;
  /** Loaded from the sibling `<name>.txt`; sent to the model on every request, so keep it short. */
  readonly description: string;
  readonly parameters: S;
  /** What a sandbox mode can deny it; such a tool spreads `escalationParameters`, and the loop asks a person before a wider mode. */
  readonly deniable?: readonly Denied[];
  /** The argument an approval card shows as what the call does (bash: `command`); without one, all arguments. */
  readonly operation?: string;
  /**
   * `session`: the loop carries the call out (it changes the session, not the sandbox) after
   * validating the arguments against `parameters`; `execute` only answers a call that reached
   * the tools service anyway (e.g. from a run_code program).
   */
  readonly handler?: "session";
  /** With `handler: "session"`: what the loop does for a call (`todos`, `question`, `plan`, `search`), so that the loop never goes by the tool's name. */
  readonly sessionOperation?: "todos" | "question" | "plan" | "search";
  /** Claude Code's names for this tool, which a hook matcher may use; the first is the name a hook's input gives it. */
  readonly hookAliases?: readonly string[];
  /** Its `path` argument always names a file (rules files are looked for only in the folders above it). */
  readonly pathIsFile?: boolean;
  /** A call that succeeds writes the file its `path` argument names. */
  readonly writesPath?: boolean;
  execute(args: z.output<S>, ctx: ToolContext): Promise<string>;
}

/** Declares a tool, inferring the argument type of `execute` from the zod parameters. */
export function defineTool<S extends z.ZodType>(tool: Tool<S>): Tool<S> {
  return tool;
}

/** A tool failure the model should read and recover from (becomes `is_error: true`). */
export class ToolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ToolError";
  }
}
