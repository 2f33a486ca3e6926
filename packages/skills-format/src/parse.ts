// One skill file: front matter (YAML between leading `---` lines) checked with zod, and the body.
import { parse as parseYaml } from "yaml";
import { z } from "zod";

/** Longest description a catalog entry carries; the whole one stays in the file. */
export const DESCRIPTION_CAP = 500;

const NAME = /^[a-z0-9]+(?:-[a-z0-9]+)*$/;

/** Whether `name` is a valid skill name: lowercase letters, digits and single inner hyphens, at most 64 characters. */
export function validName(name: string): boolean {
  return name.length <= 64 && NAME.test(name);
}

// Unknown fields (license, allowed-tools, metadata...) are kept out of the catalog, not refused:
// skills written for other harnesses must still load.
const FrontMatter = z.looseObject({
  name: z.string().refine(validName, "must be 1-64 lowercase letters, digits or single hyphens between them (e.g. pdf-forms)").optional(),
  description: z.string().trim().min(1, "must not be empty"),
  "disable-model-invocation": z.boolean().optional(),
  "user-invocable": z.boolean().optional(),
});

/** A skill file that parsed. */
export interface ParsedSkill {
  readonly name: string;
  readonly description: string;
  readonly modelInvocable: boolean;
  readonly userInvocable: boolean;
  /** The text after the front matter. */
  readonly body: string;
}

/** What is wrong with a skill file, in one line: file, field, problem, fix. */
export class SkillProblem extends Error {}

/**
 * Longest front matter parsed. YAML parsers are not linear on hostile input (the yaml package
 * checks each key against all before it, and nests by recursion): 190 KB of `k1: v` lines took
 * 3 s, and a skill file may have 256 KB. A front matter holds a name, a description (at most
 * 1,024 characters by the Agent Skills spec) and a few short fields, so 8 KB is plenty, and
 * the worst 8 KB that passes nestingOf parses in about 200 ms.
 */
export const MAX_FRONT_MATTER_CHARS = 8 * 1024;
/** Deepest nesting of flow collections (`[`, `{`) or compact entries (`- - -`) parsed; deeper is refused before the parser recurses into a stack overflow. */
export const MAX_FRONT_MATTER_DEPTH = 32;

/**
 * An upper bound of how deep `yaml` nests: open `[`/`{` outside quotes, plus `- ` or `? `
 * entries opened on one line. Linear, and conservative (a bracket in a plain scalar counts).
 */
function nestingOf(yaml: string): number {
  let deepest = 0;
  let flow = 0;
  let quote = "";
  let compact = 0;
  let lineStart = true;
  for (let i = 0; i < yaml.length; i++) {
    const c = yaml[i]!;
    if (c === "\n") {
      lineStart = true;
      compact = 0;
      continue;
    }
    if (quote) {
      if (c === quote) quote = "";
      continue;
    }
    if (c === '"' || c === "'") quote = c;
    else if (c === "[" || c === "{") flow++;
    else if (c === "]" || c === "}") flow = Math.max(0, flow - 1);
    else if ((c === "-" || c === "?" || c === ":") && yaml[i + 1] === " " && (lineStart || compact > 0)) compact++;
    else if (c !== " ") lineStart = false;
    deepest = Math.max(deepest, flow + compact);
  }
  return deepest;
}

const FENCE = /^---[ \t]*\r?\n/;
const CLOSE = /^---[ \t]*$/m;

/**
 * Parses skill file `path` whose default name (folder or file name) is `fallbackName`. Throws a
 * SkillProblem naming the file and the field when the skill cannot be used.
 */
export function parseSkill(path: string, text: string, fallbackName: string): ParsedSkill {
  const source = text.replace(/^\uFEFF/, "");
  if (!FENCE.test(source)) {
    throw new SkillProblem(`${path}: no front matter, so field "description" is missing; start the file with "---", a line "description: <what it does and when to use it>" and "---"`);
  }
  const rest = source.replace(FENCE, "");
  const close = CLOSE.exec(rest);
  if (!close) throw new SkillProblem(`${path}: the front matter is never closed; add a line "---" after its last field`);
  const yamlText = rest.slice(0, close.index);
  if (yamlText.length > MAX_FRONT_MATTER_CHARS) {
    throw new SkillProblem(`${path}: the front matter is ${yamlText.length} characters, more than the ${MAX_FRONT_MATTER_CHARS} a skill's may have; keep name, description and short fields there and move the rest into the body`);
  }
  if (nestingOf(yamlText) > MAX_FRONT_MATTER_DEPTH) {
    throw new SkillProblem(`${path}: the front matter nests more than ${MAX_FRONT_MATTER_DEPTH} levels deep (lists or maps in lists or maps); flatten it`);
  }
  const body = rest.slice(close.index + close[0].length).replace(/^\r?\n/, "");
  let data: unknown;
  try {
    data = parseYaml(yamlText);
  } catch (error) {
    throw new SkillProblem(`${path}: the front matter is not valid YAML (${(error as Error).message.split("\n")[0]}); fix its syntax`);
  }
  if (data === null || typeof data !== "object" || Array.isArray(data)) {
    throw new SkillProblem(`${path}: the front matter is not a mapping of fields, so field "description" is missing; write "description: <text>" between the "---" lines`);
  }
  const checked = FrontMatter.safeParse(data);
  if (!checked.success) {
    // One warning per file: the first problem is enough to act on.
    const issue = checked.error.issues[0]!;
    const field = String(issue.path[0] ?? "front matter");
    const value = (data as Record<string, unknown>)[field];
    const problem = value === undefined ? "is missing" : issue.code === "invalid_type" ? `must be a ${issue.expected}, not ${JSON.stringify(value)}` : `${issue.message} (got ${JSON.stringify(value)})`;
    throw new SkillProblem(`${path}: field "${field}" ${problem}`);
  }
  const name = checked.data.name ?? fallbackName;
  if (!validName(name)) {
    throw new SkillProblem(`${path}: field "name" is missing and the ${JSON.stringify(fallbackName)} it defaults to is not a valid name; add "name: <1-64 lowercase letters, digits or hyphens>" to the front matter`);
  }
  return {
    name,
    description: checked.data.description,
    modelInvocable: checked.data["disable-model-invocation"] !== true,
    userInvocable: checked.data["user-invocable"] !== false,
    body,
  };
}

/** `description` cut to DESCRIPTION_CAP characters (code points, so no surrogate is split). */
export function capDescription(description: string): string {
  const chars = Array.from(description);
  return chars.length <= DESCRIPTION_CAP ? description : chars.slice(0, DESCRIPTION_CAP).join("");
}
