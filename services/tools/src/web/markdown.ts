import { NodeHtmlMarkdown } from "node-html-markdown";

const converter = new NodeHtmlMarkdown();

/** Pieces smaller than this are not split further. */
const CHUNK_CHARS = 4_096;

const VOID = new Set(["area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"]);
const RAW_TEXT = new Set(["script", "style", "textarea", "title", "noscript", "template"]);
const BLOCK = new Set([
  "address", "article", "aside", "blockquote", "details", "dialog", "dd", "div", "dl", "dt", "fieldset", "figcaption", "figure",
  "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hgroup", "hr", "li", "main", "nav", "ol", "p", "pre",
  "section", "table", "ul",
]);
// Tags that end an open <p> (HTML's implied end tags), so unclosed paragraphs do not hide every later split point.
const CLOSES_P = new Set([...BLOCK].filter((tag) => tag !== "li" && tag !== "dd" && tag !== "dt"));
const TAG = /<!--[\s\S]*?-->|<(\/?)([a-zA-Z][a-zA-Z0-9-]*)\b[^>]*?(\/?)>/g;

/**
 * HTML to Markdown. node-html-markdown slows down with the square of its output (it re-reads
 * the whole result after every append), so a long document is cut between top-level block
 * elements into pieces of about 4 KB that are converted one by one. A page whose structure
 * hides those boundaries is converted whole: slower, same result.
 */
export function htmlToMarkdown(html: string): string {
  const pieces = splitBlocks(bodyOf(html));
  return pieces.map((piece) => converter.translate(piece)).filter(Boolean).join("\n\n");
}

// The head holds nothing to read (node-html-markdown drops it too) and would make the first piece unsplittable.
function bodyOf(html: string): string {
  const open = /<body\b[^>]*>/i.exec(html);
  if (!open) return html;
  const start = open.index + open[0].length;
  const end = html.toLowerCase().lastIndexOf("</body");
  return html.slice(start, end > start ? end : html.length);
}

/** Cuts `html` after (or before) top-level block elements into pieces of at least CHUNK_CHARS; joined, they are `html`. */
export function splitBlocks(html: string): string[] {
  if (html.length <= CHUNK_CHARS) return [html];
  const pieces: string[] = [];
  const open: string[] = [];
  let pieceStart = 0;
  const cut = (at: number) => {
    pieces.push(html.slice(pieceStart, at));
    pieceStart = at;
  };
  TAG.lastIndex = 0;
  for (let match = TAG.exec(html); match; match = TAG.exec(html)) {
    const [whole, closing, rawName, selfClosing] = match;
    if (!rawName) continue; // a comment
    const name = rawName.toLowerCase();
    if (!closing) {
      if (RAW_TEXT.has(name)) {
        // Skip to its end tag: its text is not markup.
        const end = html.toLowerCase().indexOf(`</${name}`, TAG.lastIndex);
        TAG.lastIndex = end < 0 ? html.length : end;
        open.push(name);
        continue;
      }
      if (VOID.has(name) || selfClosing) continue;
      if (open.at(-1) === "p" && CLOSES_P.has(name)) open.pop();
      if (name === "li" && open.at(-1) === "li") open.pop();
      // Before a top-level block is a boundary too (after an unclosed <p>, the only one there is).
      if (open.length === 0 && BLOCK.has(name) && match.index - pieceStart >= CHUNK_CHARS) cut(match.index);
      open.push(name);
      continue;
    }
    const at = open.lastIndexOf(name);
    if (at < 0) continue; // a stray end tag closes nothing
    open.length = at;
    const end = match.index + whole.length;
    if (open.length === 0 && BLOCK.has(name) && end - pieceStart >= CHUNK_CHARS) cut(end);
  }
  if (pieceStart < html.length) pieces.push(html.slice(pieceStart));
  return pieces;
}
