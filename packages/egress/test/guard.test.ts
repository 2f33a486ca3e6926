import type { LookupAddress } from "node:dns";
import { networkInterfaces } from "node:os";
import { describe, expect, it } from "vitest";
import {
  addressLiteral, checkAddress, checkUrl, GuardError, MAX_URL_LENGTH, parseAllowList, pinnedLookup, resolveDestination,
  type GuardPolicy, type Resolver,
} from "../src/index.js";

// No network here: every decision is the guard's alone (resolvers are in-memory).
const open: GuardPolicy = { allow: [], ownAddresses: () => [] };

const REFUSED: [string, string][] = [
  ["127.0.0.1", "loopback (127.0.0.0/8)"],
  ["127.255.255.254", "loopback"],
  ["10.0.0.1", "private (10.0.0.0/8)"],
  ["172.16.0.1", "private (172.16.0.0/12)"],
  ["172.31.255.255", "private (172.16.0.0/12)"],
  ["192.168.1.1", "private (192.168.0.0/16)"],
  ["169.254.169.254", "link-local, the cloud metadata service"],
  ["169.254.1.1", "link-local (169.254.0.0/16)"],
  ["224.0.0.1", "multicast"],
  ["239.255.255.250", "multicast"],
  ["0.0.0.0", "unspecified"],
  ["0.1.2.3", "unspecified (0.0.0.0/8)"],
  ["255.255.255.255", "broadcast"],
  ["100.64.0.1", "carrier-grade NAT"],
  ["100.127.255.255", "carrier-grade NAT"],
  ["198.18.0.1", "benchmarking"],
  ["198.19.255.255", "benchmarking"],
  ["192.0.2.1", "documentation (192.0.2.0/24)"],
  ["198.51.100.7", "documentation (198.51.100.0/24)"],
  ["203.0.113.9", "documentation (203.0.113.0/24)"],
  ["240.0.0.1", "reserved (240.0.0.0/4)"],
  ["192.0.0.8", "IETF protocol assignments"],
  ["192.88.99.1", "6to4 relay anycast"],
  ["192.175.48.1", "special-purpose (as112)"],
  ["::1", "loopback (::1/128)"],
  ["::", "unspecified (::/128)"],
  ["fc00::1", "unique local"],
  ["fd12:3456::1", "unique local"],
  ["fe80::1", "link-local (fe80::/10)"],
  ["fe80::1%eth0", "link-local (fe80::/10)"],
  ["febf::1", "link-local (fe80::/10)"],
  ["fec0::1", "site-local (fec0::/10)"],
  ["ff02::1", "multicast"],
  ["2001:db8::1", "documentation (2001:db8::/32)"],
  ["3fff::1", "documentation (3fff::/20)"],
  ["100::1", "discard"],
  ["2001:2::1", "benchmarking"],
  ["4000::1", "not global unicast (outside 2000::/3)"],
  ["::ffff:127.0.0.1", "IPv4-mapped (::ffff:0:0/96), carrying 127.0.0.1"],
  // Mapped addresses are refused whatever they carry: no real DNS answer has one.
  ["::ffff:8.8.8.8", "IPv4-mapped"],
  ["::ffff:0:7f00:1", "IPv4-translated (SIIT)"],
  ["::7f00:1", "IPv4-compatible (::/96), carrying 127.0.0.1"],
  // ipaddr.js reads the dotted compatible form as mapped; refused either way.
  ["::127.0.0.1", "carrying 127.0.0.1"],
  ["64:ff9b::a9fe:a9fe", "NAT64 (64:ff9b::/96) carrying 169.254.169.254, which is link-local, the cloud metadata service"],
  ["64:ff9b::10.0.0.1", "NAT64 (64:ff9b::/96) carrying 10.0.0.1, which is private"],
  ["64:ff9b:1::8.8.8.8", "local-use NAT64 (64:ff9b:1::/48)"],
  ["2002:a00:1::1", "6to4 (2002::/16) carrying 10.0.0.1, which is private"],
  ["2002:7f00:1::", "6to4 (2002::/16) carrying 127.0.0.1, which is loopback"],
  // Teredo: server in bits 32-63, client inverted in the last 32 bits (here 10.0.0.1 and 8.8.8.8).
  ["2001:0:a00:1::f7f7:f7f7", "Teredo (2001::/32) server carrying 10.0.0.1, which is private"],
  ["2001:0:4136:e378:8000:63bf:f5ff:fffe", "Teredo (2001::/32) client carrying 10.0.0.1, which is private"],
  ["2001:0:4136:e378:8000:63bf:80ff:fffe", "Teredo (2001::/32) client carrying 127.0.0.1, which is loopback"],
  // Odd IPv4 spellings read the way inet_aton would read them.
  ["0x7f.1", "loopback"],
  ["2130706433", "loopback"],
  ["0177.0.0.1", "loopback"],
  ["127.1", "loopback"],
  ["10.1", "private"],
  ["0x0a.0.0.1", "private"],
  ["0xa9fea9fe", "link-local, the cloud metadata service"],
];

const ALLOWED: [string, string][] = [
  ["8.8.8.8", "8.8.8.8"],
  ["1.1.1.1", "1.1.1.1"],
  ["93.184.215.14", "93.184.215.14"],
  ["172.32.0.1", "172.32.0.1"], // just past 172.16/12
  ["100.128.0.1", "100.128.0.1"], // just past 100.64/10
  ["11.0.0.1", "11.0.0.1"],
  ["0127.0.0.1", "87.0.0.1"], // octal 0127 is 87: public, and that is what would be connected to
  ["2606:4700:4700::1111", "2606:4700:4700::1111"],
  ["64:ff9b::808:808", "64:ff9b::808:808"], // NAT64 of a public address
  ["2002:808:808::1", "2002:808:808::1"], // 6to4 of a public address
  ["2001:0:4136:e378:8000:63bf:f7f7:f7f7", "2001:0:4136:e378:8000:63bf:f7f7:f7f7"], // Teredo, both ends public
];

describe("checkAddress", () => {
  for (const [address, reason] of REFUSED) {
    it(`web guard - refuses ${address}: ${reason}`, () => {
      const verdict = checkAddress(address, open);
      expect(verdict.refused).toContain(reason);
    });
  }

  for (const [address, normal] of ALLOWED) {
    it(`web guard - allows public ${address}`, () => {
      expect(checkAddress(address, open)).toEqual({ address: normal, family: normal.includes(":") ? 6 : 4 });
    });
  }

  it("web guard - an allowlisted CIDR passes and nothing next to it does", () => {
    const policy: GuardPolicy = { allow: parseAllowList("127.0.0.1/32, 10.1.0.0/16 ::1"), ownAddresses: () => [] };
    expect(checkAddress("127.0.0.1", policy).refused).toBeUndefined();
    expect(checkAddress("10.1.200.3", policy).refused).toBeUndefined();
    expect(checkAddress("::1", policy).refused).toBeUndefined();
    expect(checkAddress("127.0.0.2", policy).refused).toContain("loopback");
    expect(checkAddress("10.2.0.1", policy).refused).toContain("private");
    // The same host spelled as a mapped IPv6 address is not what the operator allowed.
    expect(checkAddress("::ffff:127.0.0.1", policy).refused).toContain("IPv4-mapped");
    expect(checkAddress("2002:7f00:1::", policy).refused).toContain("6to4");
  });

  it("web guard - bad allowlist entries are named with an example of a good one", () => {
    expect(() => parseAllowList("10.0.0.0/8, 10.0.0.0/33")).toThrow('web_fetch allowlist entry "10.0.0.0/33" is not a CIDR or IP address; write e.g. 10.1.2.0/24 or 127.0.0.1');
    expect(() => parseAllowList(["example.com"])).toThrow('"example.com" is not a CIDR');
    expect(parseAllowList("")).toEqual([]);
    expect(parseAllowList(undefined)).toEqual([]);
  });

  it("web guard - this host's own interface addresses are refused even when public", () => {
    const policy: GuardPolicy = { allow: [], ownAddresses: () => ["93.184.215.14", "2606:4700::1", "fe80::1%eth0"] };
    expect(checkAddress("93.184.215.14", policy).refused).toBe("an address of this host's own interfaces");
    expect(checkAddress("2606:4700:0::1", policy).refused).toBe("an address of this host's own interfaces");
    expect(checkAddress("93.184.215.15", policy).refused).toBeUndefined();
  });

  it("web guard - every address of this machine's real interfaces is refused by the default policy", () => {
    const addresses = Object.values(networkInterfaces()).flatMap((list) => (list ?? []).map((entry) => entry.address));
    expect(addresses.length).toBeGreaterThan(0);
    for (const address of addresses) expect(checkAddress(address, { allow: [] }).refused, address).toBeTruthy();
  });

  it("web guard - text that is no address is refused as such", () => {
    expect(() => checkAddress("example.com", open)).toThrow(new GuardError("address", '"example.com" is not an IP address'));
  });
});

describe("checkUrl", () => {
  const refusedUrls: [string, string, string][] = [
    ["ftp://example.com/file", "url-scheme", "scheme ftp: is not allowed; web_fetch only fetches http: and https: URLs"],
    ["file:///etc/passwd", "url-scheme", "scheme file: is not allowed"],
    ["gopher://example.com:70/1", "url-scheme", "scheme gopher: is not allowed"],
    ["javascript:alert(1)", "url-scheme", "scheme javascript: is not allowed"],
    ["data:text/plain,hello", "url-scheme", "scheme data: is not allowed"],
    ["http://user:secret@example.com/", "url-credentials", "URLs with credentials (user:password@) are not allowed"],
    ["https://user@example.com/", "url-credentials", "credentials"],
    ["https://:secret@example.com/", "url-credentials", "credentials"],
    [`https://example.com/${"a".repeat(MAX_URL_LENGTH)}`, "url-length", `the URL is ${MAX_URL_LENGTH + 20} characters; web_fetch takes at most 2048`],
    ["not a url", "url-syntax", '"not a url" is not a valid absolute URL; give one like https://example.com/page'],
    ["/relative/path", "url-syntax", "not a valid absolute URL"],
    ["http://", "url-syntax", "not a valid absolute URL"],
    ["http://256.0.0.1/", "url-syntax", "not a valid absolute URL"],
  ];
  for (const [url, rule, message] of refusedUrls) {
    it(`web guard - refuses ${url.slice(0, 40)} (${rule})`, () => {
      let caught: unknown;
      try {
        checkUrl(url);
      } catch (error) {
        caught = error;
      }
      expect(caught).toBeInstanceOf(GuardError);
      expect((caught as GuardError).rule).toBe(rule);
      expect((caught as GuardError).message).toContain(message);
    });
  }

  it("web guard - a URL of exactly 2,048 characters passes, the fragment is dropped, relative redirects resolve", () => {
    const url = `https://example.com/${"a".repeat(MAX_URL_LENGTH - 20)}`;
    expect(url.length).toBe(MAX_URL_LENGTH);
    expect(checkUrl(url).href).toBe(url);
    expect(checkUrl("https://example.com/a#section").href).toBe("https://example.com/a");
    expect(checkUrl("../b?q=1", new URL("https://example.com/x/y/z")).href).toBe("https://example.com/x/b?q=1");
    expect(() => checkUrl("ftp://example.com/", new URL("https://example.com/"))).toThrow("scheme ftp:");
  });

  // What WHATWG URL makes of odd host spellings, and the literal the guard then checks (no DNS).
  const literals: [string, string][] = [
    ["http://2130706433/", "127.0.0.1"],
    ["http://0177.0.0.1/", "127.0.0.1"],
    ["http://0x7f.1/", "127.0.0.1"],
    ["http://0x7f000001/", "127.0.0.1"],
    ["http://127.1/", "127.0.0.1"],
    ["http://10.1/", "10.0.0.1"],
    ["http://127.0.0.1./", "127.0.0.1"],
    ["http://%31%32%37.0.0.1/", "127.0.0.1"],
    ["http://１２７.０.０.１/", "127.0.0.1"],
    ["http://0127.0.0.1/", "87.0.0.1"],
    ["http://[::ffff:127.0.0.1]/", "::ffff:7f00:1"],
    ["http://[0:0:0:0:0:0:0:1]/", "::1"],
    ["http://[64:ff9b::169.254.169.254]/", "64:ff9b::a9fe:a9fe"],
  ];
  for (const [url, literal] of literals) {
    it(`web guard - ${url} is the address ${literal}`, () => {
      expect(addressLiteral(checkUrl(url).hostname)).toBe(literal);
    });
  }

  it("web guard - names stay names; an odd IPv4 form a parser left alone is still read as an address", () => {
    expect(addressLiteral("example.com")).toBeUndefined();
    expect(addressLiteral("127.0.0.1.nip.io")).toBeUndefined();
    expect(addressLiteral("0x7f.1")).toBe("127.0.0.1");
    expect(addressLiteral("017700000001")).toBe("127.0.0.1");
  });
});

describe("resolveDestination", () => {
  const table = (answers: Record<string, string[]>) => {
    const asked: string[] = [];
    const resolve: Resolver = async (hostname) => {
      asked.push(hostname);
      const list = answers[hostname];
      if (!list) throw Object.assign(new Error(`queryA ENOTFOUND ${hostname}`), { code: "ENOTFOUND" });
      return list;
    };
    return { resolve, asked };
  };

  it("web guard - one refused address in a mixed answer refuses the host and lists every address", async () => {
    const { resolve } = table({ "mixed.example": ["93.184.215.14", "10.0.0.1"] });
    await expect(resolveDestination(checkUrl("https://mixed.example/"), open, resolve)).rejects.toThrow(
      "mixed.example resolves to 10.0.0.1, which is private (10.0.0.0/8) (all its addresses: 93.184.215.14, 10.0.0.1); web_fetch only reaches public internet addresses",
    );
  });

  it("web guard - a literal address is checked without asking DNS", async () => {
    const { resolve, asked } = table({});
    await expect(resolveDestination(checkUrl("http://0x7f.1:8080/"), open, resolve)).rejects.toThrow("127.0.0.1 is loopback (127.0.0.0/8)");
    await expect(resolveDestination(checkUrl("http://[::ffff:169.254.169.254]/"), open, resolve)).rejects.toThrow("::ffff:a9fe:a9fe is IPv4-mapped (::ffff:0:0/96), carrying 169.254.169.254");
    const ok = await resolveDestination(checkUrl("http://[2606:4700:4700::1111]/"), open, resolve);
    expect(ok).toMatchObject({ hostname: "2606:4700:4700::1111", addresses: [{ address: "2606:4700:4700::1111", family: 6 }] });
    expect(asked).toEqual([]);
  });

  it("web guard - unknown names and empty answers are refused under the dns rule", async () => {
    const { resolve } = table({ "empty.example": [] });
    await expect(resolveDestination(checkUrl("https://nowhere.example/"), open, resolve)).rejects.toMatchObject({
      rule: "dns", message: "nowhere.example could not be resolved (ENOTFOUND); check the host name",
    });
    await expect(resolveDestination(checkUrl("https://empty.example/"), open, resolve)).rejects.toMatchObject({
      rule: "dns", message: "empty.example has no A or AAAA records; check the host name",
    });
  });

  it("web guard - a public answer gives a destination pinned to exactly its addresses", async () => {
    const { resolve, asked } = table({ "ok.example": ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"] });
    const destination = await resolveDestination(checkUrl("https://ok.example/a"), open, resolve);
    expect(asked).toEqual(["ok.example"]);
    const lookup = pinnedLookup(destination);
    const ask = (hostname: string, options: object) => new Promise<{ error: Error | null; address: string | LookupAddress[]; family?: number }>((done) => {
      lookup(hostname, options, (error, address, family) => done({ error, address, family }));
    });
    expect(await ask("ok.example", { all: true })).toEqual({ error: null, address: destination.addresses, family: undefined });
    expect(await ask("ok.example", {})).toEqual({ error: null, address: "93.184.215.14", family: 4 });
    expect(await ask("ok.example", { family: 6 })).toEqual({ error: null, address: "2606:2800:21f:cb07:6820:80da:af6b:8b2c", family: 6 });
    const other = await ask("evil.example", {});
    expect(other.error?.message).toBe("web_fetch: connect asked for evil.example, but only ok.example was checked");
  });
});
