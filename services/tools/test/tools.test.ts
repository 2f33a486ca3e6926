import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { spillObjectName } from "@tack/log";
import { makeWorkspace, type Workspace } from "./support/call.js";

let ws: Workspace;
beforeEach(async () => {
  ws = await makeWorkspace();
});
afterEach(async () => {
  await ws.remove();
});

const lines = (count: number) => Array.from({ length: count }, (_, i) => `line ${i + 1}`).join("\n") + "\n";

describe("read", () => {
  it("read - numbers lines like cat -n", async () => {
    await writeFile(join(ws.root, "a.txt"), "alpha\nbeta\n");
    const result = await ws.call("read", { path: "a.txt" });
    expect(result).toMatchObject({ content: "     1\talpha\n     2\tbeta", isError: false });
  });

  it("read - offset and limit select a window and say how to continue", async () => {
    await writeFile(join(ws.root, "long.txt"), lines(10));
    const result = await ws.call("read", { path: "long.txt", offset: 3, limit: 2 });
    expect(result.content).toBe("     3\tline 3\n     4\tline 4\n\n(showing lines 3-4 of 10; read more with offset=5)");
    const tail = await ws.call("read", { path: "long.txt", offset: 9 });
    expect(tail.content).toBe("     9\tline 9\n    10\tline 10");
  });

  it("read - reads 2000 lines by default", async () => {
    await writeFile(join(ws.root, "big.txt"), lines(2500).replace(/line /g, ""));
    const result = await ws.call("read", { path: "big.txt" });
    expect(result.content).toContain("  2000\t2000\n\n(showing lines 1-2000 of 2500; read more with offset=2001)");
  });

  it("read - stops early on long output with a clean place to continue", async () => {
    await writeFile(join(ws.root, "wide.txt"), Array.from({ length: 100 }, () => "x".repeat(1000)).join("\n"));
    const result = await ws.call("read", { path: "wide.txt" });
    expect(result.content.length).toBeLessThan(50_000);
    expect(result.content).toMatch(/\n\n\(showing lines 1-(\d+) of 100; read more with offset=\d+\)$/);
  });

  it("read - cuts very long lines", async () => {
    await writeFile(join(ws.root, "min.js"), "y".repeat(5000));
    const result = await ws.call("read", { path: "min.js" });
    expect(result.content).toBe(`     1\t${"y".repeat(2000)}... (line cut at 2000 characters)`);
  });

  it("read - absolute paths under /workspace work like relative ones", async () => {
    await writeFile(join(ws.root, "a.txt"), "alpha\n");
    expect((await ws.call("read", { path: "/workspace/a.txt" })).content).toBe("     1\talpha");
  });

  it("read - missing files, directories and offsets past the end are errors", async () => {
    await mkdir(join(ws.root, "dir"));
    await writeFile(join(ws.root, "short.txt"), "one\n");
    expect(await ws.call("read", { path: "nope.txt" })).toMatchObject({ content: "File not found: nope.txt", isError: true });
    expect(await ws.call("read", { path: "dir" })).toMatchObject({ content: "dir is a directory, not a file; list its files with glob", isError: true });
    expect(await ws.call("read", { path: "short.txt", offset: 5 })).toMatchObject({
      content: "offset 5 is past the end of short.txt, which has 1 lines",
      isError: true,
    });
  });

  it("read - an empty file says so", async () => {
    await writeFile(join(ws.root, "empty.txt"), "");
    expect(await ws.call("read", { path: "empty.txt" })).toMatchObject({ content: "(empty.txt is empty)", isError: false });
  });
});

describe("read a spilled result", () => {
  const spill = (callId: string, text: string, sessionId = "s1", tenant = "t1") =>
    ws.spilled.set(spillObjectName({ tenant, sessionId }, callId), Buffer.from(text, "utf8"));

  it("read - a tack-spill path reads the session's spilled result exactly as the same text in a file reads", async () => {
    const text = `${lines(3000)}${"w".repeat(2500)}\n\nlast`;
    spill("call_7", text);
    await writeFile(join(ws.root, "same.txt"), text);
    for (const window of [{}, { offset: 2990, limit: 5 }, { offset: 2001 }, { offset: 3001 }, { offset: 3003 }]) {
      const fromSpill = await ws.call("read", { path: "tack-spill:call_7", ...window });
      const fromFile = await ws.call("read", { path: "same.txt", ...window });
      expect(fromSpill).toMatchObject({ isError: false, content: fromFile.content });
    }
    const past = await ws.call("read", { path: "tack-spill:call_7", offset: 4000 });
    expect(past).toMatchObject({ isError: true, content: "offset 4000 is past the end of tack-spill:call_7, which has 3003 lines" });
  });

  it("read - another session's spilled result, or one that does not exist, is not found", async () => {
    spill("call_7", "secret of s2\n", "s2");
    spill("call_8", "secret of another tenant\n", "s1", "t2");
    for (const callId of ["call_7", "call_8", "nothing"]) {
      expect(await ws.call("read", { path: `tack-spill:${callId}` })).toMatchObject({
        isError: true, content: `No spilled result tack-spill:${callId} in this session; use the exact path given in the note of the shortened tool result`,
      });
    }
  });
});

describe("write", () => {
  it("write - creates parent directories and the file, which read then returns", async () => {
    const content = "it's \"quoted\" $HOME `cmd`\nsecond line\n";
    const result = await ws.call("write", { path: "deep/er/new.txt", content });
    expect(result).toMatchObject({ content: `Wrote ${Buffer.byteLength(content)} bytes to deep/er/new.txt`, isError: false });
    expect(await readFile(join(ws.root, "deep/er/new.txt"), "utf8")).toBe(content);
    expect((await ws.call("read", { path: "deep/er/new.txt" })).content).toBe("     1\tit's \"quoted\" $HOME `cmd`\n     2\tsecond line");
  });

  it("write - overwrites, and refuses a directory", async () => {
    await writeFile(join(ws.root, "f.txt"), "old content that is longer");
    await ws.call("write", { path: "f.txt", content: "new" });
    expect(await readFile(join(ws.root, "f.txt"), "utf8")).toBe("new");
    await mkdir(join(ws.root, "d"));
    expect(await ws.call("write", { path: "d", content: "x" })).toMatchObject({ isError: true, content: "d is a directory, not a file; list its files with glob" });
  });
});

describe("edit", () => {
  it("edit - replaces a unique occurrence exactly", async () => {
    await writeFile(join(ws.root, "e.ts"), "const a = 1;\nconst b = 2;\n");
    const result = await ws.call("edit", { path: "e.ts", old_string: "const b = 2;", new_string: "const b = '$&';" });
    expect(result).toMatchObject({ content: "Edited e.ts: replaced 1 occurrence", isError: false });
    expect(await readFile(join(ws.root, "e.ts"), "utf8")).toBe("const a = 1;\nconst b = '$&';\n");
  });

  it("edit - an ambiguous old_string says how many times it occurs", async () => {
    await writeFile(join(ws.root, "e.ts"), "x\nx\nx\n");
    const result = await ws.call("edit", { path: "e.ts", old_string: "x", new_string: "y" });
    expect(result.isError).toBe(true);
    expect(result.content).toContain("old_string occurs 3 times in e.ts");
    expect(await readFile(join(ws.root, "e.ts"), "utf8")).toBe("x\nx\nx\n");
  });

  it("edit - replace_all replaces every occurrence", async () => {
    await writeFile(join(ws.root, "e.ts"), "x\nx\nx\n");
    expect((await ws.call("edit", { path: "e.ts", old_string: "x", new_string: "y", replace_all: true })).content).toBe(
      "Edited e.ts: replaced 3 occurrences",
    );
    expect(await readFile(join(ws.root, "e.ts"), "utf8")).toBe("y\ny\ny\n");
  });

  it("edit - a missing old_string or file is an error", async () => {
    await writeFile(join(ws.root, "e.ts"), "abc\n");
    expect(await ws.call("edit", { path: "e.ts", old_string: "zzz", new_string: "y" })).toMatchObject({
      isError: true,
      content: "old_string not found in e.ts; read the file and copy the text exactly, including whitespace",
    });
    expect(await ws.call("edit", { path: "gone.ts", old_string: "a", new_string: "b" })).toMatchObject({ isError: true, content: "File not found: gone.ts" });
    expect(await ws.call("edit", { path: "e.ts", old_string: "abc", new_string: "abc" })).toMatchObject({ isError: true });
  });

  it("edit - refuses files that are not UTF-8 instead of corrupting them", async () => {
    await writeFile(join(ws.root, "bin.dat"), Buffer.from([0x61, 0xff, 0xfe, 0x62]));
    expect(await ws.call("edit", { path: "bin.dat", old_string: "a", new_string: "c" })).toMatchObject({
      isError: true,
      content: "bin.dat is not UTF-8 text; change it with bash instead",
    });
  });
});

describe("bash", () => {
  it("bash - runs in the workspace and reports stdout and exit code", async () => {
    await writeFile(join(ws.root, "here.txt"), "");
    const result = await ws.call("bash", { command: "ls", description: "list files" });
    expect(result).toMatchObject({ content: "here.txt\nexit code: 0", isError: false });
  });

  it("bash - a non-zero exit is an error result with stderr and the exit code", async () => {
    const result = await ws.call("bash", { command: "echo out; echo oops >&2; exit 3" });
    expect(result).toMatchObject({ content: "out\nstderr:\noops\nexit code: 3", isError: true });
  });

  it("bash - a command over its timeout is killed and says so", async () => {
    const started = performance.now();
    const result = await ws.call("bash", { command: "echo started; sleep 30", timeout_ms: 500 });
    expect(performance.now() - started).toBeLessThan(10_000);
    expect(result.isError).toBe(true);
    expect(result.content).toMatch(/^started\ntimed out after 500 ms\nexit code: \d+$/);
  });

  it("bash - a timeout over 600000 ms is invalid", async () => {
    const result = await ws.call("bash", { command: "true", timeout_ms: 600_001 });
    expect(result).toMatchObject({ isError: true, content: "Invalid arguments for bash: timeout_ms: Too big: expected number to be <=600000" });
  });
});

describe("glob", () => {
  it("glob - lists matching files sorted, including hidden ones but not .git", async () => {
    for (const file of ["src/b.ts", "src/a.ts", "src/a.js", ".github/x.ts", ".git/y.ts", "README.md"]) {
      await mkdir(join(ws.root, file, ".."), { recursive: true });
      await writeFile(join(ws.root, file), "");
    }
    expect((await ws.call("glob", { pattern: "*.ts" })).content).toBe(".github/x.ts\nsrc/a.ts\nsrc/b.ts");
    expect((await ws.call("glob", { pattern: "*.ts", path: "/workspace/src" })).content).toBe("src/a.ts\nsrc/b.ts");
    expect(await ws.call("glob", { pattern: "*.rs" })).toMatchObject({ content: "No files found", isError: false });
  });

  it("glob - keeps the first 100 results and says how many there were", async () => {
    await mkdir(join(ws.root, "many"));
    for (let i = 0; i < 130; i++) await writeFile(join(ws.root, "many", `f${String(i).padStart(3, "0")}.txt`), "");
    const result = await ws.call("glob", { pattern: "*.txt" });
    const listed = result.content.split("\n\n")[0]!.split("\n");
    expect(listed).toHaveLength(100);
    expect(listed[0]).toBe("many/f000.txt");
    expect(listed[99]).toBe("many/f099.txt");
    expect(result.content).toMatch(/\(showing the first 100 of 130 files; narrow the pattern or path\)$/);
  });

  it("glob - a missing directory is an error", async () => {
    const result = await ws.call("glob", { pattern: "*", path: "nowhere" });
    expect(result.isError).toBe(true);
    expect(result.content).toContain("nowhere");
  });
});

describe("grep", () => {
  it("grep - prints path:line:text, honours glob and case_insensitive", async () => {
    await mkdir(join(ws.root, "src"));
    await writeFile(join(ws.root, "src/a.ts"), "const Needle = 1;\nother\n");
    await writeFile(join(ws.root, "src/b.md"), "needle in docs\n");
    expect((await ws.call("grep", { pattern: "needle", case_insensitive: true })).content).toBe("src/a.ts:1:const Needle = 1;\nsrc/b.md:1:needle in docs");
    expect((await ws.call("grep", { pattern: "needle" })).content).toBe("src/b.md:1:needle in docs");
    expect((await ws.call("grep", { pattern: "needle", glob: "*.ts", case_insensitive: true })).content).toBe("src/a.ts:1:const Needle = 1;");
    expect((await ws.call("grep", { pattern: "other", path: "src/a.ts" })).content).toBe("src/a.ts:2:other");
  });

  it("grep - no matches is a normal result", async () => {
    await writeFile(join(ws.root, "a.txt"), "abc\n");
    expect(await ws.call("grep", { pattern: "zzz" })).toMatchObject({ content: "No matches found", isError: false });
  });

  it("grep - keeps the first 250 matching lines and says how many there were", async () => {
    await writeFile(join(ws.root, "m.txt"), "hit\n".repeat(300));
    const result = await ws.call("grep", { pattern: "hit" });
    expect(result.content.split("\n\n")[0]!.split("\n")).toHaveLength(250);
    expect(result.content).toMatch(/\(showing the first 250 of 300 matching lines; narrow the pattern, path or glob\)$/);
  });

  it("grep - an invalid regular expression is an error the model can read", async () => {
    const result = await ws.call("grep", { pattern: "(" });
    expect(result.isError).toBe(true);
    expect(result.content).toContain("regex parse error");
  });
});
