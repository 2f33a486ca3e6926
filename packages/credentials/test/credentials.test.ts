import { chmod, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { credentialsPath, loadCredentials } from "../src/index.js";

let home: string;
beforeEach(async () => {
  home = await mkdtemp(join(tmpdir(), "tack-home-"));
  await mkdir(join(home, ".tack"));
});
afterEach(() => rm(home, { recursive: true, force: true }));

async function writeCredentials(text: string, mode: number): Promise<string> {
  const path = credentialsPath(home);
  await writeFile(path, text);
  await chmod(path, mode);
  return path;
}

async function rejection(promise: Promise<unknown>): Promise<Error> {
  return promise.then(() => {
    throw new Error("expected a failure");
  }, (error: unknown) => error as Error);
}

describe("credentials", () => {
  it("credentials - the environment key wins over the file", async () => {
    await writeCredentials("deepseek:\n  api_key: sk-from-file\n", 0o600);
    expect(await loadCredentials({ home, env: { DEEPSEEK_API_KEY: "sk-from-env" } })).toEqual({
      deepseek: { key: "sk-from-env", source: "env:DEEPSEEK_API_KEY" },
    });
  });

  it("credentials - the file key is used without an environment key", async () => {
    const path = await writeCredentials("# Tack credentials\nother:\n  token: x\n\ndeepseek:\n  api_key: \"sk-from-file\"  # personal key\n", 0o600);
    expect(await loadCredentials({ home, env: {} })).toEqual({ deepseek: { key: "sk-from-file", source: path } });
  });

  it("credentials - each provider has its own variable and section", async () => {
    const path = await writeCredentials("deepseek:\n  api_key: sk-ds\nopenai:\n  api_key: sk-oa-file\nanthropic:\n  api_key: sk-ant-file\n", 0o600);
    expect(await loadCredentials({ home, env: { OPENAI_API_KEY: "sk-oa-env" } })).toEqual({
      deepseek: { key: "sk-ds", source: path },
      openai: { key: "sk-oa-env", source: "env:OPENAI_API_KEY" },
      anthropic: { key: "sk-ant-file", source: path },
    });
    expect(await loadCredentials({ home, env: { ANTHROPIC_API_KEY: " sk-ant-env " } })).toMatchObject({ anthropic: { key: "sk-ant-env", source: "env:ANTHROPIC_API_KEY" } });
  });

  it("credentials - nothing configured gives no key", async () => {
    expect(await loadCredentials({ home, env: {} })).toEqual({});
  });

  it("credentials - a file readable by others fails with the chmod fix", async () => {
    for (const mode of [0o644, 0o640]) {
      const path = await writeCredentials("deepseek:\n  api_key: sk-from-file\n", mode);
      const error = await rejection(loadCredentials({ home, env: { DEEPSEEK_API_KEY: "sk-from-env" } }));
      expect(error).toMatchObject({ code: "llm.insecure_credentials" });
      expect(error.message).toContain(`chmod 600 ${path}`);
    }
  });

  it("credentials - a malformed file names the line but not its text", async () => {
    await writeCredentials("deepseek:\n  api_key sk-secret-value\n", 0o600);
    const error = await rejection(loadCredentials({ home, env: {} }));
    expect(error).toMatchObject({ code: "llm.bad_credentials" });
    expect(error.message).toContain("line 2");
    expect(error.message).not.toContain("sk-secret-value");
  });

  it("credentials - the file is YAML: comments, quotes, empty sections and values kept exactly as written", async () => {
    const path = await writeCredentials("# keys\nopenai:\n\ndeepseek:\n  api_key: 0x1F  # not a number\nanthropic:\n  api_key: 'sk-ant #1'\n  note: null\n", 0o600);
    expect(await loadCredentials({ home, env: {} })).toEqual({ deepseek: { key: "0x1F", source: path }, anthropic: { key: "sk-ant #1", source: path } });
    await writeCredentials("", 0o600);
    expect(await loadCredentials({ home, env: {} })).toEqual({});
  });

  it("credentials - invalid YAML and a wrong shape are refused with the line, never the line's text", async () => {
    const cases: Array<[string, number]> = [
      ["deepseek:\n  api_key: \"sk-secret-value\n", 3], // unterminated quote
      ["deepseek:\n\tapi_key: sk-secret-value\n", 2], // tab indentation
      ["deepseek:\n  api_key: sk-secret-value\n  api_key: sk-secret-value\n", 3], // the same key twice
      ["deepseek: sk-secret-value\n", 1], // a value where a section belongs
      ["deepseek:\n  api_key: [sk-secret-value]\n", 2], // a list where one value belongs
      ["- sk-secret-value\n", 1], // not sections at all
    ];
    for (const [text, line] of cases) {
      await writeCredentials(text, 0o600);
      const error = await rejection(loadCredentials({ home, env: {} }));
      expect(error, text).toMatchObject({ code: "llm.bad_credentials", details: { line: String(line) } });
      expect(error.message, text).toContain(`line ${line} `);
      expect(error.message, text).toContain("api_key: sk-...");
      expect(error.message, text).not.toContain("sk-secret-value");
    }
  });
});
