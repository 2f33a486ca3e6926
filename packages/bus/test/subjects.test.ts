import { describe, expect, it } from "vitest";
import { serviceNamespace } from "../src/index.js";

describe("serviceNamespace", () => {
  it("subjects - a service starts in the given namespace, or tack; a missing URL or a bad namespace is <service>.invalid_options saying what to set", () => {
    expect(serviceNamespace("tools", { natsUrl: "nats://127.0.0.1:4222" })).toBe("tack");
    expect(serviceNamespace("mcp", { natsUrl: "nats://127.0.0.1:4222", namespace: "team-a" })).toBe("team-a");
    expect(() => serviceNamespace("skills", { natsUrl: "" })).toThrow(expect.objectContaining({
      code: "skills.invalid_options", message: "natsUrl is empty; set NATS_URL, e.g. nats://127.0.0.1:4222",
    }));
    expect(() => serviceNamespace("tools", { natsUrl: "nats://127.0.0.1:4222", namespace: "Team A" })).toThrow(expect.objectContaining({
      code: "tools.invalid_options", message: `invalid namespace "Team A": use 1-64 lowercase letters, digits, '_' or '-'`,
    }));
  });
});
