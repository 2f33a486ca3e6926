// Servers that lie: a tool list with a schema that is no object schema fails that server (one
// warning naming it) while the others work; a result that breaks the tool's own output schema
// is a tool error, not a crash.
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { McpBridge } from "../src/index.js";
import { everything } from "./support.js";

const LIAR = fileURLToPath(new URL("./fixtures/liar.mjs", import.meta.url));
const bridges: McpBridge[] = [];
afterEach(async () => {
  await Promise.all(bridges.splice(0).map((b) => b.close()));
});

describe("servers that lie", () => {
  it("a tool list with a non-object input schema fails its server with one warning; the other server works", async () => {
    const bridge = await McpBridge.start({ servers: { liar: { command: process.execPath, args: [LIAR, "schema"], env: {} }, everything: everything() } });
    bridges.push(bridge);
    const states = new Map(bridge.servers().map((s) => [s.name, s]));
    expect(states.get("everything")!.state).toBe("ready");
    expect(states.get("liar")!.state).toBe("failed");
    expect(states.get("liar")!.error).toMatch(/liar/);
    expect(bridge.listTools().some((t) => t.server === "liar")).toBe(false);
    const warnings = bridge.servers().find((s) => s.name === "liar")!.warnings;
    expect(warnings.length).toBeGreaterThanOrEqual(1);
    expect(warnings[0]).toMatch(/liar/);
    expect((await bridge.call("mcp__everything__echo", JSON.stringify({ message: "still here" }))).content).toBe("Echo: still here");
  });

  it("a result that breaks the tool's declared output schema is a tool error the model can read", async () => {
    const bridge = await McpBridge.start({ servers: { liar: { command: process.execPath, args: [LIAR, "output"], env: {} } } });
    bridges.push(bridge);
    expect(bridge.servers()[0]!.state).toBe("ready");
    const result = await bridge.call("mcp__liar__count", "{}");
    expect(result.isError).toBe(true);
    expect(result.content.length).toBeGreaterThan(0);
  });
});
