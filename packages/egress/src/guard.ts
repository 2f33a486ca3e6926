import { promises as dns, type LookupAddress } from "node:dns";
import { isIP, type LookupFunction } from "node:net";
import { networkInterfaces } from "node:os";
import ipaddr from "ipaddr.js";

type Address = ipaddr.IPv4 | ipaddr.IPv6;
type Cidr = [Address, number];

/** Longest URL web_fetch takes (the request line of most servers tops out not far above it). */
export const MAX_URL_LENGTH = 2048;

/** A URL or address web_fetch will not reach; `rule` names what refused it. */
export class GuardError extends Error {
  constructor(readonly rule: string, message: string) {
    super(message);
    this.name = "GuardError";
  }
}

/** What the guard lets through besides public unicast addresses. */
export interface GuardPolicy {
  /** Operator-allowed CIDRs (internal hosts); they pass whatever their range. Empty by default. */
  readonly allow: readonly Cidr[];
  /** Addresses of this host's interfaces; default: os.networkInterfaces() at each check (interfaces come and go). */
  readonly ownAddresses?: () => Iterable<string>;
}

const cidrs = (table: readonly (readonly [string, string])[]): [Cidr, string][] =>
  table.map(([cidr, name]) => [ipaddr.parseCIDR(cidr), name]);

// Most specific first: the first match names the refusal.
const REFUSED_V4 = cidrs([
  ["0.0.0.0/8", "unspecified"],
  ["10.0.0.0/8", "private"],
  ["100.64.0.0/10", "carrier-grade NAT"],
  ["127.0.0.0/8", "loopback"],
  ["169.254.169.254/32", "link-local, the cloud metadata service"],
  ["169.254.0.0/16", "link-local"],
  ["172.16.0.0/12", "private"],
  ["192.0.0.0/24", "IETF protocol assignments"],
  ["192.0.2.0/24", "documentation"],
  ["192.88.99.0/24", "6to4 relay anycast"],
  ["192.168.0.0/16", "private"],
  ["198.18.0.0/15", "benchmarking"],
  ["198.51.100.0/24", "documentation"],
  ["203.0.113.0/24", "documentation"],
  ["224.0.0.0/4", "multicast"],
  ["255.255.255.255/32", "broadcast"],
  ["240.0.0.0/4", "reserved"],
]);

const REFUSED_V6 = cidrs([
  ["::/128", "unspecified"],
  ["::1/128", "loopback"],
  ["::ffff:0:0/96", "IPv4-mapped"],
  ["::ffff:0:0:0/96", "IPv4-translated (SIIT)"],
  ["::/96", "IPv4-compatible"],
  ["64:ff9b:1::/48", "local-use NAT64"],
  ["100::/64", "discard"],
  ["2001:2::/48", "benchmarking"],
  ["2001:db8::/32", "documentation"],
  ["3fff::/20", "documentation"],
  ["fc00::/7", "unique local (private)"],
  ["fe80::/10", "link-local"],
  ["fec0::/10", "site-local"],
  ["ff00::/8", "multicast"],
]);

const NAT64 = ipaddr.parseCIDR("64:ff9b::/96");
const SIX_TO_FOUR = ipaddr.parseCIDR("2002::/16");
const TEREDO = ipaddr.parseCIDR("2001::/32");
const GLOBAL_UNICAST = ipaddr.parseCIDR("2000::/3");

const v4 = (high: number, low: number) => new ipaddr.IPv4([high >> 8, high & 0xff, low >> 8, low & 0xff]);

/**
 * Why `address` must not be reached, or undefined for a public unicast address. The operator's
 * allowlist is not consulted here (see checkAddress). IPv6 forms that carry an IPv4 address
 * (NAT64, 6to4, Teredo) are refused when the address they carry is.
 */
export function classifyAddress(address: Address, own: ReadonlySet<string> = new Set()): string | undefined {
  if (address.kind() === "ipv4") {
    const named = REFUSED_V4.find(([cidr]) => address.match(cidr));
    if (named) return `${named[1]} (${cidrText(named[0])})`;
    if (own.has(address.toString())) return "an address of this host's own interfaces";
    // ipaddr.js knows a few more special-purpose blocks (AS112, AMT): none is a web server.
    const range = address.range();
    return range === "unicast" ? undefined : `special-purpose (${range})`;
  }
  const v6 = address as ipaddr.IPv6;
  const named = REFUSED_V6.find(([cidr]) => v6.match(cidr));
  if (named) return `${named[1]} (${cidrText(named[0])})${carried(v6, named[1])}`;
  if (own.has(v6.toString())) return "an address of this host's own interfaces";
  const p = v6.parts as [number, number, number, number, number, number, number, number];
  const inner: [string, ipaddr.IPv4][] = [];
  if (v6.match(NAT64)) inner.push(["NAT64 (64:ff9b::/96)", v4(p[6], p[7])]);
  else if (v6.match(SIX_TO_FOUR)) inner.push(["6to4 (2002::/16)", v4(p[1], p[2])]);
  else if (v6.match(TEREDO)) {
    // Teredo carries the server in bits 32-63 and the client, inverted, in the last 32.
    inner.push(["Teredo (2001::/32) server", v4(p[2], p[3])], ["Teredo (2001::/32) client", v4(p[6] ^ 0xffff, p[7] ^ 0xffff)]);
  } else if (!v6.match(GLOBAL_UNICAST)) {
    return "not global unicast (outside 2000::/3)";
  } else {
    const range = v6.range();
    return range === "unicast" ? undefined : `special-purpose (${range})`;
  }
  for (const [form, embedded] of inner) {
    const why = classifyAddress(embedded, own);
    if (why) return `${form} carrying ${embedded}, which is ${why}`;
  }
  return undefined;
}

// Names the IPv4 address inside the mapped/compatible forms, so the refusal says where it led.
function carried(address: ipaddr.IPv6, form: string): string {
  if (!/^IPv4-/.test(form)) return "";
  const p = address.parts;
  return `, carrying ${v4(p[6]!, p[7]!)}`;
}

function cidrText([address, bits]: Cidr): string {
  return `${address.toString()}/${bits}`;
}

/** Parses an address the way a connect would read it (odd IPv4 spellings included); throws GuardError `address` when it is none. */
export function parseAddress(text: string): Address {
  const bare = text.startsWith("[") && text.endsWith("]") ? text.slice(1, -1) : text;
  if (!ipaddr.isValid(bare)) throw new GuardError("address", `${JSON.stringify(text)} is not an IP address`);
  const address = ipaddr.parse(bare);
  // A zone only says which link; the address is link-local either way and the zone must not hide it.
  if (address.kind() === "ipv6") delete (address as ipaddr.IPv6).zoneId;
  return address;
}

export type AddressVerdict = { readonly address: string; readonly family: 4 | 6; readonly refused?: string };

/** Checks one resolved address against `policy`: allowlisted passes, any refused range refuses (`refused` says which). */
export function checkAddress(text: string, policy: GuardPolicy): AddressVerdict {
  const address = parseAddress(text);
  const family = address.kind() === "ipv4" ? 4 : 6;
  const normal = address.toString();
  if (policy.allow.some((cidr) => cidr[0].kind() === address.kind() && address.match(cidr))) return { address: normal, family };
  const refused = classifyAddress(address, ownAddresses(policy));
  return refused ? { address: normal, family, refused } : { address: normal, family };
}

function ownAddresses(policy: GuardPolicy): Set<string> {
  const own = new Set<string>();
  const listed = policy.ownAddresses?.() ?? Object.values(networkInterfaces()).flatMap((list) => (list ?? []).map((entry) => entry.address));
  for (const text of listed) {
    try {
      own.add(parseAddress(text).toString());
    } catch {
      // Not an address (cannot happen for os.networkInterfaces()); nothing to refuse by it.
    }
  }
  return own;
}

/** Parses an operator allowlist: CIDRs or single addresses, separated by commas or whitespace. Throws naming the bad entry. */
export function parseAllowList(text: string | readonly string[] | undefined): Cidr[] {
  const entries = (typeof text === "string" ? text.split(/[\s,]+/) : (text ?? [])).map((entry) => entry.trim()).filter(Boolean);
  return entries.map((entry) => {
    if (ipaddr.isValidCIDR(entry)) return ipaddr.parseCIDR(entry);
    if (ipaddr.isValid(entry)) {
      const address = ipaddr.parse(entry);
      return [address, address.kind() === "ipv4" ? 32 : 128];
    }
    throw new Error(`web_fetch allowlist entry ${JSON.stringify(entry)} is not a CIDR or IP address; write e.g. 10.1.2.0/24 or 127.0.0.1`);
  });
}

/**
 * Checks a URL before anything is resolved: absolute http(s), no credentials, at most
 * MAX_URL_LENGTH characters. `base` resolves a relative redirect target. Returns the parsed URL
 * without its fragment (never sent).
 */
export function checkUrl(text: string, base?: URL): URL {
  if (text.length > MAX_URL_LENGTH) {
    throw new GuardError("url-length", `the URL is ${text.length} characters; web_fetch takes at most ${MAX_URL_LENGTH}`);
  }
  let url: URL;
  try {
    url = new URL(text, base);
  } catch {
    throw new GuardError("url-syntax", `${JSON.stringify(text)} is not a valid absolute URL; give one like https://example.com/page`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new GuardError("url-scheme", `scheme ${url.protocol} is not allowed; web_fetch only fetches http: and https: URLs`);
  }
  if (url.username || url.password) {
    throw new GuardError("url-credentials", "URLs with credentials (user:password@) are not allowed; give the URL without them");
  }
  if (url.href.length > MAX_URL_LENGTH) {
    throw new GuardError("url-length", `the URL is ${url.href.length} characters once normalised; web_fetch takes at most ${MAX_URL_LENGTH}`);
  }
  url.hash = "";
  return url;
}

/** The address literal in `hostname`, or undefined when it is a name to resolve. */
export function addressLiteral(hostname: string): string | undefined {
  if (hostname.startsWith("[")) return hostname.slice(1, -1);
  if (isIP(hostname)) return hostname;
  // The WHATWG parser already rewrites decimal, octal, hex and short IPv4 forms to dotted quads;
  // a form it might leave alone must still not reach getaddrinfo, which would read it as an address.
  if (ipaddr.IPv4.isValid(hostname)) return ipaddr.IPv4.parse(hostname).toString();
  return undefined;
}

/** Resolves a host name to its addresses. */
export type Resolver = (hostname: string) => Promise<string[]>;

/** The system resolver (getaddrinfo: /etc/hosts, then DNS). */
export const systemResolver: Resolver = async (hostname) => (await dns.lookup(hostname, { all: true, verbatim: true })).map((entry) => entry.address);

/** Asks the DNS servers `servers` ("ip" or "ip:port") for A and AAAA records, bypassing /etc/hosts. */
export function dnsServerResolver(servers: readonly string[], timeoutMs = 5_000): Resolver {
  const resolver = new dns.Resolver({ timeout: timeoutMs, tries: 2 });
  resolver.setServers([...servers]);
  return async (hostname) => {
    const answers = await Promise.allSettled([resolver.resolve4(hostname), resolver.resolve6(hostname)]);
    const failed = answers.filter((answer) => answer.status === "rejected").map((answer) => answer.reason as NodeJS.ErrnoException);
    // A name that exists with records of one family only is fine; a name that does not exist is not.
    if (failed.length === 2 && failed.every((error) => error.code === "ENOTFOUND")) throw failed[0];
    const hard = failed.find((error) => error.code !== "ENODATA" && error.code !== "ENOTFOUND");
    if (hard) throw hard;
    return answers.flatMap((answer) => (answer.status === "fulfilled" ? answer.value : []));
  };
}

/** A URL whose host resolved to addresses that all passed the guard. */
export interface Destination {
  readonly url: URL;
  /** Host name without IPv6 brackets; what TLS and the Host header keep. */
  readonly hostname: string;
  readonly addresses: readonly LookupAddress[];
}

/**
 * Resolves the host of `url` once and checks every address it gave; refuses the whole host when
 * any one is refused (a mixed answer is how rebinding and split-horizon tricks start).
 */
export async function resolveDestination(url: URL, policy: GuardPolicy, resolve: Resolver): Promise<Destination> {
  const literal = addressLiteral(url.hostname);
  let answers: string[];
  if (literal !== undefined) {
    answers = [literal];
  } else {
    try {
      answers = await resolve(url.hostname);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      throw new GuardError("dns", `${url.hostname} could not be resolved (${code ?? (error as Error).message}); check the host name`);
    }
    if (answers.length === 0) throw new GuardError("dns", `${url.hostname} has no A or AAAA records; check the host name`);
  }
  const verdicts = answers.map((answer) => checkAddress(answer, policy));
  const refused = verdicts.find((verdict) => verdict.refused);
  if (refused) {
    const what = literal !== undefined ? `${refused.address} is` : `${url.hostname} resolves to ${refused.address}, which is`;
    const others = verdicts.length > 1 ? ` (all its addresses: ${verdicts.map((v) => v.address).join(", ")})` : "";
    throw new GuardError("address", `${what} ${refused.refused}${others}; web_fetch only reaches public internet addresses`);
  }
  const hostname = literal ?? url.hostname;
  return { url, hostname, addresses: verdicts.map(({ address, family }) => ({ address, family })) };
}

/**
 * A `lookup` for net/tls connect that answers only with the checked addresses of `destination`,
 * so the connection goes where the guard looked and no second resolution can rebind it.
 */
export function pinnedLookup(destination: Destination): LookupFunction {
  return (hostname, options, callback) => {
    if (hostname !== destination.hostname) {
      callback(Object.assign(new Error(`web_fetch: connect asked for ${hostname}, but only ${destination.hostname} was checked`), { code: "ENOTFOUND" }), []);
      return;
    }
    const addresses = options.family === 4 || options.family === 6
      ? destination.addresses.filter((entry) => entry.family === options.family)
      : destination.addresses;
    if (addresses.length === 0) {
      callback(Object.assign(new Error(`web_fetch: ${hostname} has no checked IPv${options.family} address`), { code: "ENOTFOUND" }), []);
      return;
    }
    if (options.all) callback(null, [...addresses]);
    else callback(null, addresses[0]!.address, addresses[0]!.family);
  };
}
