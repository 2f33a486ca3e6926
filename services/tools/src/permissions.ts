import { TackError } from "@tack/bus";
import { ALLOWED_FROM, isSandboxMode, modeRank, SANDBOX_MODES, type Denied, type SandboxMode } from "@tack/config";
import { z } from "zod";

export type { Denied, SandboxMode } from "@tack/config";

const WHAT: Record<Denied, string> = { writes: "writing files", network: "network access" };

/** Checks the mode a call runs under; a missing or unknown one is a broken contract (`tools.bad_sandbox_mode`). */
export function parseSandboxMode(mode: string): SandboxMode {
  if (isSandboxMode(mode)) return mode;
  throw new TackError("tools.bad_sandbox_mode", `sandbox_mode ${JSON.stringify(mode)} is not a sandbox mode; the caller must send one of ${SANDBOX_MODES.join(", ")}`, {
    details: { mode },
  });
}

/** True when `mode` denies `what`. */
export function denies(mode: SandboxMode, what: Denied): boolean {
  return modeRank(mode) < modeRank(ALLOWED_FROM[what]);
}

/**
 * The two lines that end a denied result: what was denied under which mode, and how to retry
 * once with `sandbox_permissions` set to the narrowest mode that allows all of `denied`
 * (always strictly wider than `mode`, since `mode` denies each of them).
 */
export function denialLines(mode: SandboxMode, denied: readonly Denied[], what = denied.map((d) => WHAT[d]).join(" or ")): string {
  const needed = SANDBOX_MODES[Math.max(...denied.map((d) => modeRank(ALLOWED_FROM[d])))]!;
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
