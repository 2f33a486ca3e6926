// Where JSON text first goes wrong, as a position only. V8's JSON.parse messages quote the
// text around the error ("Unexpected token 'h', "hello…" is not valid JSON"), so they must
// never reach an error about a file: this scanner finds the offset without quoting anything.

const HEX = /[0-9a-fA-F]/;
const ESCAPED = new Set(['"', "\\", "/", "b", "f", "n", "r", "t"]);

/**
 * The UTF-16 offset of the first character where `text` stops being one JSON value (RFC
 * 8259), `text.length` when it ends too early, or undefined when it is valid JSON.
 * Iterative, so deeply nested input cannot overflow the stack.
 */
export function jsonErrorOffset(text: string): number | undefined {
  const n = text.length;
  let i = 0;
  const skipSpace = () => {
    while (i < n) {
      const c = text.charCodeAt(i);
      if (c !== 0x20 && c !== 0x09 && c !== 0x0a && c !== 0x0d) break;
      i++;
    }
  };
  // Offset just past the string starting at `i` (a '"'), or -1 - (offset of the error).
  const stringEnd = (): number => {
    let j = i + 1;
    while (j < n) {
      const c = text.charCodeAt(j);
      if (c === 0x22) return j + 1;
      if (c < 0x20) return -1 - j;
      if (c === 0x5c) {
        const next = text[j + 1];
        if (next === undefined) return -1 - n;
        if (next === "u") {
          for (let k = j + 2; k < j + 6; k++) if (!HEX.test(text[k] ?? "")) return -1 - Math.min(k, n);
          j += 6;
          continue;
        }
        if (!ESCAPED.has(next)) return -1 - (j + 1);
        j += 2;
        continue;
      }
      j++;
    }
    return -1 - n;
  };
  // What the scanner expects next; containers are a stack of '{' and '['.
  let state: "value" | "valueOrClose" | "key" | "keyOrClose" | "after" = "value";
  const stack: ("{" | "[")[] = [];
  for (;;) {
    skipSpace();
    const c = text[i];
    switch (state) {
      case "valueOrClose":
      case "value": {
        if (state === "valueOrClose" && c === "]") {
          stack.pop();
          i++;
          state = "after";
          break;
        }
        if (c === undefined) return n;
        if (c === "{" || c === "[") {
          stack.push(c);
          i++;
          state = c === "{" ? "keyOrClose" : "valueOrClose";
          break;
        }
        if (c === '"') {
          const end = stringEnd();
          if (end < 0) return -1 - end;
          i = end;
        } else if (c === "t" || c === "f" || c === "n") {
          const word = c === "t" ? "true" : c === "f" ? "false" : "null";
          for (let k = 1; k < word.length; k++) if (text[i + k] !== word[k]) return Math.min(i + k, n);
          i += word.length;
        } else {
          const end = numberEnd(text, i);
          if (end < 0) return -1 - end;
          i = end;
        }
        state = "after";
        break;
      }
      case "keyOrClose":
      case "key": {
        if (state === "keyOrClose" && c === "}") {
          stack.pop();
          i++;
          state = "after";
          break;
        }
        if (c !== '"') return i;
        const end = stringEnd();
        if (end < 0) return -1 - end;
        i = end;
        skipSpace();
        if (text[i] !== ":") return i;
        i++;
        state = "value";
        break;
      }
      case "after": {
        const top = stack.at(-1);
        if (top === undefined) return i < n ? i : undefined;
        if (c === ",") {
          i++;
          state = top === "{" ? "key" : "value";
        } else if ((top === "{" && c === "}") || (top === "[" && c === "]")) {
          stack.pop();
          i++;
        } else {
          return i;
        }
        break;
      }
    }
  }
}

/** Offset just past the number starting at `i`, or -1 - (offset of the first character that cannot continue it). */
function numberEnd(text: string, i: number): number {
  const digit = (at: number) => {
    const c = text.charCodeAt(at);
    return c >= 0x30 && c <= 0x39;
  };
  const digits = (at: number) => {
    while (digit(at)) at++;
    return at;
  };
  let j = i;
  if (text[j] === "-") j++;
  if (text[j] === "0") j++;
  else if (digit(j)) j = digits(j);
  else return -1 - j;
  if (text[j] === ".") {
    if (!digit(j + 1)) return -1 - (j + 1);
    j = digits(j + 1);
  }
  if (text[j] === "e" || text[j] === "E") {
    j++;
    if (text[j] === "+" || text[j] === "-") j++;
    if (!digit(j)) return -1 - j;
    j = digits(j);
  }
  return j;
}

/** 1-based line and column (in UTF-16 units) of `offset` in `text`. */
export function lineAndColumn(text: string, offset: number): { line: number; column: number } {
  let line = 1;
  let lineStart = 0;
  for (let i = text.indexOf("\n"); i !== -1 && i < offset; i = text.indexOf("\n", i + 1)) {
    line++;
    lineStart = i + 1;
  }
  return { line, column: offset - lineStart + 1 };
}

/**
 * Where `text` (which JSON.parse refused) is not JSON, as "line L column C" and nothing
 * from the text itself; "an unknown position" only if this scanner and V8 disagree.
 */
export function describeJsonError(text: string): string {
  const offset = jsonErrorOffset(text);
  if (offset === undefined) return "at an unknown position";
  const { line, column } = lineAndColumn(text, offset);
  return `at line ${line} column ${column}`;
}
