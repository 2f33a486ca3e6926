// One lint setup for the whole monorepo.
import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["**/node_modules/**", "packages/proto/src/gen/**", ".tack/**", "bench/results/**", "dist/**", "packages/web/dist/**", "test-results/**"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: { process: "readonly", console: "readonly", Buffer: "readonly", setTimeout: "readonly", clearTimeout: "readonly", setInterval: "readonly", clearInterval: "readonly", URL: "readonly", performance: "readonly", TextEncoder: "readonly", TextDecoder: "readonly", fetch: "readonly", AbortController: "readonly", AbortSignal: "readonly", NodeJS: "readonly" } },
    rules: {
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_" }],
    },
  },
);
