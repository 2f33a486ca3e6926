import { BUS_CODES, COMMON_CODES } from "./codes/bus.js";
import { CLI_CODES, LAUNCH_CODES, TESTKIT_CODES } from "./codes/cli.js";
import { GATEWAY_CODES } from "./codes/gateway.js";
import { LLM_CODES } from "./codes/llm.js";
import { LOG_CODES } from "./codes/log.js";
import { BUDGET_CODES, LOOP_CODES } from "./codes/loop.js";
import { MCP_CODES } from "./codes/mcp.js";
import { SANDBOX_CODES } from "./codes/sandbox.js";
import { SKILLS_CODES } from "./codes/skills.js";
import { TOOLS_CODES } from "./codes/tools.js";
import type { ErrorSpec } from "./spec.js";

/**
 * Every error code Tack throws, with its HTTP and gRPC status, retryable default and meaning.
 * `packages/errors/test/catalogue.test.ts` fails when the sources throw a code missing here or
 * when an entry here is thrown nowhere; `docs/errors.md` is generated from it.
 */
export const CATALOGUE = {
  ...COMMON_CODES,
  ...BUS_CODES,
  ...GATEWAY_CODES,
  ...LOOP_CODES,
  ...BUDGET_CODES,
  ...LLM_CODES,
  ...TOOLS_CODES,
  ...SANDBOX_CODES,
  ...LOG_CODES,
  ...SKILLS_CODES,
  ...MCP_CODES,
  ...CLI_CODES,
  ...LAUNCH_CODES,
  ...TESTKIT_CODES,
} as const satisfies Record<string, ErrorSpec>;

/** A code in the catalogue; `"x.y" satisfies ErrorCode` checks a literal at compile time. */
export type ErrorCode = keyof typeof CATALOGUE;

/** Where the codes of each prefix come from, in the order `docs/errors.md` lists them. */
export const AREAS: readonly { readonly prefix: string; readonly source: string; readonly about: string }[] = [
  { prefix: "internal", source: "packages/bus", about: "What `TackError.from` calls a failure nobody gave a code." },
  { prefix: "config", source: "packages/bus, services/loop", about: "Configuration refused when a service starts." },
  { prefix: "bus", source: "packages/bus", about: "The message bus: NATS requests, replies, credentials and permissions." },
  { prefix: "gateway", source: "services/gateway", about: "The HTTP API: authentication, request validation, tenant limits, workspaces, the session index." },
  { prefix: "loop", source: "services/loop", about: "Sessions, turns, approvals, questions, plans and modes." },
  { prefix: "budget", source: "services/loop", about: "Session and tenant budgets, checked before every model call." },
  { prefix: "llm", source: "services/llm", about: "Model references, providers, credentials and prices." },
  { prefix: "tools", source: "services/tools", about: "Tool definitions and the rules and hooks files read in the sandbox." },
  { prefix: "sandbox", source: "services/sandbox", about: "Containers, managed workspaces, Docker and the sandbox host." },
  { prefix: "log", source: "packages/log", about: "The session log on JetStream." },
  { prefix: "skills", source: "services/skills", about: "The skills registry." },
  { prefix: "mcp", source: "services/mcp", about: "The MCP bridge and its servers." },
  { prefix: "cli", source: "packages/cli", about: "The `tack` command; these never cross HTTP." },
  { prefix: "launch", source: "packages/cli", about: "`tack up`'s launcher; these never cross HTTP." },
  { prefix: "testkit", source: "packages/testkit", about: "Tack's own test kit; only tests see these." },
];

/** Whether `code` is in the catalogue. */
export function isErrorCode(code: string): code is ErrorCode {
  return Object.hasOwn(CATALOGUE, code);
}

/** The catalogue's entry for `code`, or undefined for a code it does not hold. */
export function errorSpec(code: string): ErrorSpec | undefined {
  return isErrorCode(code) ? CATALOGUE[code] : undefined;
}
