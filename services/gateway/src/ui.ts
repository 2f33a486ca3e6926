// The web UI (packages/web, built by `make build` into packages/web/dist), served at `/` next to the
// API under /v1. Static files only: `/` is index.html (revalidated every time: `no-cache` with an
// ETag), `/assets/<name>` are Vite's content-hashed files (cached for a year, immutable). Files are
// read once per change (mtime and size) and kept in memory with a gzip copy for clients that take it.
import { createHash } from "node:crypto";
import { readFile, stat } from "node:fs/promises";
import { join, resolve } from "node:path";
import { gzipSync } from "node:zlib";
import { GatewayError } from "./errors.js";
import type { Exchange, Handler } from "./http.js";

/** The directory of the built UI: TACK_WEB_DIR, else packages/web/dist of this checkout. */
export function uiDirectory(env: NodeJS.ProcessEnv = process.env): string {
  return env.TACK_WEB_DIR ? resolve(env.TACK_WEB_DIR) : resolve(import.meta.dirname, "..", "..", "..", "packages", "web", "dist");
}

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml", ".png": "image/png", ".ico": "image/x-icon", ".woff2": "font/woff2", ".json": "application/json", ".map": "application/json",
};
const COMPRESSIBLE = new Set([".html", ".js", ".css", ".svg", ".json", ".map"]);

// Only what the page itself needs: its own scripts, styles and API; nothing inline, no framing.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

interface Cached {
  readonly stamp: string;
  readonly body: Buffer;
  readonly gzip: Buffer | undefined;
  readonly etag: string;
}

/**
 * The UI's routes, for the gateway's route table: `GET`/`HEAD` of `/` and `/assets/:file`. They
 * need no API key (the page signs in with one and sends it to /v1 itself).
 */
export function uiRoutes(dir: string = uiDirectory()): Array<{ method: string; pattern: string; handler: Handler }> {
  const cache = new Map<string, Cached>();
  const serve = (cacheControl: string, file: (exchange: Exchange) => string): Handler => async (exchange) => {
    const name = file(exchange);
    const path = join(dir, name);
    const info = await stat(path).catch(() => undefined);
    if (!info?.isFile()) {
      throw name === "index.html"
        ? new GatewayError(404, "gateway.route_not_found", `the web UI is not built (no ${path}); run \`make build\` (or set TACK_WEB_DIR to a built packages/web/dist) — the API is under /v1`)
        : new GatewayError(404, "gateway.route_not_found", `the web UI has no file /${name}; reload the page (the UI was rebuilt since it loaded)`);
    }
    const stamp = `${info.mtimeMs}:${info.size}`;
    let entry = cache.get(name);
    if (entry?.stamp !== stamp) {
      const body = await readFile(path);
      const ext = extension(name);
      entry = { stamp, body, gzip: COMPRESSIBLE.has(ext) && body.length > 1024 ? gzipSync(body, { level: 9 }) : undefined, etag: `"${createHash("sha256").update(body).digest("base64url").slice(0, 27)}"` };
      cache.set(name, entry);
    }
    const { req, res } = exchange;
    const headers: Record<string, string> = {
      "content-type": TYPES[extension(name)] ?? "application/octet-stream",
      "cache-control": cacheControl,
      etag: entry.etag,
      vary: "accept-encoding",
      "x-content-type-options": "nosniff",
      "referrer-policy": "no-referrer",
    };
    if (name === "index.html") headers["content-security-policy"] = CSP;
    if (req.headers["if-none-match"] === entry.etag) {
      res.writeHead(304, headers);
      res.end();
      return;
    }
    const gzip = entry.gzip && /\bgzip\b/.test(String(req.headers["accept-encoding"] ?? "")) ? entry.gzip : undefined;
    if (gzip) headers["content-encoding"] = "gzip";
    const body = gzip ?? entry.body;
    headers["content-length"] = String(body.length);
    res.writeHead(200, headers);
    res.end(req.method === "HEAD" ? undefined : body);
  };
  const index = serve("no-cache", () => "index.html");
  const asset = serve("public, max-age=31536000, immutable", (exchange) => {
    const file = exchange.params.file!;
    // Vite's output names only: no dot files, no separators, nothing that could leave the directory.
    if (!/^[A-Za-z0-9_-][A-Za-z0-9._-]*$/.test(file)) throw new GatewayError(404, "gateway.route_not_found", `no UI asset ${JSON.stringify(file)}; the API is under /v1`);
    return `assets/${file}`;
  });
  return ["GET", "HEAD"].flatMap((method) => [
    { method, pattern: "/", handler: index },
    { method, pattern: "/assets/:file", handler: asset },
  ]);
}

function extension(name: string): string {
  const dot = name.lastIndexOf(".");
  return dot === -1 ? "" : name.slice(dot);
}
