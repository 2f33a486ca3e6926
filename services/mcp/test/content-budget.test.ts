// A result's image or blob is the server's data: its placeholder's size is counted in linear time
// (`/=+$/` took 5 s for 100,000 '=' before another character, and minutes for half a million).
import { expect, it } from "vitest";
import { renderBlock } from "../src/content.js";

it("content budget - an image whose data is half a million '=' and a letter gets its placeholder at once", () => {
  const data = `${"=".repeat(500_000)}x`;
  const started = performance.now();
  const shown = renderBlock({ type: "image", mimeType: "image/png", data });
  expect(performance.now() - started).toBeLessThan(1000);
  expect(shown).toBe(`[image: image/png, ${Math.round(Math.floor((data.length * 3) / 4) / 1024)} KB]`);
});

it("content budget - base64 padding is still left out of the size", () => {
  expect(renderBlock({ type: "image", mimeType: "image/png", data: "aGk=" })).toBe("[image: image/png, 2 B]");
  expect(renderBlock({ type: "resource", resource: { uri: "file:///a", mimeType: "application/octet-stream", blob: "aA==" } })).toBe("[resource: file:///a, application/octet-stream, 1 B]");
});
