// What the CLI prints comes from models, tools and remote services; written raw, an escape
// sequence in it could set the window title, write the clipboard (OSC 52), move the cursor
// to overwrite earlier lines, or reorder text with bidi overrides. Everything session-borne
// goes through here before it reaches a terminal.
import { TackError } from "@tack/bus";

// C0 controls except \t and \n, DEL, C1 controls (0x80-0x9f: 0x9b is a one-byte CSI, 0x9d OSC,
// 0x90 DCS, 0x9e PM, 0x9f APC) and the bidi embeddings, overrides and isolates.
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const UNSAFE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;
// What JSON.stringify leaves unescaped of the above: it escapes only controls below 0x20.
const UNSAFE_IN_JSON = /[\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;

/**
 * `text` with every terminal control made visible: C0 controls as their Unicode control
 * pictures (ESC as `␛`, BEL as `␇`, CR as `␍`), DEL as `␡`, C1 controls and bidi controls as
 * `<U+XXXX>`. Line breaks (`\n`, and `\r\n` as `\n`) and tabs stay. Since each control
 * character is replaced on its own, a sequence split across streamed chunks is caught too.
 */
export function terminalSafe(text: string): string {
  return text.replace(/\r\n/g, "\n").replace(UNSAFE, visible);
}

/**
 * `JSON.stringify(value)` that is also safe to print: the characters JSON leaves raw (DEL,
 * C1 controls, bidi controls) are written as `\uXXXX` escapes, so the text parses back to
 * exactly the same value.
 */
export function terminalSafeJson(value: unknown): string {
  // Outside strings JSON text is ASCII, so every match is inside a string, where an escape is valid.
  return JSON.stringify(value).replace(UNSAFE_IN_JSON, (c) => `\\u${hex(c)}`);
}

/** A copy of `value` with `terminalSafe` applied to every string in it (plain objects and arrays; other objects as they are). */
export function terminalSafeDeep<T>(value: T): T {
  if (typeof value === "string") return terminalSafe(value) as T;
  if (Array.isArray(value)) return value.map((item: unknown) => terminalSafeDeep(item)) as T;
  if (value !== null && typeof value === "object" && Object.getPrototypeOf(value) === Object.prototype) {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, terminalSafeDeep(item)])) as T;
  }
  return value;
}

/** `error` as a TackError whose message is safe to print (same code, details and retryability), for errors that may carry remote text. */
export function terminalSafeError(error: unknown): unknown {
  if (!(error instanceof Error)) return error;
  const failure = TackError.from(error);
  const message = terminalSafe(failure.message);
  if (message === failure.message) return error;
  return new TackError(failure.code, message, { retryable: failure.retryable, details: { ...failure.details }, cause: error });
}

function visible(c: string): string {
  const code = c.charCodeAt(0);
  if (code < 0x20) return String.fromCharCode(0x2400 + code);
  if (code === 0x7f) return "\u2421";
  return `<U+${hex(c).toUpperCase()}>`;
}

function hex(c: string): string {
  return c.charCodeAt(0).toString(16).padStart(4, "0");
}
