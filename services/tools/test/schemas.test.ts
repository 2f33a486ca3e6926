import { describe, expect, it } from "vitest";
import { listTools } from "../src/registry.js";

// What the model sees of each tool, pinned so that any change to it shows in review.
describe("schemas", () => {
  // Every tool of every mode, once.
  const tools = new Map(["standard", "code", "minimal", "creator"].flatMap((mode) => listTools(mode)).map((tool) => [tool.name, tool]));
  for (const tool of tools.values()) {
    it(`schemas - ${tool.name} matches its snapshot`, async () => {
      const shown = { name: tool.name, description: tool.description, parameters: JSON.parse(tool.parametersJson) as unknown };
      await expect(`${JSON.stringify(shown, null, 2)}\n`).toMatchFileSnapshot(`./__snapshots__/tools/${tool.name}.json`);
    });
  }
});
