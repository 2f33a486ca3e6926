// The egress guard: which URLs and addresses an outbound request from Tack may reach (web_fetch, MCP over HTTP).
export {
  addressLiteral, checkAddress, checkUrl, classifyAddress, dnsServerResolver, GuardError, MAX_URL_LENGTH, parseAddress, parseAllowList, pinnedLookup,
  resolveDestination, systemResolver, type AddressVerdict, type Destination, type GuardPolicy, type Resolver,
} from "./guard.js";
