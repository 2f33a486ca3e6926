// What a caught value says, whatever was thrown (an Error, a Node system error, anything else).

/** The message of a thrown value: an Error's message, else the value as text. */
export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** A Node system error's code (`ENOENT`, `ECONNREFUSED`…), or undefined when the thrown value has none. */
export function errorCode(error: unknown): string | undefined {
  return error instanceof Error && "code" in error && typeof error.code === "string" ? error.code : undefined;
}
