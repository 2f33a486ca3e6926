import type { IncomingMessage } from "node:http";
import type { z } from "zod";
import { GatewayError } from "./errors.js";

/** Largest request body the gateway reads. */
export const MAX_BODY_BYTES = 1024 * 1024;

/**
 * Reads a JSON request body and validates it with `schema`. Fails with 413 above
 * `MAX_BODY_BYTES`, with 400 naming line and column when the JSON is malformed and with 400
 * naming every invalid field when the schema rejects it.
 */
export async function readJson<S extends z.ZodType>(req: IncomingMessage, schema: S): Promise<z.output<S>> {
  const text = await readText(req);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new GatewayError(400, "gateway.malformed_json", `request body is not valid JSON: ${describeJsonError(text, error as Error)}`);
  }
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    const fields: Record<string, string> = {};
    for (const issue of parsed.error.issues) {
      const field = issue.path.length > 0 ? issue.path.join(".") : "(body)";
      fields[field] = fields[field] ? `${fields[field]}; ${issue.message}` : issue.message;
    }
    const summary = Object.entries(fields).map(([f, m]) => `${f}: ${m}`).join("; ");
    throw new GatewayError(400, "gateway.invalid_request", `invalid request body: ${summary}`, { details: fields });
  }
  return parsed.data;
}

async function readText(req: IncomingMessage): Promise<string> {
  const tooLarge = () => new GatewayError(413, "gateway.body_too_large", `request body is over ${MAX_BODY_BYTES} bytes (1 MiB); send less text per request`);
  // Refuse an announced oversize body before reading any of it; count bytes for chunked bodies.
  if (Number(req.headers["content-length"] ?? 0) > MAX_BODY_BYTES) throw tooLarge();
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw tooLarge();
    chunks.push(chunk);
  }
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(Buffer.concat(chunks));
  } catch {
    throw new GatewayError(400, "gateway.malformed_json", "request body is not valid UTF-8; send JSON encoded as UTF-8");
  }
}

/** Says where and why `text` is not JSON: V8's own messages omit the position for some errors. */
function describeJsonError(text: string, parseError: Error): string {
  const found = locateJsonError(text);
  if (!found) return parseError.message;
  const before = text.slice(0, found.offset);
  const line = before.split("\n").length;
  const column = found.offset - before.lastIndexOf("\n");
  const got = found.offset >= text.length ? "the end of the body" : JSON.stringify(text[found.offset]);
  return `expected ${found.expected} at line ${line}, column ${column}, found ${got}`;
}

class Stop {
  constructor(readonly expected: string) {}
}
const NUMBER = /-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/y;

/** A minimal JSON grammar walk that returns the first offset where `text` breaks the grammar. */
function locateJsonError(text: string): { offset: number; expected: string } | undefined {
  let i = 0;
  const fail = (expected: string): never => {
    throw new Stop(expected);
  };
  const space = () => {
    while (i < text.length && " \t\n\r".includes(text[i]!)) i++;
  };
  const string = () => {
    i++;
    while (i < text.length) {
      const c = text[i]!;
      if (c === '"') {
        i++;
        return;
      }
      if (c < " ") fail("a closing '\"' before this control character");
      if (c === "\\") {
        i++;
        if (text[i] === "u") {
          i++;
          if (!/^[0-9a-fA-F]{4}$/.test(text.slice(i, i + 4))) fail("4 hex digits after \\u");
          i += 4;
        } else {
          if (!'"\\/bfnrt'.includes(text[i] ?? "x")) fail("a valid escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
          i++;
        }
        continue;
      }
      i++;
    }
    fail("a closing '\"'");
  };
  const value = (): void => {
    space();
    const c = text[i];
    if (c === "{") {
      i++;
      space();
      if (text[i] === "}") return void i++;
      for (;;) {
        space();
        if (text[i] !== '"') fail("a double-quoted property name");
        string();
        space();
        if (text[i] !== ":") fail("':'");
        i++;
        value();
        space();
        if (text[i] === ",") i++;
        else if (text[i] === "}") return void i++;
        else fail("',' or '}'");
      }
    }
    if (c === "[") {
      i++;
      space();
      if (text[i] === "]") return void i++;
      for (;;) {
        value();
        space();
        if (text[i] === ",") i++;
        else if (text[i] === "]") return void i++;
        else fail("',' or ']'");
      }
    }
    if (c === '"') return string();
    NUMBER.lastIndex = i;
    const number = NUMBER.exec(text);
    if (number) return void (i += number[0].length);
    for (const literal of ["true", "false", "null"]) if (text.startsWith(literal, i)) return void (i += literal.length);
    fail("a value");
  };
  try {
    value();
    space();
    if (i < text.length) fail("the end of the body");
  } catch (error) {
    // Anything but a Stop (a stack overflow on absurd nesting) leaves the report to V8's message.
    return error instanceof Stop ? { offset: i, expected: error.expected } : undefined;
  }
  return undefined;
}
