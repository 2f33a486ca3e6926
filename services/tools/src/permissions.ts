import { TackError } from "@tack/bus";
import { z } from "zod";

/** The sandbox modes, narrowest first; each grants everything the ones before it grant. */
export const SANDBOX_MODES = ["read-only", "workspace-write", "danger-full-access"] as const;

/** One of SANDBOX_MODES. */
export type SandboxMode = (typeof SANDBOX_MODES)[number];

/** What a sandbox mode can deny, with the narrowest mode that allows it. */
const ALLOWED_FROM = { writes: "workspace-write", network: "danger-full-access" } as const satisfies Record<string, SandboxMode>;

/** Something a sandbox mode can deny: writing to the workspace, or reaching the network. */
export type Denied = keyof typeof ALLOWED_FROM;

const WHAT: Record<Denied, string> = { writes: "writing files", network: "network access" };

/** Checks the mode a call runs under; a missing or unknown one is a broken contract (`tools.bad_sandbox_mode`). */
export function parseSandboxMode(mode: string): SandboxMode {
  if ((SANDBOX_MODES as readonly string[]).includes(mode)) return mode as SandboxMode;
  throw new TackError("tools.bad_sandbox_mode", `sandbox_mode ${JSON.stringify(mode)} is not a sandbox mode; the caller must send one of ${SANDBOX_MODES.join(", ")}`, {
    details: { mode },
  });
}

/** True when `mode` denies `what`. */
export function denies(mode: SandboxMode, what: Denied): boolean {
  return SANDBOX_MODES.indexOf(mode) < SANDBOX_MODES.indexOf(ALLOWED_FROM[what]);
}

/**
 * The two lines that end a denied result: what was denied under which mode, and how to retry
 * once with `sandbox_permissions` set to the narrowest mode that allows all of `denied`
 * (always strictly wider than `mode`, since `mode` denies each of them).
 */
export function denialLines(mode: SandboxMode, denied: readonly Denied[], what = denied.map((d) => WHAT[d]).join(" or ")): string {
  const needed = SANDBOX_MODES[Math.max(...denied.map((d) => SANDBOX_MODES.indexOf(ALLOWED_FROM[d])))]!;
  return [
    `Denied: sandbox mode ${mode} does not allow ${what}.`,
    `To run it anyway, retry this exact call once with "sandbox_permissions": "${needed}" and a "justification" saying why; the user will be asked to approve it.`,
  ].join("\n");
}

/**
 * The optional arguments of tools that a sandbox mode can deny. Only the loop acts on them (it
 * asks for approval and then runs the call under the approved mode); tools never widen a mode.
 */
export const escalationParameters = {
  sandbox_permissions: z.enum(SANDBOX_MODES).optional().describe("Only to retry a call the sandbox denied: the mode the denial named (needs the user's approval)"),
  justification: z.string().optional().describe("With sandbox_permissions: why this call needs that mode, in one sentence shown to the user"),
};
