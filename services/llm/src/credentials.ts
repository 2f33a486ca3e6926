import { readFile, stat } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import { TackError } from "@tack/bus";

/** API keys the llm service found, and where each came from (never the key itself in logs). */
export interface Credentials {
  /** The DeepSeek API key, if any. */
  readonly deepseekApiKey?: string;
  /** `env:DEEPSEEK_API_KEY` or the credentials file path; set when `deepseekApiKey` is. */
  readonly deepseekKeySource?: string;
}

/** Where to look for credentials; tests override both. */
export interface CredentialOptions {
  /** Environment to read `DEEPSEEK_API_KEY` from (default `process.env`). */
  env?: NodeJS.ProcessEnv;
  /** Home directory holding `.tack/credentials.yaml` (default the user's home). */
  home?: string;
}

/** The credentials file under a home directory. */
export function credentialsPath(home: string = homedir()): string {
  return join(home, ".tack", "credentials.yaml");
}

/**
 * Loads the DeepSeek key: `DEEPSEEK_API_KEY` wins, else `~/.tack/credentials.yaml`
 * (`deepseek:\n  api_key: sk-...`). Fails with `llm.insecure_credentials` when that file is
 * readable by group or others, even if the environment has a key: a leaked key file is the
 * problem either way.
 */
export async function loadCredentials(options: CredentialOptions = {}): Promise<Credentials> {
  const env = options.env ?? process.env;
  const path = credentialsPath(options.home);
  let mode: number;
  try {
    mode = (await stat(path)).mode;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw unreadable(path, error);
    return fromEnv(env) ?? {};
  }
  if ((mode & 0o077) !== 0) {
    throw new TackError(
      "llm.insecure_credentials",
      `${path} is readable by other users (mode ${(mode & 0o777).toString(8)}); restrict it with \`chmod 600 ${path}\``,
      { details: { path } },
    );
  }
  const fileKey = parseCredentials(path, await readFile(path, "utf8").catch((error: unknown) => { throw unreadable(path, error); }))
    .get("deepseek")?.get("api_key");
  return fromEnv(env) ?? (fileKey ? { deepseekApiKey: fileKey, deepseekKeySource: path } : {});
}

function fromEnv(env: NodeJS.ProcessEnv): Credentials | undefined {
  const key = env.DEEPSEEK_API_KEY?.trim();
  return key ? { deepseekApiKey: key, deepseekKeySource: "env:DEEPSEEK_API_KEY" } : undefined;
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
