// How the MCP client checks a tool's structured output against the output schema the server declared.
import type { jsonSchemaValidator, JsonSchemaType, JsonSchemaValidator } from "@modelcontextprotocol/sdk/validation/types.js";
import { zodOfJsonSchema } from "@tack/linear-regex";

/**
 * The SDK's default validator (Ajv) compiles a server's `pattern`s into native RegExps, so a
 * server declaring `"pattern": "^(a+)+$"` and answering "aaaa…!" would hold this service for
 * minutes. This one converts the schema as the tools service converts a defined tool's (zod,
 * patterns on RE2, linear time). A schema it cannot convert (a lookahead, say) is not checked:
 * the output reaches the model as data either way, and refusing it would make the tool unusable.
 */
export const linearSchemaValidator: jsonSchemaValidator = {
  getValidator<T>(schema: JsonSchemaType): JsonSchemaValidator<T> {
    let check: ReturnType<typeof zodOfJsonSchema>;
    try {
      check = zodOfJsonSchema(schema);
    } catch {
      return (input) => ({ valid: true, data: input as T, errorMessage: undefined });
    }
    return (input) => {
      const result = check.safeParse(input);
      if (result.success) return { valid: true, data: input as T, errorMessage: undefined };
      return { valid: false, data: undefined, errorMessage: result.error.issues.map((issue) => `${issue.path.join(".") || "output"}: ${issue.message}`).join("; ") };
    };
  },
};
