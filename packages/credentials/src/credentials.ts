import { readFile, stat } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import { TackError } from "@tack/bus";
import { isMap, isScalar, LineCounter, parseDocument } from "yaml";

/** Providers that take an API key, by their section name in the credentials file. */
export const KEYED_PROVIDERS = ["deepseek", "openai", "anthropic"] as const;

/** A provider that takes an API key. */
export type KeyedProvider = (typeof KEYED_PROVIDERS)[number];

/** One API key and where it came from (the source goes in logs, never the key). */
export interface ApiKey {
  readonly key: string;
  /** `env:DEEPSEEK_API_KEY` (and so on) or the credentials file path. */
  readonly source: string;
}

/** The API keys the llm service found, by provider. */
export type Credentials = Readonly<Partial<Record<KeyedProvider, ApiKey>>>;

/** Where to look for credentials; tests override both. */
export interface CredentialOptions {
  /** Environment to read `<PROVIDER>_API_KEY` from (default `process.env`). */
  env?: NodeJS.ProcessEnv;
  /** Home directory holding `.tack/credentials.yaml` (default the user's home). */
  home?: string;
}

/** The environment variable holding a provider's key, e.g. `DEEPSEEK_API_KEY`. */
export function keyVariable(provider: KeyedProvider): string {
  return `${provider.toUpperCase()}_API_KEY`;
}

/** The credentials file under a home directory. */
export function credentialsPath(home: string = homedir()): string {
  return join(home, ".tack", "credentials.yaml");
}

/**
 * Loads each provider's key: `<PROVIDER>_API_KEY` wins, else `~/.tack/credentials.yaml`
 * (`deepseek:\n  api_key: sk-...`, likewise `openai:` and `anthropic:`). Fails with
 * `llm.insecure_credentials` when that file is readable by group or others, even if the
 * environment has every key: a leaked key file is the problem either way.
 */
export async function loadCredentials(options: CredentialOptions = {}): Promise<Credentials> {
  const env = options.env ?? process.env;
  const path = credentialsPath(options.home);
  let sections = new Map<string, Map<string, string>>();
  let mode: number | undefined;
  try {
    mode = (await stat(path)).mode;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw unreadable(path, error);
  }
  if (mode !== undefined) {
    if ((mode & 0o077) !== 0) {
      throw new TackError(
        "llm.insecure_credentials",
        `${path} is readable by other users (mode ${(mode & 0o777).toString(8)}); restrict it with \`chmod 600 ${path}\``,
        { details: { path } },
      );
    }
    sections = parseCredentials(path, await readFile(path, "utf8").catch((error: unknown) => { throw unreadable(path, error); }));
  }
  const credentials: Partial<Record<KeyedProvider, ApiKey>> = {};
  for (const provider of KEYED_PROVIDERS) {
    const variable = keyVariable(provider);
    const fromEnv = env[variable]?.trim();
    const fromFile = sections.get(provider)?.get("api_key");
    if (fromEnv) credentials[provider] = { key: fromEnv, source: `env:${variable}` };
    else if (fromFile) credentials[provider] = { key: fromFile, source: path };
  }
  return credentials;
}

function unreadable(path: string, error: unknown): TackError {
  return new TackError("llm.bad_credentials", `cannot read ${path} (${(error as Error).message}); fix its owner and permissions (\`chmod 600 ${path}\`)`, {
    details: { path }, cause: error,
  });
}

const EXAMPLE = 'expected e.g. "deepseek:\\n  api_key: sk-..."';

/**
 * Parses the credentials file with `yaml`: a map of sections (`deepseek:`), each a map of
 * `key: value` lines; values are kept as written (the failsafe schema reads every scalar as a
 * string, so a key like `0x1F` stays as it is), optional quotes, `#` comments, and an empty
 * section or file is allowed. Errors name the line (and column), never its text, since a line
 * may hold a key.
 */
function parseCredentials(path: string, text: string): Map<string, Map<string, string>> {
  const lines = new LineCounter();
  const doc = parseDocument(text, { schema: "failsafe", prettyErrors: false, lineCounter: lines, uniqueKeys: true });
  const bad = (offset: number, what: string) => {
    const { line, col } = lines.linePos(offset);
    return new TackError("llm.bad_credentials", `${path} line ${line} ${what}; ${EXAMPLE}`, { details: { path, line: String(line), column: String(col) } });
  };
  const [syntax] = doc.errors;
  if (syntax) throw bad(syntax.pos[0], `(column ${lines.linePos(syntax.pos[0]).col}) is not valid YAML (${syntax.code})`);
  const sections = new Map<string, Map<string, string>>();
  const contents = doc.contents;
  if (contents === null || isEmpty(contents)) return sections;
  if (!isMap(contents)) throw bad(nodeOffset(contents), "is not `section:` or an indented `key: value`");
  for (const { key, value } of contents.items) {
    const name = scalarText(key);
    if (name === undefined) throw bad(nodeOffset(key), "is not `section:` or an indented `key: value`");
    const section = new Map<string, string>();
    sections.set(name, section);
    if (isEmpty(value)) continue;
    if (!isMap(value)) throw bad(nodeOffset(value), `is not an indented \`key: value\` under \`${name}:\``);
    for (const pair of value.items) {
      const field = scalarText(pair.key);
      if (field === undefined) throw bad(nodeOffset(pair.key), `is not an indented \`key: value\` under \`${name}:\``);
      const text = pair.value === null ? "" : scalarText(pair.value);
      if (text === undefined) throw bad(nodeOffset(pair.value), `holds a list or map as \`${name}.${field}\`; give one value`);
      section.set(field, text);
    }
  }
  return sections;
}

/** No value at all: an empty file, or `section:` with nothing under it. */
function isEmpty(node: unknown): boolean {
  return node === null || node === undefined || (isScalar(node) && node.value === "" && node.type === "PLAIN");
}

function scalarText(node: unknown): string | undefined {
  return isScalar(node) ? String(node.value ?? "") : undefined;
}

function nodeOffset(node: unknown): number {
  return (node as { range?: [number, number, number] } | null)?.range?.[0] ?? 0;
}
