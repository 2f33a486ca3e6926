import { DomHandler, type ChildNode, type Document, type Element } from "domhandler";
import { parseDocument, Parser } from "htmlparser2";

/**
 * HTML to Markdown for web_fetch: htmlparser2 builds the tree (a few ms for 100 KB) and
 * this walk writes the Markdown a model reads well — headings, paragraphs, links, emphasis,
 * inline code, fenced code blocks, nested lists, tables, quotes. node-html-markdown did the same
 * at 30–140 ms for a 100 KB page (it re-reads its whole output on every append), and
 * node-html-parser slows down with the square of an element's child count (a page of 1,600
 * paragraphs took 38 ms to parse), both over the 20 ms budget of a fetch. What carries no text for the model (scripts, styles, forms' inner
 * machinery, SVG, the head) is dropped.
 */
export function htmlToMarkdown(html: string): string {
  return documentToMarkdown(parseDocument(html));
}

/** The Markdown of a parsed document (see htmlToMarkdown and parseHtmlWithin). */
export function documentToMarkdown(root: Document): string {
  const body = find(root.children, "body");
  depth = 0;
  return blocks(body ? body.children : root.children).join("\n\n").replace(/\n{3,}/g, "\n\n").trim();
}

// The page is untrusted, so every step here is linear in its size: no regex that can backtrack
// over a long run (a `\s+$` on a <pre> of a million spaces and a letter took minutes), no
// spread of a page-sized array into arguments, and no recursion deeper than MAX_DEPTH elements
// (below that an element is its plain text, read without recursion).
const MAX_DEPTH = 200;
let depth = 0;

/** The first element named `tag`, depth first (a stack, not recursion: nesting is the page's choice). */
function find(nodes: readonly ChildNode[], tag: string): Element | undefined {
  const stack = [...nodes].reverse();
  for (let node = stack.pop(); node; node = stack.pop()) {
    if (tagOf(node) === tag) return node as Element;
    if ("children" in node) for (let i = node.children.length - 1; i >= 0; i--) stack.push(node.children[i]!);
  }
  return undefined;
}

const SKIP = new Set(["head", "script", "style", "noscript", "template", "svg", "canvas", "iframe", "object", "embed", "select", "option", "button", "input", "textarea", "meta", "link", "title"]);
/** Blocks whose content is just more blocks: no mark of their own. */
const CONTAINERS = new Set([
  "html", "body", "main", "div", "section", "article", "header", "footer", "nav", "aside", "figure", "figcaption", "form", "fieldset",
  "details", "summary", "center", "address", "hgroup", "dialog", "legend", "caption", "p", "tbody", "thead", "tfoot", "li", "dd", "dt",
]);
const HEADINGS: Record<string, number> = { h1: 1, h2: 2, h3: 3, h4: 4, h5: 5, h6: 6 };
const OWN_BLOCKS = new Set(["ul", "ol", "pre", "blockquote", "table", "hr", "dl", ...Object.keys(HEADINGS)]);

/** An element's (lower-case) name; undefined for text, comments and directives. Scripts and styles are elements of their own types. */
const tagOf = (node: ChildNode): string | undefined => (node.type === "tag" || node.type === "script" || node.type === "style" ? node.name : undefined);
/** The text of a text node (entities decoded by the parser), or "" for anything else. */
const textOf = (node: ChildNode): string => (node.type === "text" ? node.data : "");
/** All the text under a node, as written (for code, where whitespace counts). */
function textContent(node: ChildNode): string {
  const parts: string[] = [];
  const stack: ChildNode[] = [node];
  for (let next = stack.pop(); next; next = stack.pop()) {
    if (next.type === "text") parts.push(next.data);
    else if ("children" in next) for (let i = next.children.length - 1; i >= 0; i--) stack.push(next.children[i]!);
  }
  return parts.join("");
}
const isBlock = (tag: string) => CONTAINERS.has(tag) || OWN_BLOCKS.has(tag);

/** The Markdown blocks of a run of nodes: inline content between blocks becomes a paragraph. */
function blocks(nodes: readonly ChildNode[]): string[] {
  const out: string[] = [];
  let inline = "";
  const flush = () => {
    const text = tidy(inline);
    if (text) out.push(text);
    inline = "";
  };
  for (const node of nodes) {
    const tag = tagOf(node);
    if (tag === undefined) {
      inline += collapse(textOf(node));
      continue;
    }
    if (SKIP.has(tag)) continue;
    if (!isBlock(tag)) {
      inline += inlineOf(node as Element, tag);
      continue;
    }
    flush();
    out.push(...block(node as Element, tag));
  }
  flush();
  return out;
}

function block(el: Element, tag: string): string[] {
  if (depth >= MAX_DEPTH) return [tidy(collapse(textContent(el)))].filter(Boolean);
  depth++;
  try {
    return blockOf(el, tag);
  } finally {
    depth--;
  }
}

function blockOf(el: Element, tag: string): string[] {
  const level = HEADINGS[tag];
  if (level !== undefined) {
    const text = tidy(inlines(el.children)).replace(/\n+/g, " ");
    return text ? [`${"#".repeat(level)} ${text}`] : [];
  }
  switch (tag) {
    case "hr":
      return ["---"];
    case "pre": {
      const code = find(el.children, "code");
      const language = /(?:^|\s)(?:language|lang)-([\w+-]+)/.exec((code ? attr(code, "class") : undefined) ?? attr(el, "class") ?? "")?.[1] ?? "";
      const text = textContent(el).replace(/^\n/, "").trimEnd();
      // A fence longer than any run of backticks inside, so the block cannot end early.
      const fence = "`".repeat(Math.max(3, longestRun(text, "`") + 1));
      return [`${fence}${language}\n${text}\n${fence}`];
    }
    case "blockquote": {
      const inner = blocks(el.children).join("\n\n");
      return inner ? [inner.split("\n").map((line) => (line ? `> ${line}` : ">")).join("\n")] : [];
    }
    case "ul":
    case "ol":
      return list(el, tag === "ol");
    case "dl": {
      const out: string[] = [];
      for (const child of el.children) {
        const t = tagOf(child);
        const text = t === "dt" || t === "dd" ? blocks(kids(child)).join("\n") : "";
        if (!text) continue;
        out.push(t === "dt" ? `**${text}**` : `: ${text}`);
      }
      return out.length > 0 ? [out.join("\n")] : [];
    }
    case "table":
      return table(el);
    default:
      return blocks(el.children);
  }
}

/** A list: one marker per item; an item's later lines and nested lists are indented under its text. */
function list(el: Element, ordered: boolean): string[] {
  const lines: string[] = [];
  let n = Number(attr(el, "start") ?? 1) || 1;
  for (const child of el.children) {
    const tag = tagOf(child);
    // Text or stray inline elements between items belong to no item: an item of their own.
    const content = tag === "li" ? blocks(kids(child)) : tag === undefined ? [tidy(collapse(textOf(child)))].filter(Boolean) : blocks([child]);
    if (content.length === 0) continue;
    const marker = ordered ? `${n++}. ` : "* ";
    const indent = " ".repeat(marker.length);
    const text = content.join("\n").split("\n");
    lines.push(`${marker}${text[0]}`, ...text.slice(1).map((line) => (line ? indent + line : line)));
  }
  return lines.length > 0 ? [lines.join("\n")] : [];
}

/** A table as a Markdown pipe table: the first row is the header; cells are single lines. */
function table(el: Element): string[] {
  // Rows are the table's own (directly or in its sections), not those of a table nested in a cell.
  const sections = el.children.filter((child) => ["thead", "tbody", "tfoot"].includes(tagOf(child) ?? ""));
  const rows = [el, ...sections].flatMap((parent) => kids(parent).filter((child) => tagOf(child) === "tr"))
    .map((tr) => kids(tr).filter((cell) => tagOf(cell) === "td" || tagOf(cell) === "th")
      .map((cell) => oneLine(tidy(inlines(kids(cell)))).replace(/\|/g, "\\|")));
  const widths = Math.max(0, ...rows.map((row) => row.length));
  if (widths === 0) return [];
  const line = (cells: string[]) => `| ${Array.from({ length: widths }, (_, i) => cells[i] ?? "").join(" | ")} |`;
  return [[line(rows[0]!), `|${" --- |".repeat(widths)}`, ...rows.slice(1).map(line)].join("\n")];
}

/** The inline Markdown of a run of nodes; a block inside inline content reads as a line break. */
function inlines(nodes: readonly ChildNode[]): string {
  let out = "";
  for (const node of nodes) {
    const tag = tagOf(node);
    if (tag === undefined) {
      out += collapse(textOf(node));
    } else if (!SKIP.has(tag)) {
      out += isBlock(tag) ? `\n${blocks([node]).join("\n")}\n` : inlineOf(node as Element, tag);
    }
  }
  return out;
}

function inlineOf(el: Element, tag: string): string {
  if (depth >= MAX_DEPTH) return collapse(textContent(el));
  depth++;
  try {
    return inlineMarkOf(el, tag);
  } finally {
    depth--;
  }
}

function inlineMarkOf(el: Element, tag: string): string {
  switch (tag) {
    case "br":
      return "\n";
    case "a": {
      const text = inlines(el.children).trim();
      const href = attr(el, "href")?.trim();
      if (!text) return "";
      return href && !/^(javascript|data):/i.test(href) && !href.startsWith("#") ? `[${text.replace(/\n+/g, " ")}](${href.replace(/[()\s]/g, encodeURIComponent)})` : text;
    }
    case "strong":
    case "b":
      return wrap(inlines(el.children), "**");
    case "em":
    case "i":
      return wrap(inlines(el.children), "_");
    case "del":
    case "s":
    case "strike":
      return wrap(inlines(el.children), "~~");
    case "code":
    case "kbd":
    case "samp":
    case "tt": {
      const text = textContent(el).replace(/\s+/g, " ");
      if (!text.trim()) return text;
      const ticks = "`".repeat(Math.max(1, longestRun(text, "`") + 1));
      return ticks.length > 1 ? `${ticks} ${text} ${ticks}` : `\`${text}\``;
    }
    case "img": {
      const alt = collapse(attr(el, "alt") ?? "").trim();
      return alt ? `![${alt}](${attr(el, "src") ?? ""})` : "";
    }
    default:
      return inlines(el.children);
  }
}

/** `**text**` with the mark inside any surrounding spaces (Markdown ignores `** text **`). */
function wrap(text: string, mark: string): string {
  const inner = text.trim();
  if (!inner) return text;
  const start = text.length - text.trimStart().length;
  return `${text.slice(0, start)}${mark}${inner}${mark}${text.slice(start + inner.length)}`;
}

/** The longest run of `char` in `text`. */
function longestRun(text: string, char: string): number {
  let longest = 0;
  for (let at = text.indexOf(char); at !== -1; ) {
    let end = at;
    while (text[end] === char) end++;
    longest = Math.max(longest, end - at);
    at = text.indexOf(char, end);
  }
  return longest;
}

/** Every run of whitespace that holds a line break becomes one space, in one pass (a regex of spaces, a break, spaces backtracks over long runs). */
const oneLine = (text: string) => text.replace(/\s+/g, (run) => (run.includes("\n") ? " " : run));

const collapse = (text: string) => text.replace(/\s+/g, " ");
/** Trims each line of a paragraph (line breaks come only from <br> and nested blocks). */
const tidy = (text: string) => text.split("\n").map((line) => line.trim().replace(/ {2,}/g, " ")).join("\n").replace(/\n{3,}/g, "\n\n").trim();

const kids = (node: ChildNode): readonly ChildNode[] => ("children" in node ? node.children : []);
const attr = (el: Element, name: string): string | undefined => el.attribs[name];

/**
 * Slice of HTML the parser takes between two looks at the clock. Small, because on hostile markup
 * a slice is expensive: htmlparser2 keeps its open elements in an array it `unshift`s on every
 * start tag, so at a depth of 200,000 <div>s one tag costs about 0.25 ms and a 4 KB slice 200 ms.
 */
const PARSE_SLICE_CHARS = 256;
/** Longest the parse holds the event loop before it yields to other calls. */
const PARSE_TURN_MS = 10;

/** HTML that could not be parsed within its time limit. */
export class HtmlBudgetError extends Error {}

/**
 * Parses `html` as parseDocument does, but in slices, yielding to the event loop after every
 * PARSE_TURN_MS of work and giving up after `timeoutMs`. htmlparser2 keeps its open elements in
 * an array it shifts and searches on every tag, so a page of 100,000 nested <div>s (500 KB) takes
 * seconds and one of a million takes many minutes; sliced, such a page costs this call its time
 * limit and nobody else anything: the service answers other calls meanwhile.
 */
export async function parseHtmlWithin(html: string, options: { timeoutMs: number; signal?: AbortSignal }): Promise<Document> {
  const handler = new DomHandler();
  const parser = new Parser(handler);
  const deadline = performance.now() + options.timeoutMs;
  let turnEnds = performance.now() + PARSE_TURN_MS;
  for (let at = 0; at < html.length; at += PARSE_SLICE_CHARS) {
    parser.write(html.slice(at, at + PARSE_SLICE_CHARS));
    const now = performance.now();
    if (now < turnEnds) continue;
    if (now > deadline) {
      throw new HtmlBudgetError(`the HTML could not be parsed within ${options.timeoutMs / 1000} s (${Math.round((100 * at) / html.length)}% read): it is nested too deeply or is too large`);
    }
    await new Promise((resolve) => setImmediate(resolve));
    options.signal?.throwIfAborted();
    turnEnds = performance.now() + PARSE_TURN_MS;
  }
  parser.end();
  return handler.root;
}
