import { readFileSync } from "node:fs";
import { parseSpillPath } from "@tack/log";
import { z } from "zod";
import { defineTool, ToolError, type ToolContext } from "../tool.js";
import { exec } from "./exec.js";
import { argvString, CHECK_FILE, fileFailure, readKey, recordRead, sandboxPath } from "./files.js";
import { IMAGE_HEAD_BYTES, IMAGE_MIME, imageFormat, imageSize, MAX_IMAGE_BYTES, sizeText } from "./images.js";

/** Lines read when the model gives no limit. */
const DEFAULT_LIMIT = 2000;
/** Longer lines are cut (at this many characters) so that one minified line cannot fill the result. */
const MAX_LINE_CHARS = 2000;
/** Stop adding lines past this many bytes, far below the wrapper's cap and the loop's spill threshold, so the model gets a clean place to continue. */
const MAX_READ_BYTES = 51_200;
/** Bytes of an image fetched per exec: their base64 stays under the exec's stdout cap (MAX_STREAM_BYTES). */
const IMAGE_CHUNK_BYTES = 288 * 1024;

/**
 * Records the read (see files.ts), then prints the selected lines `cat -n` style and the file's
 * total line count as the last line; or, for an image (by its magic bytes), `image <size>` and its
 * first bytes in base64 (the whole image when it fits in them). awk runs on bytes (C locale) so the budget is in bytes, and counts
 * characters itself: a cut line keeps MAX_LINE_CHARS whole UTF-8 characters.
 */
const SCRIPT = `${CHECK_FILE} export LC_ALL=C; ${recordRead('"$6"')}
IFS= read -r -d '' -n 12 magic < "$1"
case $magic in
  $'\\x89PNG\\r\\n\\x1a\\n'* | $'\\xff\\xd8\\xff'* | GIF8[79]a* ) image=1 ;;
  RIFF*) [ "$(head -c 12 -- "$1" | tail -c 4)" = WEBP ] && image=1 ;;
esac
if [ -n "$image" ]; then printf 'image %s\\n' "$(stat -c %s -- "$1")"; head -c "$7" -- "$1" | base64 -w 0; exit; fi
awk -v start="$2" -v limit="$3" -v budget="$4" -v width="$5" '
NR >= start && shown < limit && !full {
  line = $0
  if (length(line) > width) {
    chars = 0
    for (k = 1; k <= length(line); k++) if (substr(line, k, 1) !~ /[\\200-\\277]/ && ++chars > width) break
    if (k <= length(line)) line = substr(line, 1, k - 1) "... (line cut at " width " characters)"
  }
  out = sprintf("%6d\\t%s", NR, line)
  if (shown > 0 && used + length(out) + 1 > budget) full = 1
  else { print out; shown++; used += length(out) + 1 }
}
END { print NR }' < "$1"`;

/**
 * read: numbered lines of a text file, a window at a time, recorded as read for `edit`. A
 * `tack-spill:<call id>` path reads a tool result of this session that was too large for the
 * log, from the object store, the same way. An image is described (format, dimensions, size)
 * and, up to MAX_IMAGE_BYTES, attached whole to the result (tools/README.md).
 */
export const read = defineTool({
  name: "read",
  hookAliases: ["Read"],
  pathIsFile: true,
  description: readFileSync(new URL("./read.txt", import.meta.url), "utf8").trim(),
  parameters: z.strictObject({
    path: argvString("File path, relative to /workspace or absolute"),
    offset: z.number().int().min(1).optional().describe("First line to read (1-based)"),
    limit: z.number().int().min(1).default(DEFAULT_LIMIT).describe("Maximum number of lines"),
  }),
  async execute({ path, offset = 1, limit }, ctx) {
    const spilled = parseSpillPath(path);
    const window = spilled === undefined ? await fileWindow(path, offset, limit, ctx) : await spillWindow(spilled, path, offset, limit, ctx.spilled);
    if ("image" in window) return window.image;
    const { lines, total } = window;
    if (total === 0) return `(${path} is empty)`;
    if (offset > total) throw new ToolError(`offset ${offset} is past the end of ${path}, which has ${total} lines`);
    const last = offset + lines.split("\n").length - 1;
    if (last >= total) return lines;
    return `${lines}\n\n(showing lines ${offset}-${last} of ${total}; read more with offset=${last + 1})`;
  },
});

type Window = { lines: string; total: number } | { image: string };

/** The selected lines of a file in the sandbox, numbered, and the file's line count; or the description of an image. */
async function fileWindow(path: string, offset: number, limit: number, ctx: ToolContext): Promise<Window> {
  const argv = ["bash", "-c", SCRIPT, "read", sandboxPath(path), String(offset), String(limit), String(MAX_READ_BYTES), String(MAX_LINE_CHARS), readKey(path), String(IMAGE_HEAD_BYTES)];
  const result = await exec(ctx, argv);
  if (result.exitCode !== 0 || result.timedOut) throw fileFailure(result, path, "read");
  if (result.stdout.startsWith("image ")) return { image: await readImage(path, result.stdout, ctx) };
  const output = result.stdout.replace(/\n$/, "");
  const split = output.lastIndexOf("\n");
  return { total: Number(output.slice(split + 1)), lines: split < 0 ? "" : output.slice(0, split) };
}

/**
 * `[image: path, PNG 640x480, 12 KB]` from SCRIPT's `image <size>` line and the image's first
 * bytes; an image of a known format up to MAX_IMAGE_BYTES is fetched whole and attached to the
 * result, a larger one is only described, with a way to look into it.
 */
async function readImage(path: string, stdout: string, ctx: ToolContext): Promise<string> {
  const split = stdout.indexOf("\n");
  const size = Number(stdout.slice("image ".length, split));
  const head = Buffer.from(stdout.slice(split + 1), "base64");
  const format = imageFormat(head);
  const dimensions = format && imageSize(format, head);
  const shown = [format ?? "image", dimensions && `${dimensions.width}x${dimensions.height}`].filter(Boolean).join(" ");
  const described = `[image: ${path}, ${shown}, ${sizeText(size)}`;
  if (!format || !ctx.attach) return `${described}]`;
  if (size > MAX_IMAGE_BYTES) {
    return `${described} — too large to attach (over ${sizeText(MAX_IMAGE_BYTES)}); to view it, make a smaller copy `
      + `(e.g. scaled or cropped with python3 in bash) and read that]`;
  }
  const data = size <= head.length ? head.subarray(0, size) : Buffer.concat([head, await imageRest(path, head.length, size, ctx)]);
  ctx.attach({ mimeType: IMAGE_MIME[format], data, width: dimensions?.width ?? 0, height: dimensions?.height ?? 0 });
  return `${described}]`;
}

/** The bytes of image `path` from `from` to `size`, IMAGE_CHUNK_BYTES per exec; a ToolError when the file changed meanwhile. */
async function imageRest(path: string, from: number, size: number, ctx: ToolContext): Promise<Buffer> {
  const parts: Buffer[] = [];
  for (let at = from; at < size; at += IMAGE_CHUNK_BYTES) {
    const argv = ["bash", "-c", 'tail -c "+$2" -- "$1" | head -c "$3" | base64 -w 0', "read", sandboxPath(path), String(at + 1), String(IMAGE_CHUNK_BYTES)];
    const result = await exec(ctx, argv);
    if (result.exitCode !== 0 || result.timedOut) throw fileFailure(result, path, "read");
    parts.push(Buffer.from(result.stdout, "base64"));
  }
  const rest = Buffer.concat(parts);
  if (from + rest.length !== size) throw new ToolError(`${path} changed while it was being read (${size} bytes, then ${from + rest.length}); read it again`);
  return rest;
}

/** The same window over a spilled result, numbered, cut and budgeted the way SCRIPT does a file's lines. */
async function spillWindow(
  callId: string, path: string, offset: number, limit: number, spilled: (callId: string) => Promise<Uint8Array | undefined>,
): Promise<Window> {
  const bytes = await spilled(callId);
  if (!bytes) throw new ToolError(`No spilled result ${path} in this session; use the exact path given in the note of the shortened tool result`);
  const all = Buffer.from(bytes).toString("utf8").split("\n");
  if (all.at(-1) === "") all.pop(); // a final newline ends the last line; it does not start another
  const out: string[] = [];
  let used = 0;
  for (let n = offset; n <= all.length && out.length < limit; n++) {
    const numbered = `${String(n).padStart(6)}\t${cutLine(all[n - 1]!)}`;
    const size = Buffer.byteLength(numbered) + 1;
    if (out.length > 0 && used + size > MAX_READ_BYTES) break;
    out.push(numbered);
    used += size;
  }
  return { lines: out.join("\n"), total: all.length };
}

/** `line` cut after MAX_LINE_CHARS characters (code points, as SCRIPT counts them), with the note SCRIPT adds. */
function cutLine(line: string): string {
  // UTF-16 length is at least the code point count: most lines are done here.
  if (line.length <= MAX_LINE_CHARS) return line;
  let end = 0;
  for (let chars = 0; chars < MAX_LINE_CHARS && end < line.length; chars++) end += line.codePointAt(end)! > 0xffff ? 2 : 1;
  return end < line.length ? `${line.slice(0, end)}... (line cut at ${MAX_LINE_CHARS} characters)` : line;
}
