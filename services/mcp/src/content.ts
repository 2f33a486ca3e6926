// What the model reads of an MCP tool result: its text, and a one-line placeholder for anything
// else (the whole result goes to the log as JSON, so nothing is lost).

/** One content block of an MCP CallToolResult, as far as this module reads it. */
export interface McpContentBlock {
  type: string;
  text?: string;
  data?: string;
  mimeType?: string;
  uri?: string;
  name?: string;
  resource?: { uri?: string; mimeType?: string; text?: string; blob?: string };
}

/** Size of base64 `data` decoded, e.g. `12 KB`. */
function size(base64: string | undefined, text?: string): string {
  // The padding is counted off by a scan: the data is the server's, and `/=+$/` is quadratic on a
  // long run of `=` before another character (100,000 of them: 5 s).
  const data = base64 ?? "";
  let end = data.length;
  while (end > 0 && data[end - 1] === "=") end--;
  const bytes = text !== undefined ? Buffer.byteLength(text) : Math.floor((end * 3) / 4);
  return bytes < 1024 ? `${bytes} B` : `${Math.round(bytes / 1024)} KB`;
}

/** One block as the model sees it. */
export function renderBlock(block: McpContentBlock): string {
  switch (block.type) {
    case "text":
      return block.text ?? "";
    case "image":
    case "audio":
      return `[${block.type}: ${block.mimeType ?? "unknown type"}, ${size(block.data)}]`;
    case "resource": {
      const r = block.resource ?? {};
      return `[resource: ${r.uri ?? "no uri"}, ${r.mimeType ?? "unknown type"}, ${size(r.blob, r.text)}]`;
    }
    case "resource_link":
      return `[resource link: ${block.uri ?? "no uri"}${block.mimeType ? `, ${block.mimeType}` : ""}]`;
    default:
      return `[${block.type} content]`;
  }
}

/** The text of a result: blocks joined by newlines; a result of structured content only is shown as its JSON. */
export function renderContent(result: { content?: McpContentBlock[]; structuredContent?: unknown }): string {
  const blocks = result.content ?? [];
  if (blocks.length === 0 && result.structuredContent !== undefined) return JSON.stringify(result.structuredContent);
  return blocks.map(renderBlock).join("\n");
}
