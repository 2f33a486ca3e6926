import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { posix } from "node:path";
import { WORKSPACE } from "@tack/config";
import { z } from "zod";
import { defineTool, ToolError, type ToolContext } from "../tool.js";
import { exec } from "../tools/exec.js";
import { argvString, sandboxPath } from "../tools/files.js";
import { serverFor, supportedExtensions, type LanguageServer } from "./servers.js";

// Both scripts go to the container with every call (a few KB): the broker always matches the
// service that speaks to it, and the image holds only the servers (decision 0013).
const BROKER = readFileSync(new URL("./broker.mjs", import.meta.url), "utf8");
const CLIENT = readFileSync(new URL("./client.py", import.meta.url), "utf8");
/** Names the broker's socket and files: a service with another broker starts its own beside an older one. */
export const BROKER_HASH = createHash("sha256").update(BROKER).digest("hex").slice(0, 16);

const MAX_LOCATIONS = 100;
const MAX_CHARS = 16_000;
/** One request, everything included: broker start, server start, project load, a replay. */
const REQUEST_TIMEOUT_MS = 45_000;
/** How long a new broker gets to listen. */
const BROKER_START_MS = 10_000;

/** What the broker answers: see the protocol at the top of broker.mjs. */
export type BrokerReply =
  | { ok: true; result: unknown }
  | { ok: false; error: { kind: string; message: string; stderr?: string } };

interface Location { file: string; line: number; column: number; text: string }
interface Symbol { depth: number; name: string; kind: string; line: number }

/** lsp: hover, definition, references and document symbols from a language server kept running in the sandbox. */
export const lsp = defineTool({
  name: "lsp",
  pathIsFile: true,
  description: readFileSync(new URL("./lsp.txt", import.meta.url), "utf8").trim(),
  parameters: z.strictObject({
    operation: z.enum(["hover", "definition", "references", "document_symbols"]).describe("hover: type and docs; definition: where the symbol is declared; references: every use; document_symbols: outline of the file"),
    path: argvString("The file (absolute or relative to /workspace)"),
    line: z.number().int().min(1).optional().describe("1-based line of the symbol; not needed for document_symbols"),
    character: z.number().int().min(1).optional().describe("1-based column of the symbol on that line; not needed for document_symbols"),
  }),
  async execute({ operation, path, line, character }, ctx) {
    const relative = sandboxPath(path);
    const file = posix.isAbsolute(relative) ? relative : posix.join(WORKSPACE, relative);
    const match = serverFor(file);
    if (!match) throw new ToolError(`lsp has no language server for ${path}; it supports ${supportedExtensions().join(" ")} files. Use grep for other files.`);
    if (operation !== "document_symbols" && (line === undefined || character === undefined)) {
      throw new ToolError(`${operation} needs line and character: the 1-based position of the symbol as read shows it`);
    }
    const reply = await askBroker(ctx, {
      op: operation, root: WORKSPACE, file, line: (line ?? 1) - 1, character: (character ?? 1) - 1,
      server: match.server, languageId: match.languageId, timeoutMs: REQUEST_TIMEOUT_MS, maxLocations: MAX_LOCATIONS,
    });
    if (!reply.ok) throw failure(reply.error, path, match.server);
    const where = `${shown(file)}:${line}:${character}`;
    if (operation === "hover") {
      const { text } = reply.result as { text: string };
      if (!text) return `No hover information at ${where}`;
      return text.length <= MAX_CHARS ? text : `${text.slice(0, MAX_CHARS)}\n\n(hover text cut at ${MAX_CHARS} of ${text.length} characters)`;
    }
    if (operation === "document_symbols") {
      const { symbols, total } = reply.result as { symbols: Symbol[]; total: number };
      if (total === 0) return `No symbols in ${shown(file)}`;
      return listing(symbols.map((s) => `${"  ".repeat(s.depth)}${s.kind} ${s.name} (line ${s.line})`), total, "symbols", "read the file for the rest");
    }
    const { locations, total } = reply.result as { locations: Location[]; total: number };
    if (total === 0) return operation === "definition" ? `No definition found at ${where}` : `No references found at ${where}`;
    return listing(locations.map((l) => `${shown(l.file)}:${l.line}:${l.column}: ${l.text}`), total, operation, "grep can list them all");
  },
});

/**
 * Sends one request to the session's broker through one exec of client.py, which starts the
 * broker if none runs. Failures of the exec itself are ToolErrors; the broker's own failures
 * are in the reply.
 */
export async function askBroker(ctx: ToolContext, request: Record<string, unknown>): Promise<BrokerReply> {
  const stdin = JSON.stringify({ hash: BROKER_HASH, broker: BROKER, request, startTimeoutMs: BROKER_START_MS });
  const timeoutMs = REQUEST_TIMEOUT_MS + BROKER_START_MS + 5_000;
  // -I -S: no user site or PYTHON* variables, no site import (start-up time); as the agent runs.
  const result = await exec(ctx, ["python3", "-I", "-S", "-c", CLIENT], { stdin, timeoutMs });
  if (result.timedOut) throw new ToolError(`lsp timed out after ${timeoutMs / 1000} s; try again, or use grep`);
  const tail = result.stderr.trim().slice(-2_000);
  if (result.exitCode !== 0) throw new ToolError(`lsp failed in the sandbox (exit code ${result.exitCode}): ${tail || "no output"}`);
  try {
    return JSON.parse(result.stdout) as BrokerReply;
  } catch {
    throw new ToolError(`lsp failed in the sandbox: its client printed ${JSON.stringify(result.stdout.slice(0, 200))}${tail ? `; stderr: ${tail}` : ""}`);
  }
}

function failure(error: { kind: string; message: string; stderr?: string }, path: string, server: LanguageServer): ToolError {
  const output = error.stderr?.trim() ? `\nIts last output:\n${error.stderr.trim()}` : "";
  switch (error.kind) {
    case "file_missing":
      return new ToolError(`File not found: ${path}`);
    case "not_a_file":
      return new ToolError(`${path} is a directory, not a file; list its files with glob`);
    case "bad_position":
      return new ToolError(`In ${path}, ${error.message}; give the 1-based line and character as read shows them`);
    case "timeout":
      return new ToolError(`${error.message}; a large project may still be loading: try again, or use grep`);
    case "server_failed":
      return new ToolError(`The ${server.name} failed: ${error.message}.${output}`);
    case "no_node":
      return new ToolError("lsp is unavailable: this sandbox has no node (its image predates the lsp tool; the operator rebuilds it with `make sandbox-image`). Use grep and read instead.");
    case "broker_failed":
      return new ToolError(`lsp failed in the sandbox: ${error.message}.${output}`);
    default:
      return new ToolError(`lsp failed: ${error.message}`);
  }
}

/** Paths under /workspace are shown relative to it, like the other tools show them. */
function shown(file: string): string {
  return file.startsWith(`${WORKSPACE}/`) ? file.slice(WORKSPACE.length + 1) : file;
}

/** `lines` joined up to MAX_CHARS, with a note of how many of `total` were left out. */
function listing(lines: string[], total: number, noun: string, hint: string): string {
  let text = "";
  let count = 0;
  for (const line of lines) {
    if (text.length + line.length + 1 > MAX_CHARS) break;
    text += count++ ? `\n${line}` : line;
  }
  return count < total ? `${text}\n\n(showing ${count} of ${total} ${noun}; ${hint})` : text;
}
