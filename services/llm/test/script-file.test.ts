import { execFileSync } from "node:child_process";
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { TackError } from "@tack/bus";
import { CompleteRequest, Role } from "@tack/proto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jsonErrorOffset, lineAndColumn } from "../src/json-syntax.js";
import type { ProviderEntry } from "../src/provider.js";
import { replayProvider } from "../src/replay.js";
import { scriptedProvider } from "../src/scripted.js";
import type { ScriptFileOptions } from "../src/script-file.js";

// A string that must never leave a file through an error: its appearance anywhere in a
// serialized error (message, details, cause) is a leak.
const SECRET = "tack-canary-7f3a9c1e";

let root: string;
let allowed: string;
let second: string;
let outsideDir: string;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "tack-script-file-"));
  allowed = join(root, "allowed");
  second = join(root, "second");
  outsideDir = join(root, "outside");
  for (const dir of [allowed, second, outsideDir]) await mkdir(dir);
  await writeFile(join(allowed, "ok.json"), JSON.stringify({ replies: [{ content: "from allowed" }] }));
  await mkdir(join(allowed, "sub"));
  await writeFile(join(allowed, "sub", "nested.json"), JSON.stringify({ replies: [{ content: "nested" }] }));
  await writeFile(join(second, "only-second.json"), JSON.stringify({ replies: [{ content: "from second" }] }));
  await writeFile(join(outsideDir, "secret.json"), JSON.stringify({ replies: [{ content: SECRET }] }));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

const request = (model: string) => CompleteRequest.fromPartial({
  sessionId: "s1", model, systemPrompt: "You are Tack.", messages: [{ role: Role.ROLE_USER, content: "hi" }],
});

/** Runs `check` then `complete` of `reference`; resolves with the completion's text or rejects with the TackError. */
async function complete(entry: ProviderEntry, reference: string): Promise<string> {
  const provider = entry.create(reference)!;
  await provider.check();
  return (await provider.complete(request(`${entry.form.split(":")[0]}:${reference}`), () => undefined, new AbortController().signal)).content;
}

async function refusal(entry: ProviderEntry, reference: string): Promise<TackError> {
  const error = await complete(entry, reference).then(() => undefined, (e: unknown) => e);
  expect(error).toBeInstanceOf(TackError);
  expect((error as TackError).code).toBe("llm.bad_script");
  return error as TackError;
}

/** Everything an error could carry anywhere: message, details, the wire form and the cause chain. */
function serialized(error: TackError): string {
  const causes: unknown[] = [];
  for (let cause = (error as Error).cause; cause !== undefined; cause = (cause as Error).cause) causes.push(cause instanceof Error ? { message: cause.message, stack: cause.stack } : cause);
  return JSON.stringify({ message: error.message, stack: error.stack, details: error.details, bus: error.toBusError(), causes });
}

const scripted = (options: Partial<ScriptFileOptions> = {}) => scriptedProvider({ scriptDirs: [allowed, second], ...options });

describe("script files", () => {
  it("script files - /etc/passwd is refused as outside the script directories, with nothing of its content", async () => {
    const passwd = await readFile("/etc/passwd", "utf8");
    const error = await refusal(scripted(), "/etc/passwd");
    expect(error.message).toContain("script /etc/passwd is outside the script directories");
    expect(error.message).toContain(`${allowed}, ${second}`);
    expect(error.details).toMatchObject({ file: "/etc/passwd", reason: "outside_script_dirs" });
    const text = serialized(error);
    for (const line of passwd.split("\n").filter((l) => l !== "")) expect(text).not.toContain(line);
    expect(text).not.toContain("root:");
    // A path that does not exist outside gets the same answer: no probing of the host's files.
    const missing = await refusal(scripted(), "/etc/tack-no-such-file");
    expect(missing.details.reason).toBe("outside_script_dirs");
  });

  it("script files - a relative reference resolves inside the directories, in order", async () => {
    expect(await complete(scripted(), "ok.json")).toBe("from allowed");
    expect(await complete(scripted(), "sub/nested.json")).toBe("nested");
    expect(await complete(scripted(), "only-second.json")).toBe("from second");
    expect(await complete(scripted(), join(allowed, "ok.json"))).toBe("from allowed");
    const missing = await refusal(scripted(), "absent.json");
    expect(missing.message).toContain("(ENOENT)");
    expect(missing.message).toContain(`${allowed}, ${second}`);
  });

  it("script files - `..` cannot climb out of a directory, relative or absolute", async () => {
    for (const reference of ["../outside/secret.json", "sub/../../outside/secret.json", `${allowed}/../outside/secret.json`]) {
      const error = await refusal(scripted(), reference);
      expect(error.details.reason).toBe("outside_script_dirs");
      expect(serialized(error)).not.toContain(SECRET);
    }
  });

  it("script files - a symlink inside a directory that leads outside is refused without naming its target", async () => {
    await symlink(join(outsideDir, "secret.json"), join(allowed, "escape.json"));
    await symlink(outsideDir, join(allowed, "escape-dir"));
    for (const reference of ["escape.json", join(allowed, "escape.json"), "escape-dir/secret.json"]) {
      const error = await refusal(scripted(), reference);
      expect(error.details.reason).toBe("outside_script_dirs");
      expect(error.message).toContain("through a symbolic link");
      expect(serialized(error)).not.toContain(outsideDir);
      expect(serialized(error)).not.toContain(SECRET);
    }
    // A symlink from one allowed directory into another is fine.
    await symlink(join(second, "only-second.json"), join(allowed, "link-to-second.json"));
    expect(await complete(scripted(), "link-to-second.json")).toBe("from second");
  });

  it("script files - /dev/urandom is refused at once, whether outside or inside a script directory", async () => {
    const started = performance.now();
    expect((await refusal(scripted(), "/dev/urandom")).details.reason).toBe("outside_script_dirs");
    const device = await refusal(scripted({ scriptDirs: ["/dev"] }), "/dev/urandom");
    expect(device.details).toMatchObject({ reason: "not_regular_file", file_type: "a character device" });
    expect(device.message).toContain("script /dev/urandom is not a regular file (it is a character device)");
    expect(performance.now() - started).toBeLessThan(1_000);
  });

  it("script files - a FIFO in a script directory is refused at once instead of hanging", async () => {
    const fifo = join(allowed, "pipe.json");
    execFileSync("mkfifo", [fifo]);
    await symlink(fifo, join(allowed, "pipe-link.json"));
    const started = performance.now();
    for (const reference of ["pipe.json", "pipe-link.json"]) {
      const error = await refusal(scripted(), reference);
      expect(error.details).toMatchObject({ reason: "not_regular_file", file_type: "a FIFO" });
    }
    expect((await refusal(scripted(), "sub")).details).toMatchObject({ reason: "not_regular_file", file_type: "a directory" });
    expect(performance.now() - started).toBeLessThan(1_000);
  }, 5_000);

  it("script files - a file over the cap is refused naming its size and the cap, before it is read", async () => {
    await writeFile(join(allowed, "big.json"), JSON.stringify({ replies: [{ content: `${SECRET}${"x".repeat(2_000)}` }] }));
    const error = await refusal(scripted({ maxScriptBytes: 1_024 }), "big.json");
    const size = (await readFile(join(allowed, "big.json"))).length;
    expect(error.message).toContain(`is too large: ${size} bytes, the cap is 1024 bytes`);
    expect(error.details).toMatchObject({ reason: "too_large", size_bytes: String(size), max_bytes: "1024" });
    expect(serialized(error)).not.toContain(SECRET);
    // Exactly at the cap is fine.
    const exact = JSON.stringify({ replies: [{ content: "" }] });
    await writeFile(join(allowed, "exact.json"), exact);
    expect(await complete(scripted({ maxScriptBytes: Buffer.byteLength(exact) }), "exact.json")).toBe("");
  });

  it("script files - invalid JSON is refused by position only, never quoting the file", async () => {
    const cases = [
      SECRET,
      `{"replies": [{"content": ${SECRET}}]}`,
      `{"replies": [{"content": "ok"}]}\n"${SECRET}"`,
      `{"replies": [{"content": "${SECRET}`,
      `{"${SECRET}" "x"}`,
    ];
    for (const [i, text] of cases.entries()) {
      await writeFile(join(allowed, `broken-${i}.json`), text);
      const error = await refusal(scripted(), `broken-${i}.json`);
      expect(error.message).toMatch(/is not valid JSON \(at line \d+ column \d+\)/);
      expect(error.cause).toBeUndefined();
      expect(serialized(error)).not.toContain(SECRET);
      expect(serialized(error)).not.toContain(SECRET.slice(0, 8));
    }
    const error = await refusal(scripted(), "broken-2.json");
    expect(error.message).toContain("(at line 2 column 1)");
  });

  it("script files - a schema problem names the field and the expected type, never the value or an unknown key", async () => {
    const cases: [unknown, string][] = [
      [{ replies: [{ content: { nested: SECRET } }] }, "replies[0].content: expected a string"],
      [{ replies: [{ content: "ok", tool_calls: [{ name: "read", arguments: SECRET }] }] }, "replies[0].tool_calls[0].arguments: expected a JSON object"],
      [{ replies: [{ content: "ok", [SECRET]: 1 }] }, "replies[0]: has a field that is not allowed (allowed: content, reasoning, tool_calls, finish_reason)"],
      [{ [SECRET]: 1, replies: [] }, "the top level: has a field that is not allowed (allowed: cache, replies)"],
      [{ cache: { block_tokens: 1.5 }, replies: [] }, "cache.block_tokens: expected a whole number"],
      [SECRET, "the top level: expected a JSON object"],
    ];
    for (const [i, [script, problem]] of cases.entries()) {
      await writeFile(join(allowed, `schema-${i}.json`), JSON.stringify(script));
      const error = await refusal(scripted(), `schema-${i}.json`);
      expect(error.message).toContain(problem);
      expect(serialized(error)).not.toContain(SECRET);
    }
  });

  it("script files - a recording is held to the same rules, and a broken line is named by line and column only", async () => {
    const replay = replayProvider({ scriptDirs: [allowed] });
    expect((await refusal(replay, "/etc/passwd")).message).toContain("recording /etc/passwd is outside the script directories");
    await symlink(join(outsideDir, "secret.json"), join(allowed, "escape.jsonl"));
    expect((await refusal(replay, "escape.jsonl")).details.reason).toBe("outside_script_dirs");
    const good = JSON.stringify({ seq: 1, type: "assistant/message", assistantMessage: { turn: 1, step: 1, content: "Hi." } });
    await writeFile(join(allowed, "broken.jsonl"), `${good}\n{"seq": 2, "type": ${SECRET}}\n`);
    const error = await refusal(replay, "broken.jsonl");
    expect(error.message).toContain("line 2 is not JSON (at column 21)");
    expect(serialized(error)).not.toContain(SECRET);
    await writeFile(join(allowed, "big.jsonl"), `${good}\n`.repeat(100));
    expect((await refusal(replayProvider({ scriptDirs: [allowed], maxScriptBytes: 1_000 }), "big.jsonl")).details.reason).toBe("too_large");
  });

  it("script files - relative directories, a zero cap and no directories at all are refused", async () => {
    expect(() => scriptedProvider({ scriptDirs: ["examples"] })).toThrow(/not an absolute path/);
    expect(() => scriptedProvider({ scriptDirs: [allowed], maxScriptBytes: 0 })).toThrow(/not a positive whole number/);
    const none = await refusal(scriptedProvider({ scriptDirs: [] }), "ok.json");
    expect(none.message).toContain("no script directories are configured");
  });
});

describe("json positions", () => {
  it("json positions - the first offending character, or the end of text when it stops early", () => {
    expect(jsonErrorOffset('{"a": [1, 2, {"b": null}], "c": "\\u00e9"}')).toBeUndefined();
    expect(jsonErrorOffset("hello")).toBe(0);
    expect(jsonErrorOffset('{"a":1,}')).toBe(7);
    expect(jsonErrorOffset('{"a":1')).toBe(6);
    expect(jsonErrorOffset("[1.]")).toBe(3);
    expect(jsonErrorOffset('"\\x"')).toBe(2);
    expect(jsonErrorOffset("01")).toBe(1);
    expect(jsonErrorOffset('"tab\there"')).toBe(4);
    expect(jsonErrorOffset(`${"[".repeat(100_000)}${"]".repeat(100_000)}`)).toBeUndefined();
    expect(lineAndColumn("ab\ncd\nef", 7)).toEqual({ line: 3, column: 2 });
  });

  it("json positions - agree with JSON.parse on what is valid and, where V8 names it, on the position", () => {
    const seeds = ['{"a":[1,2.5e3,-0,true,false,null,"x\\u00e9\\n"],"b":{"c":{}},"d":[]}', "[]", '"s"', "0", ' {"k" : [ [ ] , { } ] } '];
    const alphabet = [..."{}[],:\"\\u01-.eE+trnlfas \n\tx"];
    let seed = 42;
    const random = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    for (let round = 0; round < 20_000; round++) {
      let text = seeds[random(seeds.length)]!;
      for (let edit = 0; edit <= random(3); edit++) {
        const at = random(text.length + 1);
        const char = alphabet[random(alphabet.length)]!;
        text = [text.slice(0, at) + char + text.slice(at), text.slice(0, at) + text.slice(at + 1), text.slice(0, at) + char + text.slice(at + 1)][random(3)]!;
      }
      let position: number | undefined;
      let valid = true;
      try {
        JSON.parse(text);
      } catch (error) {
        valid = false;
        const match = /position (\d+)/.exec((error as Error).message);
        position = match ? Number(match[1]) : undefined;
      }
      const offset = jsonErrorOffset(text);
      expect(offset === undefined, text).toBe(valid);
      if (position !== undefined) expect(offset, text).toBe(position);
    }
  });
});
