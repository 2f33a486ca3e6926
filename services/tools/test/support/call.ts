import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { CallToolResponse } from "@tack/proto";
import { callTool } from "../../src/registry.js";
import { LocalSandboxClient } from "./local-sandbox.js";

/** A temp directory standing in for a session's workspace, and a way to call tools in it. */
export interface Workspace {
  readonly root: string;
  readonly sandbox: LocalSandboxClient;
  /** Calls tool `name`; `args` is sent as JSON unless it is already a string. */
  call(name: string, args: unknown): Promise<CallToolResponse>;
  remove(): Promise<void>;
}

/** Creates a fresh workspace under the OS temp directory. */
export async function makeWorkspace(): Promise<Workspace> {
  const root = await mkdtemp(join(tmpdir(), "tack-tools-"));
  const sandbox = new LocalSandboxClient(root);
  const signal = new AbortController().signal;
  return {
    root,
    sandbox,
    call: (name, args) =>
      callTool(
        {
          sessionId: "s1",
          tenant: "t1",
          callId: "call-1",
          name,
          arguments: typeof args === "string" ? args : JSON.stringify(args),
          workspace: root,
          sandboxMode: "workspace-write",
        },
        { sandbox, signal },
      ),
    remove: () => rm(root, { recursive: true, force: true }),
  };
}
