import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { spillObjectName } from "@tack/log";
import { readForEdit, writeWholeFile } from "../src/tools/files.js";
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

  it("read - stops before 51,200 bytes of lines with a clean place to continue", async () => {
    // Numbered, a line takes 1,008 bytes: 50 of them fit.
    await writeFile(join(ws.root, "wide.txt"), Array.from({ length: 100 }, () => "x".repeat(1000)).join("\n"));
    const result = await ws.call("read", { path: "wide.txt" });
    expect(result.content).toMatch(/\n\n\(showing lines 1-50 of 100; read more with offset=51\)$/);
    // The budget counts bytes, not characters: 1,208-byte lines of 600 two-byte characters, 42 fit.
    await writeFile(join(ws.root, "wide-utf8.txt"), Array.from({ length: 100 }, () => "é".repeat(600)).join("\n"));
    const utf8 = await ws.call("read", { path: "wide-utf8.txt" });
    expect(Buffer.byteLength(utf8.content.split("\n\n")[0]!) + 1).toBe(42 * 1208);
    expect(utf8.content).toMatch(/\n\n\(showing lines 1-42 of 100; read more with offset=43\)$/);
  });

  it("read - cuts a long line after 2000 whole characters, multi-byte ones too", async () => {
    await writeFile(join(ws.root, "wide.txt"), `${"é".repeat(1999)}€${"a".repeat(10)}\n${"€".repeat(2000)}\n`);
    expect((await ws.call("read", { path: "wide.txt" })).content).toBe(`     1\t${"é".repeat(1999)}€... (line cut at 2000 characters)\n     2\t${"€".repeat(2000)}`);
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

describe("read an image", () => {
  const le = (value: number, bytes: number) => { const b = Buffer.alloc(bytes); b.writeUIntLE(value, 0, bytes); return b; };
  const be = (value: number, bytes: number) => { const b = Buffer.alloc(bytes); b.writeUIntBE(value, 0, bytes); return b; };
  const padded = (head: Buffer, size: number) => Buffer.concat([head, Buffer.alloc(size - head.length, 0x0a)]);
  const png = padded(Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), be(13, 4), Buffer.from("IHDR"), be(640, 4), be(480, 4)]), 12 * 1024);
  const gif = padded(Buffer.concat([Buffer.from("GIF89a"), le(32, 2), le(16, 2)]), 700);
  // RIFF sizes with a newline and NUL bytes in them: the magic check must not read lines.
  const webp = (chunk: Buffer) => padded(Buffer.concat([Buffer.from("RIFF"), le(0x0a, 4), Buffer.from("WEBP"), chunk]), 2048);
  const vp8x = webp(Buffer.concat([Buffer.from("VP8X"), le(10, 4), le(0, 4), le(1919, 3), le(1079, 3)]));
  const vp8l = webp(Buffer.concat([Buffer.from("VP8L"), le(5, 4), Buffer.from([0x2f]), le((99) | (49 << 14), 4)]));
  const vp8 = webp(Buffer.concat([Buffer.from("VP8 "), le(10, 4), Buffer.from([0, 0, 0, 0x9d, 0x01, 0x2a]), le(300, 2), le(200, 2)]));
  // An EXIF segment before the frame header, which holds the dimensions.
  const app1 = Buffer.concat([Buffer.from([0xff, 0xe1]), be(0x2000, 2), Buffer.alloc(0x2000 - 2, 0x0a)]);
  const sof0 = Buffer.concat([Buffer.from([0xff, 0xc0]), be(17, 2), Buffer.from([8]), be(1200, 2), be(1600, 2)]);
  const jpeg = padded(Buffer.concat([Buffer.from([0xff, 0xd8]), app1, sof0]), 3 * 1024 * 1024);
  const farJpeg = padded(Buffer.concat([Buffer.from([0xff, 0xd8]), ...Array.from({ length: 40 }, () => app1), sof0]), 400 * 1024);

  it("read - describes PNG, GIF, WebP and JPEG images by their magic bytes, with dimensions from the header, and attaches them whole", async () => {
    const cases: Array<[string, Buffer, string, string, number, number]> = [
      ["shot.png", png, "PNG 640x480, 12 KB", "image/png", 640, 480],
      ["anim.gif", gif, "GIF 32x16, 700 bytes", "image/gif", 32, 16],
      ["wide.webp", vp8x, "WebP 1920x1080, 2 KB", "image/webp", 1920, 1080],
      ["lossless.webp", vp8l, "WebP 100x50, 2 KB", "image/webp", 100, 50],
      ["lossy.webp", vp8, "WebP 300x200, 2 KB", "image/webp", 300, 200],
      // No frame header in the first exec's bytes: attached all the same, without dimensions.
      ["far.jpg", farJpeg, "JPEG, 400 KB", "image/jpeg", 0, 0],
      // Past the first exec's bytes: the rest comes in further execs.
      ["big.png", padded(png, 500 * 1024), "PNG 640x480, 500 KB", "image/png", 640, 480],
    ];
    for (const [name, bytes, shown, mimeType, width, height] of cases) {
      await writeFile(join(ws.root, name), bytes);
      const result = await ws.call("read", { path: name });
      expect(result).toMatchObject({ isError: false, content: `[image: ${name}, ${shown}]` });
      expect(result.images).toHaveLength(1);
      expect(result.images[0]).toMatchObject({ mimeType, width, height });
      expect(Buffer.from(result.images[0]!.data).equals(bytes)).toBe(true);
    }
  });

  it("read - an image over 512 KB is described, not attached, with a way to view it", async () => {
    await writeFile(join(ws.root, "photo.txt"), jpeg);
    await writeFile(join(ws.root, "edge.png"), padded(png, 512 * 1024 + 1));
    const tooLarge = (shown: string) => `${shown} — too large to attach (over 512 KB); to view it, make a smaller copy (e.g. scaled or cropped with python3 in bash) and read that]`;
    // Named as something else: the bytes decide.
    expect(await ws.call("read", { path: "photo.txt" })).toMatchObject({ isError: false, images: [], content: tooLarge("[image: photo.txt, JPEG 1600x1200, 3.0 MB") });
    expect(await ws.call("read", { path: "edge.png" })).toMatchObject({ isError: false, images: [], content: tooLarge("[image: edge.png, PNG 640x480, 512 KB") });
    await writeFile(join(ws.root, "fits.png"), padded(png, 512 * 1024));
    expect((await ws.call("read", { path: "fits.png" })).images[0]!.data.length).toBe(512 * 1024);
  });

  it("read - a file that only starts like an image is text", async () => {
    await writeFile(join(ws.root, "riff.txt"), "RIFF notes\nGIF8 is not a GIF\n");
    expect((await ws.call("read", { path: "riff.txt" })).content).toBe("     1\tRIFF notes\n     2\tGIF8 is not a GIF");
  });
});

describe("read a spilled result", () => {
  const spill = (callId: string, text: string, sessionId = "s1", tenant = "t1") =>
    ws.spilled.set(spillObjectName({ tenant, sessionId }, callId), Buffer.from(text, "utf8"));

  it("read - a tack-spill path reads the session's spilled result exactly as the same text in a file reads", async () => {
    const text = `${lines(3000)}${"w".repeat(2500)}\n${"é€".repeat(1500)}\n${"ü".repeat(30_000)}\n\nlast`;
    spill("call_7", text);
    await writeFile(join(ws.root, "same.txt"), text);
    for (const window of [{}, { offset: 2990, limit: 5 }, { offset: 2001 }, { offset: 2980 }, { offset: 3001 }, { offset: 3005 }]) {
      const fromSpill = await ws.call("read", { path: "tack-spill:call_7", ...window });
      const fromFile = await ws.call("read", { path: "same.txt", ...window });
      expect(fromSpill).toMatchObject({ isError: false, content: fromFile.content });
    }
    const past = await ws.call("read", { path: "tack-spill:call_7", offset: 4000 });
    expect(past).toMatchObject({ isError: true, content: "offset 4000 is past the end of tack-spill:call_7, which has 3005 lines" });
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
  /** Writes a file behind the tools' back (as another process would) and reads it with the read tool. */
  const writeAndRead = async (name: string, content: string | Buffer) => {
    await writeFile(join(ws.root, name), content);
    await ws.call("read", { path: name });
  };

  it("edit - replaces a unique occurrence exactly", async () => {
    await writeAndRead("e.ts", "const a = 1;\nconst b = 2;\n");
    const result = await ws.call("edit", { path: "e.ts", old_string: "const b = 2;", new_string: "const b = '$&';" });
    expect(result).toMatchObject({ content: "Edited e.ts: replaced 1 occurrence", isError: false });
    expect(await readFile(join(ws.root, "e.ts"), "utf8")).toBe("const a = 1;\nconst b = '$&';\n");
  });

  it("edit - an ambiguous old_string says how many times it occurs", async () => {
    await writeAndRead("e.ts", "x\nx\nx\n");
    const result = await ws.call("edit", { path: "e.ts", old_string: "x", new_string: "y" });
    expect(result.isError).toBe(true);
    expect(result.content).toContain("old_string occurs 3 times in e.ts");
    expect(await readFile(join(ws.root, "e.ts"), "utf8")).toBe("x\nx\nx\n");
  });

  it("edit - replace_all replaces every occurrence", async () => {
    await writeAndRead("e.ts", "x\nx\nx\n");
    expect((await ws.call("edit", { path: "e.ts", old_string: "x", new_string: "y", replace_all: true })).content).toBe(
      "Edited e.ts: replaced 3 occurrences",
    );
    expect(await readFile(join(ws.root, "e.ts"), "utf8")).toBe("y\ny\ny\n");
  });

  it("edit - a missing old_string or file is an error", async () => {
    await writeAndRead("e.ts", "abc\n");
    expect(await ws.call("edit", { path: "e.ts", old_string: "zzz", new_string: "y" })).toMatchObject({
      isError: true,
      content: "old_string not found in e.ts; read the file and copy the text exactly, including whitespace",
    });
    expect(await ws.call("edit", { path: "gone.ts", old_string: "a", new_string: "b" })).toMatchObject({ isError: true, content: "File not found: gone.ts" });
    expect(await ws.call("edit", { path: "e.ts", old_string: "abc", new_string: "abc" })).toMatchObject({ isError: true });
  });

  it("edit - refuses files that are not UTF-8 instead of corrupting them", async () => {
    await writeAndRead("bin.dat", Buffer.from([0x61, 0xff, 0xfe, 0x62]));
    expect(await ws.call("edit", { path: "bin.dat", old_string: "a", new_string: "c" })).toMatchObject({
      isError: true,
      content: "bin.dat is not UTF-8 text; change it with bash instead",
    });
  });

  it("edit - refuses a file this session never read, and leaves it alone", async () => {
    await writeFile(join(ws.root, "e.ts"), "abc\n");
    expect(await ws.call("edit", { path: "e.ts", old_string: "abc", new_string: "xyz" })).toMatchObject({
      isError: true,
      content: "read e.ts first: edit only changes a file read in this session (with read), so that old_string comes from what the file holds",
    });
    expect(await readFile(join(ws.root, "e.ts"), "utf8")).toBe("abc\n");
    // Any window of it counts, under any name of the same path.
    await writeFile(join(ws.root, "long.ts"), lines(50));
    await ws.call("read", { path: "/workspace/./long.ts", offset: 40, limit: 2 });
    expect(await ws.call("edit", { path: "long.ts", old_string: "line 7\n", new_string: "seven\n" })).toMatchObject({ isError: false });
  });

  it("edit - refuses a file changed since it was read, naming what changed, until it is read again", async () => {
    await writeAndRead("e.ts", "abc\n");
    await ws.call("bash", { command: "printf 'abc\\ndef\\n' > e.ts" });
    const refused = await ws.call("edit", { path: "e.ts", old_string: "abc", new_string: "xyz" });
    expect(refused.isError).toBe(true);
    expect(refused.content).toMatch(/^e\.ts changed since you read it \(size 4 → 8 bytes, mtime \S+ \S+ \S+ → \S+ \S+ \S+\) — read it again, then edit$/);
    expect(await readFile(join(ws.root, "e.ts"), "utf8")).toBe("abc\ndef\n");
    await ws.call("read", { path: "e.ts" });
    expect(await ws.call("edit", { path: "e.ts", old_string: "abc", new_string: "xyz" })).toMatchObject({ isError: false });
  });

  it("edit - a file this session wrote or edited is known: edits follow each other without reads", async () => {
    await ws.call("write", { path: "new.ts", content: "one\n" });
    expect(await ws.call("edit", { path: "new.ts", old_string: "one", new_string: "two" })).toMatchObject({ isError: false });
    expect(await ws.call("edit", { path: "new.ts", old_string: "two", new_string: "three" })).toMatchObject({ isError: false });
    expect(await readFile(join(ws.root, "new.ts"), "utf8")).toBe("three\n");
  });

  it("edit - the write back refuses a file that changed after the edit read it", async () => {
    await writeAndRead("e.ts", "abc\n");
    const ctx = { sessionId: "s1", callId: "c1", signal: new AbortController().signal, sandbox: ws.sandbox, mode: "workspace-write" as const, spilled: async () => undefined };
    const { stamp } = await readForEdit(ctx, "e.ts");
    await writeFile(join(ws.root, "e.ts"), "changed meanwhile\n");
    await expect(writeWholeFile(ctx, "e.ts", "xyz\n", stamp)).rejects.toThrow(/^e\.ts changed since you read it \(size 4 → 18 bytes/);
    expect(await readFile(join(ws.root, "e.ts"), "utf8")).toBe("changed meanwhile\n");
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

  it("bash - workdir runs the command in a directory of the workspace, given relative or absolute", async () => {
    await mkdir(join(ws.root, "sub/dir"), { recursive: true });
    await writeFile(join(ws.root, "sub/dir/here.txt"), "");
    expect(await ws.call("bash", { command: "ls", workdir: "sub/dir" })).toMatchObject({ isError: false, content: "here.txt\nexit code: 0" });
    expect(await ws.call("bash", { command: "ls", workdir: "/workspace/sub/./dir/" })).toMatchObject({ isError: false, content: "here.txt\nexit code: 0" });
    // Line numbers in errors stay the command's own.
    expect((await ws.call("bash", { command: "echo $LINENO", workdir: "sub" })).content).toBe("1\nexit code: 0");
  });

  it("bash - a workdir outside /workspace is refused before anything runs, a missing one says so", async () => {
    for (const workdir of ["..", "/etc", "sub/../../x", "/workspace-other"]) {
      expect(await ws.call("bash", { command: "touch ran", workdir })).toMatchObject({
        isError: true,
        content: `workdir ${workdir} is outside /workspace; commands run only in the workspace: give a directory in it, relative (src) or absolute (/workspace/src)`,
      });
    }
    expect(await ws.call("bash", { command: "touch ran", workdir: "nope" })).toMatchObject({
      isError: true,
      content: "workdir nope is not a directory in /workspace; create it first (mkdir -p) or leave workdir out",
    });
    expect(ws.sandbox.executed.map((request) => request.argv.join(" ")).filter((argv) => argv.includes("touch ran"))).toHaveLength(1);
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
