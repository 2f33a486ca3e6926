import { readFile, stat } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import { TackError } from "@tack/bus";

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

/**
 * Parses the two-level YAML subset the credentials file uses: `section:` lines, indented
 * `key: value` lines under them, optional quotes, `#` comments. Errors name the line
 * number only, since a line may hold a key.
 */
function parseCredentials(path: string, text: string): Map<string, Map<string, string>> {
  const sections = new Map<string, Map<string, string>>();
  let current: Map<string, string> | undefined;
  for (const [i, raw] of text.split(/\r?\n/).entries()) {
    const line = raw.replace(/\s+#.*$|^\s*#.*$/, "").trimEnd();
    if (line.trim() === "") continue;
    const match = /^(\s*)([A-Za-z0-9_-]+):\s*(.*)$/.exec(line);
    const indented = match?.[1] !== "";
    if (!match || (indented && !current) || (!indented && match[3] !== "")) {
      throw new TackError("llm.bad_credentials", `${path} line ${i + 1} is not \`section:\` or an indented \`key: value\`; expected e.g. "deepseek:\\n  api_key: sk-..."`, {
        details: { path, line: String(i + 1) },
      });
    }
    if (!indented) sections.set(match[2]!, (current = new Map()));
    else current!.set(match[2]!, unquote(match[3]!));
  }
  return sections;
}

function unquote(value: string): string {
  const quoted = /^(["'])(.*)\1$/.exec(value);
  return quoted ? quoted[2]! : value;
}
