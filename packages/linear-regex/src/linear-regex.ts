import { RE2JS } from "re2js";
import { z } from "zod";

/**
 * Regular expressions that are not ours — a JSON Schema `pattern` a model or an MCP server wrote,
 * a hook matcher from a repository — run on RE2 (re2js, pure JavaScript): time linear in the
 * input whatever the pattern, so `^(a+)+$` on "aaaa…!" cannot hold a service for minutes the
 * way V8's backtracking engine does. RE2 has no backreferences and no lookaround (both need
 * backtracking); a pattern using them is refused with the construct named. The syntax is read as
 * JavaScript's (re2js translates `\uXXXX`, `(?<name>…)`, `[^]`); `\s`, `\w` and `\d` are ASCII.
 */
export class LinearRegExp extends RegExp {
  readonly #re2: RE2JS;
  readonly #pattern: string;

  /** Compiles `pattern` (case-sensitive unless `ignoreCase`); throws a LinearRegExpError saying what cannot run and why. */
  constructor(pattern: string, options: { readonly ignoreCase?: boolean } = {}) {
    const re2 = compileLinear(pattern, options.ignoreCase ? RE2JS.CASE_INSENSITIVE : 0);
    // The native part matches nothing and is never asked: test and exec (which every other RegExp method goes through) are RE2's.
    super("(?!)");
    this.#re2 = re2;
    this.#pattern = pattern;
  }

  /** Whether the pattern matches anywhere in `input` (RE2's DFA). */
  override test(input: string): boolean {
    return this.#re2.test(String(input));
  }

  /** The first match in `input`, shaped as RegExp.prototype.exec's (index, input, groups). */
  override exec(input: string): RegExpExecArray | null {
    return this.#re2.exec(String(input)) as RegExpExecArray | null;
  }

  /** The pattern as written (not RE2's translation). */
  override get source(): string {
    return this.#pattern;
  }

  override toString(): string {
    return `/${this.#pattern}/`;
  }
}

/** A pattern RE2 cannot run, with a message that names the construct. */
export class LinearRegExpError extends Error {}

/** `pattern` compiled for RE2, or a LinearRegExpError naming what RE2 cannot run. */
function compileLinear(pattern: string, flags = 0): RE2JS {
  const construct = unsupportedConstruct(pattern);
  if (construct) {
    throw new LinearRegExpError(`uses ${construct}: patterns here run on a linear-time engine (RE2), which has no backreferences or lookaround; rewrite the pattern without it`);
  }
  try {
    return RE2JS.compile(RE2JS.translateRegExp(pattern), flags);
  } catch (error) {
    throw new LinearRegExpError(`is not a regular expression the linear-time engine (RE2) accepts: ${(error as Error).message.replace(/^error parsing regexp: /, "")}`);
  }
}

/**
 * The first backreference or lookaround in `pattern` (outside character classes), named for the
 * person who wrote it, or undefined. RE2 would refuse these with a parse error that does not say
 * what the construct is (`\k<x>` it would even read as the letters `k<x>`).
 */
export function unsupportedConstruct(pattern: string): string | undefined {
  let inClass = false;
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c === "\\") {
      const next = pattern[i + 1] ?? "";
      if (!inClass && next >= "1" && next <= "9") return `a backreference (\`\\${next}\`)`;
      if (!inClass && next === "k" && pattern[i + 2] === "<") return "a named backreference (`\\k<name>`)";
      i++;
    } else if (inClass) {
      if (c === "]") inClass = false;
    } else if (c === "[") {
      inClass = true;
      // In JavaScript `]` right after `[` (or `[^`) closes the class: `[]` and `[^]`.
      if (pattern[i + 1] === "^") i++;
    } else if (c === "(" && pattern[i + 1] === "?") {
      const kind = pattern.slice(i + 2, i + 4);
      if (kind.startsWith("=")) return "a lookahead (`(?=`)";
      if (kind.startsWith("!")) return "a negative lookahead (`(?!`)";
      if (kind === "<=") return "a lookbehind (`(?<=`)";
      if (kind === "<!") return "a negative lookbehind (`(?<!`)";
    }
  }
  return undefined;
}

/** A `pattern` (or `patternProperties` key) of a JSON Schema that the linear-time engine refused. */
export class PatternError extends Error {
  constructor(readonly pattern: string, message: string) {
    super(message);
  }
}

/**
 * A JSON Schema from a model or an MCP server as zod (z.fromJSONSchema), its `pattern`s and
 * `patternProperties` matched by LinearRegExp. Throws PatternError for a pattern RE2 cannot run,
 * and zod's own errors for what it cannot convert.
 */
export function zodOfJsonSchema(schema: unknown): z.ZodType {
  return withLinearPatterns(patternsIn(schema), () => z.fromJSONSchema(schema as Parameters<typeof z.fromJSONSchema>[0]));
}

/**
 * Runs `build` (zod's JSON Schema conversion) with every `new RegExp(p)` of a string in `patterns`
 * made a LinearRegExp. The patterns come from the model, and zod turns `pattern` and
 * `patternProperties` into native RegExps that every later call's arguments are matched
 * against: `^(a+)+$` on 40 characters would hold this service for minutes (and then the next
 * replica, when the loop retries). zod has no option for the engine, and its conversion is
 * synchronous, so the global is swapped only for that call; strings zod itself compiles (its
 * formats) are not in `patterns` and stay native.
 */
function withLinearPatterns<T>(patterns: ReadonlySet<string>, build: () => T): T {
  if (patterns.size === 0) return build();
  const native = globalThis.RegExp;
  globalThis.RegExp = new Proxy(native, {
    construct(target, args: unknown[]) {
      const [source, flags] = args;
      if (typeof source !== "string" || !patterns.has(source)) return Reflect.construct(target, args);
      // JSON Schema patterns carry no flags; zod adds none.
      if (flags !== undefined) throw new PatternError(source, `was to be compiled with flags ${JSON.stringify(flags)}, which this service does not support`);
      globalThis.RegExp = native;
      try {
        return new LinearRegExp(source);
      } catch (error) {
        throw new PatternError(source, (error as Error).message);
      } finally {
        globalThis.RegExp = proxy;
      }
    },
  });
  const proxy = globalThis.RegExp;
  try {
    return build();
  } finally {
    globalThis.RegExp = native;
  }
}

/** Every string a schema could hand to `new RegExp`: `pattern` values and `patternProperties` keys, anywhere in it. */
function patternsIn(schema: unknown): Set<string> {
  const found = new Set<string>();
  // A stack, not recursion: the schema's depth is the model's choice.
  const stack: unknown[] = [schema];
  while (stack.length > 0) {
    const node = stack.pop();
    if (node === null || typeof node !== "object") continue;
    const record = node as Record<string, unknown>;
    if (!Array.isArray(node)) {
      if (typeof record.pattern === "string") found.add(record.pattern);
      if (record.patternProperties !== null && typeof record.patternProperties === "object") for (const key of Object.keys(record.patternProperties)) found.add(key);
    }
    for (const value of Object.values(record)) stack.push(value);
  }
  return found;
}
