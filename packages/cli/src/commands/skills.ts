// `tack skills list|add`: the skills the running Tack offers in a workspace, and installing skills
// from a git URL, an npm package or a local folder where the operator allows it.
import { dirname, join, resolve } from "node:path";
import { rpcSubject, SkillsRpc, TackError } from "@tack/bus";
import type { OperatorConfig } from "@tack/config";
import { SkillCatalogResponse } from "@tack/proto";
import type { SkillsCommand } from "../args.js";
import { userHome } from "../mcp-config.js";
import { repoRoot } from "../paths.js";
import { terminalSafe, terminalSafeJson } from "../sanitize.js";
import { checkInstallAllowed, classifySkillSource, existingWorkspace, fetchSkillSource, findSkills, installSkills, skillsRoot, tildePath } from "../skill-install.js";
import { Spinner } from "../spinner.js";
import { findUpState, upStateDirs } from "../state.js";
import { connectToTack, locateTack } from "../tack-bus.js";

const CATALOG_TIMEOUT_MS = 10_000;

/** Runs a `tack skills` command in `cwd`; resolves with the exit code. */
export async function skillsCommand(command: SkillsCommand, cwd: string, env: NodeJS.ProcessEnv): Promise<number> {
  return command.action === "list" ? list(command, cwd, env) : add(command, cwd, env);
}

/** What `tack skills list --json` prints. */
export interface SkillsListReport {
  readonly workspace: string;
  readonly skills: Array<{ name: string; description: string; root: string; path: string; modelInvocable: boolean; userInvocable: boolean }>;
  readonly digest: string;
  readonly warnings: string[];
}

async function list(command: Extract<SkillsCommand, { action: "list" }>, cwd: string, env: NodeJS.ProcessEnv): Promise<number> {
  const workspace = await existingWorkspace(resolve(cwd, command.workspace ?? "."));
  const location = await locateTack(cwd, env);
  if (!location.running) throw new TackError("cli.not_running", `${location.reason}; the skills service lists the skills`);
  const bus = await connectToTack(location, "tack-skills-list");
  let reply: SkillCatalogResponse;
  try {
    reply = await bus.request(SkillsRpc.Catalog, { workspace }, { timeoutMs: CATALOG_TIMEOUT_MS });
  } catch (error) {
    const failure = TackError.from(error);
    if (failure.code === "bus.no_responders") {
      throw new TackError("cli.not_running", `Tack (namespace ${location.namespace}) runs no skills service (nothing answers ${rpcSubject(bus.names.namespace, SkillsRpc.Catalog)}); restart it with \`tack down\` and \`tack up\``, { cause: error });
    }
    throw error;
  } finally {
    await bus.close().catch(() => undefined);
  }
  const report: SkillsListReport = {
    workspace, digest: reply.digest, warnings: reply.warnings,
    skills: reply.entries.map((e) => ({ name: e.name, description: e.description, root: e.source?.root ?? "", path: e.source?.path ?? "", modelInvocable: e.modelInvocable, userInvocable: e.userInvocable })),
  };
  process.stdout.write(command.json ? `${terminalSafeJson(report)}\n` : renderList(report));
  return 0;
}

function renderList(report: SkillsListReport): string {
  const lines: string[] = [];
  if (report.skills.length === 0) lines.push(`No skill is offered in ${report.workspace}: install one with \`tack skills add SOURCE\`.`);
  const width = Math.max(0, ...report.skills.map((s) => s.name.length));
  for (const skill of report.skills) {
    const who = skill.modelInvocable && skill.userInvocable ? "" : skill.modelInvocable ? " · model only" : " · /name only";
    lines.push(`${skill.name.padEnd(width)}  ${skill.root}${who}`);
    const description = skill.description.replace(/\s+/g, " ").trim();
    lines.push(`${" ".repeat(width)}  ${description.length > 160 ? `${description.slice(0, 159)}…` : description}`);
  }
  for (const warning of report.warnings) lines.push(`⚠ ${warning}`);
  return terminalSafe(`${lines.join("\n")}\n`);
}

async function add(command: Extract<SkillsCommand, { action: "add" }>, cwd: string, env: NodeJS.ProcessEnv): Promise<number> {
  const source = classifySkillSource(command.source, cwd);
  checkInstallAllowed(source, await operatorConfig(cwd, env));
  const home = userHome(env);
  const fetched = await fetchSkillSource(source, new Spinner(process.stderr));
  try {
    const found = await findSkills(fetched, source.label, command.skill);
    const installed = await installSkills(found, skillsRoot(command.scope, home, cwd), command.force);
    for (const skill of installed) {
      process.stdout.write(`✓ ${skill.replaced ? "replaced" : "installed"} skill ${skill.name} in ${tildePath(skill.path, home)}\n`);
      for (const left of skill.skipped) process.stdout.write(`  left out ${terminalSafe(left)}\n`);
    }
    process.stdout.write(`  ${command.scope === "user" ? "Every workspace" : "This workspace"} sees ${installed.length === 1 ? "it" : "them"}; \`tack skills list\` shows the catalog.\n`);
    return 0;
  } finally {
    await fetched.cleanup();
  }
}

/**
 * The operator configuration that governs installs: TACK_CONFIG or TACK_STATE_DIR when set, else the
 * state directory of the running `tack up` (beside its up.json), else the checkout's `.tack/`.
 */
async function operatorConfig(cwd: string, env: NodeJS.ProcessEnv): Promise<OperatorConfig> {
  const { loadOperatorConfig } = await import("@tack/config");
  if (env.TACK_CONFIG || env.TACK_STATE_DIR) return loadOperatorConfig(env);
  const found = await findUpState(upStateDirs(cwd)).catch(() => undefined);
  return loadOperatorConfig({ ...env, TACK_STATE_DIR: found ? dirname(found.file) : join(repoRoot, ".tack") });
}
