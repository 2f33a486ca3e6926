import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spillObjectName } from "@tack/log";
import type { CallToolResponse } from "@tack/proto";
import { callTool } from "../../src/registry.js";
import { LocalSandboxClient } from "./local-sandbox.js";

/** A temp directory standing in for a session's workspace, and a way to call tools in it. */
export interface Workspace {
  readonly root: string;
  /** The commands' TMPDIR, standing in for the container's /tmp. */
  readonly tmp: string;
  readonly sandbox: LocalSandboxClient;
  /** In-memory stand-in for the spill bucket, by object name (the real bucket is tested in bus.test.ts). */
  readonly spilled: Map<string, Uint8Array>;
  /** Calls tool `name` under sandbox mode `mode` (default workspace-write); `args` is sent as JSON unless it is already a string. */
  call(name: string, args: unknown, mode?: string): Promise<CallToolResponse>;
  remove(): Promise<void>;
}

/** Creates a fresh workspace under the OS temp directory. */
export async function makeWorkspace(): Promise<Workspace> {
  const root = await mkdtemp(join(tmpdir(), "tack-tools-"));
  const tmp = await mkdtemp(join(tmpdir(), "tack-tools-tmp-"));
  const sandbox = new LocalSandboxClient(root, tmp);
  const signal = new AbortController().signal;
  const spilled = new Map<string, Uint8Array>();
  const spills = { get: async (address: { tenant: string; sessionId: string }, callId: string) => spilled.get(spillObjectName(address, callId)) };
  return {
    root,
    tmp,
    sandbox,
    spilled,
    call: (name, args, mode = "workspace-write") =>
      callTool(
        {
          sessionId: "s1",
          tenant: "t1",
          callId: "call-1",
          name,
          arguments: typeof args === "string" ? args : JSON.stringify(args),
          workspace: root,
          sandboxMode: mode,
          attempt: 1,
          firstAttemptAtMs: Date.now(),
        },
        { sandbox, spills, signal },
      ),
    remove: async () => {
      await rm(root, { recursive: true, force: true });
      await rm(tmp, { recursive: true, force: true });
    },
  };
}
