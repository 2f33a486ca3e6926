// A bad OTEL_* value stops a service at start-up with one log line naming the variable, exit 1, no stack.
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("../../..", import.meta.url));

describe("telemetry configuration at start-up", () => {
  it.each([
    ["OTEL_EXPORTER_OTLP_PROTOCOL", "bogus", /OTEL_EXPORTER_OTLP_PROTOCOL is "bogus": use http\/protobuf/],
    ["OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://x", /OTEL_EXPORTER_OTLP_ENDPOINT is "ftp:\/\/x": give an http:\/\/ or https:\/\/ URL/],
  ])("%s=%s: one start-up line, exit 1, before connecting anywhere", (variable, value, message) => {
    // NATS_URL points at a closed port: had the service got past telemetry, it would fail differently.
    const run = spawnSync(process.execPath, ["--import", "tsx", "services/skills/src/main.ts"], {
      cwd: root, encoding: "utf8", timeout: 60_000, env: { ...process.env, [variable]: value, NATS_URL: "nats://127.0.0.1:1" },
    });
    expect(run.status).toBe(1);
    const lines = `${run.stdout}${run.stderr}`.trim().split("\n").filter(Boolean);
    expect(lines).toHaveLength(1);
    const line = JSON.parse(lines[0]!) as { level: string; code: string; error: string; msg: string; component: string };
    expect(line).toMatchObject({ level: "error", code: "config.invalid", msg: "start-up failed", component: "skills" });
    expect(line.error).toMatch(message);
  });
});
