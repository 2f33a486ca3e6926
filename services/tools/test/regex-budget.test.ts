import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { braveProvider, normaliseDomain } from "../src/web/search-providers.js";

// Regexes that read what a model or a search provider supplies run in linear time: each of these
// inputs took seconds (50,000 characters) to many minutes (500,000) with the backtracking
// regexes they replace (`[/:].*$`, `^\.+|\.+$`, `<[^>]*>`).

const N = 500_000;

/** `work`'s result, failing the test when it took a second or more. */
function quick<T>(work: () => T): T {
  const started = performance.now();
  const result = work();
  expect(performance.now() - started).toBeLessThan(1000);
  return result;
}

describe("regex budgets: web_search domain filters", () => {
  it("regex budget - normaliseDomain of a run of dots before a letter, or of slashes before a line break, is linear", () => {
    expect(quick(() => normaliseDomain(`a${".".repeat(N)}b`))).toBe(`a${".".repeat(N)}b`);
    expect(quick(() => normaliseDomain(`example.com${".".repeat(N)}`))).toBe("example.com");
    expect(quick(() => normaliseDomain(`example.com${"/".repeat(N)}\nb`))).toBe("example.com");
    expect(quick(() => normaliseDomain(`${":".repeat(N)}x`))).toBe("");
  });

  it("regex budget - normaliseDomain still reads scheme, path, port, dots and www. as before", () => {
    expect(normaliseDomain("  HTTPS://www.Example.com:8080/docs?q=1 ")).toBe("example.com");
    expect(normaliseDomain("..docs.example.org..")).toBe("docs.example.org");
    expect(normaliseDomain("example.com/a\nb")).toBe("example.com");
    expect(normaliseDomain("...")).toBe("");
  });
});

describe("regex budgets: Brave results", () => {
  let server: Server;
  let base: string;
  let answer: unknown;
  beforeAll(async () => {
    server = createServer((_request, response) => response.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(answer)));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it("regex budget - a title of half a million '<' without a '>' is read in linear time; tags are still dropped", async () => {
    answer = { web: { results: [
      { title: `${"<".repeat(N)}x`, url: "https://example.com/", description: "<strong>Tack</strong> &amp; <a <b>friends" },
    ] } };
    const provider = braveProvider({ baseUrl: base });
    const started = performance.now();
    const result = await provider.search({ query: "q", maxResults: 5, allowedDomains: [], blockedDomains: [] }, { key: "k", source: "test" }, new AbortController().signal);
    expect(performance.now() - started).toBeLessThan(1000);
    // A `<` with another `<` before its `>` is text: the tag is the last one (`<b>`).
    expect(result.results).toEqual([{ title: `${"<".repeat(N)}x`, url: "https://example.com/", snippet: "Tack & <a friends", age: "" }]);
  });
});
