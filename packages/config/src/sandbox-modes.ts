// The sandbox modes and what each allows: one vocabulary for the tools, loop, sandbox and gateway.

/** The sandbox modes, narrowest first; each allows everything the ones before it allow. */
export const SANDBOX_MODES = ["read-only", "workspace-write", "danger-full-access"] as const;

/** One of SANDBOX_MODES. */
export type SandboxMode = (typeof SANDBOX_MODES)[number];

/** True when `value` names a sandbox mode. */
export function isSandboxMode(value: string): value is SandboxMode {
  return (SANDBOX_MODES as readonly string[]).includes(value);
}

/** Position of a mode from narrowest (0) to widest; -1 for an unknown mode. */
export function modeRank(mode: string): number {
  return (SANDBOX_MODES as readonly string[]).indexOf(mode);
}

/** What a sandbox mode can deny, with the narrowest mode that allows it (decision 0003). */
export const ALLOWED_FROM = { writes: "workspace-write", network: "danger-full-access" } as const satisfies Record<string, SandboxMode>;

/** Something a sandbox mode can deny: writing to the workspace, or reaching the network. */
export type Denied = keyof typeof ALLOWED_FROM;
