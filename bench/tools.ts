// Toolset numbers (issue 9): the first request of every session mode, the overhead of a tool
// call made from a run_code program (bench/run-code.ts), and web_fetch of a 100 KB page from a
// loopback server, SSRF guard included (the server's address is on the fetch allowlist, as an
// operator's internal host would be; every other check runs as in production).
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { listTools } from "@tack/tools-service";
import type { ToolContext } from "../services/tools/src/tool.js";
import { createWebFetch } from "../services/tools/src/web/fetch.js";
import { percentile, round, say } from "./lib.js";
import { benchMcp } from "./mcp.js";
import { benchRunCode, firstRequestTokens } from "./run-code.js";

const FETCHES = 60;

/** About 100 KB of an ordinary documentation page: headings, paragraphs with links and code, lists, a table, a code block. */
export function documentationPage(targetBytes = 100_000): string {
  const sections: string[] = [];
  for (let i = 0; sections.join("").length < targetBytes; i++) {
    sections.push(`<section id="s${i}"><h2>Section ${i}: configuring the widget</h2>
<p>The <a href="/docs/widget#opt${i}">widget</a> reads its options from <code>widget.toml</code> at start-up. Option <strong>${i}</strong> sets how many
retries a request gets before it fails; values above <em>ten</em> are clamped. See <a href="https://example.com/ref/${i}">the reference</a>.</p>
<ul><li>Retries: <code>retries = ${i % 7}</code></li><li>Backoff: exponential, capped at 30 s</li><li>Applies to every <a href="/docs/client">client</a></li></ul>
<table><tr><th>Key</th><th>Default</th><th>Meaning</th></tr><tr><td>retries</td><td>3</td><td>attempts after the first</td></tr><tr><td>timeout</td><td>30</td><td>seconds per attempt</td></tr></table>
<pre><code>[widget]\nretries = ${i % 7}\ntimeout = 30\n</code></pre></section>\n`);
  }
  return `<!doctype html><html><head><meta charset="utf-8"><title>Widget docs</title><style>body{font:14px sans-serif}</style></head><body><nav><a href="/">Home</a></nav><main>${sections.join("")}</main></body></html>`;
}

async function benchWebFetch(): Promise<Record<string, unknown>> {
  const page = documentationPage();
  const server: Server = createServer((_req, res) => {
    res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
    res.end(page);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  const tool = createWebFetch({ allow: "127.0.0.1/32" });
  const ctx = { signal: new AbortController().signal } as ToolContext;
  const url = `http://127.0.0.1:${port}/docs/widget`;
  try {
    const times: number[] = [];
    for (let i = 0; i < FETCHES + 5; i++) {
      const started = performance.now();
      const text = await tool.execute({ url }, ctx);
      if (!text.includes("Section 3: configuring the widget")) throw new Error(`web_fetch bench: unexpected result ${text.slice(0, 200)}`);
      if (i >= 5) times.push(performance.now() - started);
    }
    return {
      web_fetch_ms: { p50: round(percentile(times, 50)), p99: round(percentile(times, 99)) },
      web_fetch_definition: `${FETCHES} sequential fetches of a ${Math.round(Buffer.byteLength(page) / 1000)} KB HTML documentation page from a loopback server (allowlisted), URL and address checks, pinned connection, HTML to Markdown; after 5 warm-up fetches`,
    };
  } finally {
    server.close();
  }
}

/** The `tools` part of `make bench`. */
export async function benchTools(): Promise<Record<string, unknown>> {
  say("tools: first request per mode, run_code inner-call overhead, web_fetch, an MCP call through the bridge");
  const modes = ["standard", "code", "minimal", "creator"];
  const byMode: Record<string, number> = {};
  for (const mode of modes) {
    try {
      listTools(mode);
    } catch {
      continue; // a mode this build does not have
    }
    byMode[mode] = firstRequestTokens(mode);
  }
  return {
    first_request_tokens_by_mode: byMode,
    first_request_tokens_by_mode_definition: "system prompt (the mode's own, else standard.md) + the mode's tools + a one-line task, DeepSeek V3 tokenizer on the DeepSeek request body, no skills",
    // Its own first-request keys repeat first_request_tokens_by_mode (and the definition key would overwrite the context part's).
    ...omit(await benchRunCode(), /^first_request_tokens/),
    ...await benchWebFetch(),
    // The MCP bridge on its own (issue 10: not yet wired into the loop's tool list).
    ...await benchMcp(),
  };
}

function omit(record: Record<string, unknown>, keys: RegExp): Record<string, unknown> {
  return Object.fromEntries(Object.entries(record).filter(([key]) => !keys.test(key)));
}
