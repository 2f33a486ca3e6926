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
