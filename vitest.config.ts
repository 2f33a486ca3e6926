import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["packages/*/test/**/*.test.ts", "services/*/test/**/*.test.ts", "test/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Two cores: run files two at a time; tests that share Docker or NATS use unique names.
    maxWorkers: 2,
    // The second reporter ends the run with a short list of what failed (CI keeps only the tail of the output).
    reporters: ["default", "./scripts/vitest-failures.ts"],
    // Every service started by a test reads this operator configuration (tenants, workspace roots under /tmp).
    env: { TACK_CONFIG: new URL("test/fixtures/operator.yaml", import.meta.url).pathname },
  },
});
