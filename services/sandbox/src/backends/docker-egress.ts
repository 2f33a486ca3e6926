// The egress guard of networked sandboxes (mode danger-full-access). Such a sandbox joins its
// namespace's own Docker bridge network, whose bridge interface has a fixed name, and host
// firewall rules keyed on that interface refuse what it must not reach: the host itself (any of
// its addresses), loopback, private, link-local and metadata, CGNAT, documentation, multicast and
// reserved ranges, and every network the host is attached to; IPv6 entirely (the network has
// none). The operator widens it with `sandbox.egress.allow_cidrs`. The rules are installed and
// read back before any networked container starts or restarts, and re-checked while one runs;
// when they cannot be, networked sandboxes are refused. See docs/decisions/0009-sandbox-egress.md.
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";
import { networkInterfaces } from "node:os";
import { basename } from "node:path";
import type Docker from "dockerode";
import { TackError } from "@tack/bus";
import { dockerFailure, engineRuntimes, statusOf, type RuntimeInfo } from "./docker-engine.js";
import { LABELS } from "../spec.js";

/** What a networked sandbox may reach beyond the public internet. */
export interface EgressPolicy {
  /** IPv4 CIDRs reachable although they are in a refused range (the host's own addresses included). */
  readonly allowCidrs: readonly string[];
  /** DNS (port 53, UDP and TCP) to the host's resolvers, which Docker's embedded resolver forwards to from the sandbox's network namespace. */
  readonly allowDns: boolean;
}

/** IPv4 destinations refused unless allowed: everything that is not the public internet. */
export const REFUSED_IPV4: readonly string[] = [
  "0.0.0.0/8", // "this" network
  "10.0.0.0/8", // private
  "100.64.0.0/10", // carrier-grade NAT (and Alibaba's metadata, 100.100.100.200)
  "127.0.0.0/8", // loopback
  "168.63.129.16/32", // Azure's platform endpoint (its wire server)
  "169.254.0.0/16", // link-local, cloud metadata at 169.254.169.254
  "172.16.0.0/12", // private (Docker's default networks)
  "192.0.0.0/24", // IETF protocol assignments
  "192.0.2.0/24", // documentation (TEST-NET-1)
  "192.88.99.0/24", // 6to4 relay anycast
  "192.168.0.0/16", // private
  "198.18.0.0/15", // benchmarking
  "198.51.100.0/24", // documentation (TEST-NET-2)
  "203.0.113.0/24", // documentation (TEST-NET-3)
  "224.0.0.0/4", // multicast
  "240.0.0.0/4", // reserved, and the limited broadcast address
];

/** Docker's network, bridge interface and firewall chains of a namespace's networked sandboxes. */
export interface EgressNames {
  readonly network: string;
  readonly bridge: string;
  /** IPv4, forwarded traffic (jumped to from DOCKER-USER). */
  readonly forward: string;
  /** IPv4, traffic to the host itself (jumped to from INPUT). */
  readonly input: string;
  /** IPv6, both directions (jumped to from FORWARD and INPUT). */
  readonly v6: string;
}

/** The names for `namespace`; interface names have at most 15 characters, so the bridge and chains carry a hash of it. */
export function egressNames(namespace: string): EgressNames {
  const hash = createHash("sha256").update(namespace).digest("hex").slice(0, 10);
  return { network: `tack-egress-${namespace}`, bridge: `tkeg-${hash}`, forward: `TACK-EGRESS-${hash}`, input: `TACK-EGRESS-IN-${hash}`, v6: `TACK-EGRESS6-${hash}` };
}

/** The Docker network label that marks a namespace's egress network. */
export const EGRESS_LABEL = "tack.egress";

// ---- IPv4 arithmetic ----

function parseIpv4(text: string): number | undefined {
  const parts = text.split(".");
  if (parts.length !== 4 || parts.some((part) => !/^\d{1,3}$/.test(part) || Number(part) > 255)) return undefined;
  return parts.reduce((value, part) => value * 256 + Number(part), 0);
}

function formatIpv4(value: number): string {
  return [24, 16, 8, 0].map((shift) => (value >>> shift) & 255).join(".");
}

function parseCidr(cidr: string): { net: number; bits: number } | undefined {
  const [address, bitsText, extra] = cidr.split("/");
  const value = parseIpv4(address ?? "");
  const bits = bitsText === undefined ? 32 : /^\d{1,2}$/.test(bitsText) ? Number(bitsText) : NaN;
  if (value === undefined || extra !== undefined || !(bits >= 0 && bits <= 32)) return undefined;
  const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
  return { net: (value & mask) >>> 0, bits };
}

/** `cidr` as iptables prints it (network address and prefix length, `/32` for an address); fails on anything but IPv4. */
export function canonicalCidr(cidr: string): string {
  const parsed = parseCidr(cidr);
  if (!parsed) {
    throw new TackError("sandbox.egress_bad_policy", `egress policy: ${JSON.stringify(cidr)} is not an IPv4 CIDR such as 203.0.113.7/32 (networked sandboxes have no IPv6)`);
  }
  return `${formatIpv4(parsed.net)}/${parsed.bits}`;
}

/** True when CIDR `inner` lies inside CIDR `outer`. */
export function cidrContains(outer: string, inner: string): boolean {
  const a = parseCidr(outer);
  const b = parseCidr(inner);
  if (!a || !b || b.bits < a.bits) return false;
  const mask = a.bits === 0 ? 0 : (0xffffffff << (32 - a.bits)) >>> 0;
  return ((b.net & mask) >>> 0) === a.net;
}

/** The IPv4 addresses (as /32) and attached networks of the host's interfaces, from `interfaces` (default: this host's). */
export function hostNetworks(interfaces: ReturnType<typeof networkInterfaces> = networkInterfaces()): string[] {
  const found: string[] = [];
  for (const entries of Object.values(interfaces)) {
    for (const entry of entries ?? []) {
      if (entry.family !== "IPv4") continue;
      found.push(canonicalCidr(`${entry.address}/32`));
      if (entry.cidr) found.push(canonicalCidr(entry.cidr));
    }
  }
  return found;
}

/** The refused IPv4 ranges: the fixed ones plus `extra` (the host's addresses and networks) not already inside one. */
export function refusedNetworks(extra: readonly string[]): string[] {
  const refused = [...REFUSED_IPV4];
  for (const cidr of extra.map(canonicalCidr)) if (!refused.some((outer) => cidrContains(outer, cidr))) refused.push(cidr);
  return refused;
}

/** The IPv4 nameservers of a resolv.conf text, loopback ones excluded (Docker forwards to those from the host itself). */
export function parseNameservers(text: string): string[] {
  const servers: string[] = [];
  for (const line of text.split("\n")) {
    const address = /^\s*nameserver\s+(\S+)/.exec(line)?.[1];
    if (address && parseIpv4(address) !== undefined && !cidrContains("127.0.0.0/8", `${address}/32`)) servers.push(canonicalCidr(`${address}/32`));
  }
  return [...new Set(servers)];
}

// The resolvers Docker's embedded DNS forwards to: the host's, or systemd-resolved's upstreams when the host only has its stub.
async function hostResolvers(): Promise<string[]> {
  const read = (path: string) => readFile(path, "utf8").catch(() => "");
  const text = await read("/etc/resolv.conf");
  const servers = parseNameservers(text);
  if (servers.length > 0 || !/nameserver\s+127\./.test(text)) return servers;
  return parseNameservers(await read("/run/systemd/resolve/resolv.conf"));
}

// ---- the rules ----

/** One jump into a chain of ours, from a chain of the host's firewall. */
export interface Jump {
  readonly family: 4 | 6;
  readonly parent: string;
  /** The rule as `iptables -S` prints it. */
  readonly rule: string;
}

/** Everything installed for one namespace: the chains' rules (as `iptables -S` prints them) and the jumps into them. */
export interface EgressRules {
  readonly bridge: string;
  readonly v4: ReadonlyMap<string, readonly string[]>;
  readonly v6: ReadonlyMap<string, readonly string[]>;
  readonly jumps: readonly Jump[];
}

const REJECT4 = "-j REJECT --reject-with icmp-admin-prohibited";
const REJECT6 = "-j REJECT --reject-with icmp6-adm-prohibited";

/**
 * The firewall of a namespace's networked sandboxes. Forwarded IPv4 traffic from the bridge
 * passes the allowed CIDRs and DNS to the resolvers, is refused to the refused ranges, and
 * otherwise goes on to Docker's rules (the public internet); IPv4 traffic to the host itself is
 * refused but for the same allowances; IPv6 from the bridge is refused whatever its destination.
 */
export function egressRules(names: EgressNames, plan: { readonly allow: readonly string[]; readonly resolvers: readonly string[]; readonly refused: readonly string[] }): EgressRules {
  const passes = (chain: string) => [
    ...plan.allow.map((cidr) => `-A ${chain} -d ${canonicalCidr(cidr)} -j RETURN`),
    ...plan.resolvers.flatMap((server) => ["udp", "tcp"].map((proto) => `-A ${chain} -d ${canonicalCidr(server)} -p ${proto} -m ${proto} --dport 53 -j RETURN`)),
  ];
  const jump = (family: 4 | 6, parent: string, chain: string): Jump => ({ family, parent, rule: `-A ${parent} -i ${names.bridge} -j ${chain}` });
  return {
    bridge: names.bridge,
    v4: new Map([
      [names.forward, [...passes(names.forward), ...plan.refused.map((cidr) => `-A ${names.forward} -d ${canonicalCidr(cidr)} ${REJECT4}`)]],
      [names.input, [...passes(names.input), `-A ${names.input} ${REJECT4}`]],
    ]),
    v6: new Map([[names.v6, [`-A ${names.v6} ${REJECT6}`]]]),
    jumps: [jump(4, "DOCKER-USER", names.forward), jump(4, "INPUT", names.input), jump(6, "FORWARD", names.v6), jump(6, "INPUT", names.v6)],
  };
}

/**
 * True when `rule` is in `parentRules` (`iptables -S` lines) with nothing before it that could
 * decide the bridge's traffic first: only rules bound to another named interface, or the same jump.
 */
export function jumpPlaced(parentRules: readonly string[], rule: string, bridge: string): boolean {
  const rules = parentRules.filter((line) => line.startsWith("-A "));
  const at = rules.indexOf(rule);
  if (at < 0) return false;
  return rules.slice(0, at).every((line) => {
    if (line === rule) return true;
    const iface = /(?:^| )(!? ?)-i (\S+)/.exec(line);
    if (!iface || iface[1]) return false;
    const name = iface[2] ?? "";
    return name.endsWith("+") ? !bridge.startsWith(name.slice(0, -1)) : name !== bridge;
  });
}

/** Both families' filter tables: each chain's rules (`-A` lines), by chain. */
export interface FilterTables {
  readonly v4: ReadonlyMap<string, readonly string[]>;
  readonly v6: ReadonlyMap<string, readonly string[]>;
}

/** The filter table of an `iptables-save` output: each chain's `-A` lines (a chain without rules has none). */
export function parseSave(text: string): Map<string, string[]> {
  const chains = new Map<string, string[]>();
  let filter = false;
  for (const line of text.split("\n")) {
    if (line.startsWith("*")) filter = line.trim() === "*filter";
    else if (!filter) continue;
    else if (line.startsWith(":")) chains.set(line.slice(1).split(" ")[0] ?? "", chains.get(line.slice(1).split(" ")[0] ?? "") ?? []);
    else if (line.startsWith("-A ")) {
      const chain = line.split(" ")[1] ?? "";
      chains.set(chain, [...(chains.get(chain) ?? []), line.trimEnd()]);
    }
  }
  return chains;
}

/** How the kernel's tables differ from `plan`: chains missing or different, jumps missing or not first for the bridge; empty when they match. */
export function ruleDrift(plan: EgressRules, tables: FilterTables): string[] {
  const problems: string[] = [];
  for (const [family, chains, listed] of [[4, plan.v4, tables.v4], [6, plan.v6, tables.v6]] as const) {
    for (const [chain, expected] of chains) {
      const actual = listed.get(chain);
      if (actual === undefined) problems.push(`chain ${chain} (IPv${family}) is missing`);
      else if (actual.join("\n") !== expected.join("\n")) problems.push(`chain ${chain} (IPv${family}) has other rules`);
    }
  }
  for (const jump of plan.jumps) {
    const parent = (jump.family === 4 ? tables.v4 : tables.v6).get(jump.parent);
    if (parent === undefined) problems.push(`chain ${jump.parent} (IPv${jump.family}) does not exist`);
    else if (!jumpPlaced(parent, jump.rule, plan.bridge)) problems.push(`${jump.parent} (IPv${jump.family}) does not send the bridge's traffic to ${jump.rule.split(" ").at(-1)} first`);
  }
  return problems;
}

// ---- the runtime of networked sandboxes ----

function declaredWithoutNetwork(info: RuntimeInfo): boolean {
  const args = info.runtimeArgs ?? [];
  return args.includes("--network=none") || args.some((arg, i) => arg === "--network" && args[i + 1] === "none");
}

/**
 * The runtime networked sandboxes run under when the service runs `runtime`: its networked twin
 * `<runtime>-net` when the engine declares one (the same binary: runsc-net is runsc, never runc),
 * else `runtime` itself unless it is declared with `--network=none`. Anything else is refused
 * (`sandbox.runtime_without_network`), never replaced by another runtime.
 */
export function networkRuntime(runtimes: Readonly<Record<string, RuntimeInfo>>, runtime: string): { name: string; info: RuntimeInfo } {
  const twin = `${runtime}-net`;
  const base = runtimes[runtime];
  const net = runtimes[twin];
  if (net) {
    const binary = (info: RuntimeInfo | undefined, name: string) => basename(info?.path ?? name);
    if (binary(net, twin) !== binary(base, runtime)) {
      throw new TackError(
        "sandbox.runtime_without_network",
        `Docker runtime ${twin} runs ${net.path ?? twin}, not ${base?.path ?? runtime}, so networked sandboxes would leave runtime ${runtime}; ` +
          `declare ${twin} with the same path as ${runtime} in /etc/docker/daemon.json (scripts/ensure-docker.sh does) and reload dockerd`,
      );
    }
    if (declaredWithoutNetwork(net)) {
      throw new TackError(
        "sandbox.runtime_without_network",
        `Docker runtime ${twin} is declared with --network=none, so mode danger-full-access would have no network; remove it from ${twin}'s runtimeArgs in /etc/docker/daemon.json and reload dockerd`,
      );
    }
    return { name: twin, info: net };
  }
  if (base && !declaredWithoutNetwork(base)) return { name: runtime, info: base };
  throw new TackError(
    "sandbox.runtime_without_network",
    `Docker runtime ${runtime} is declared with --network=none and the engine has no ${twin} runtime for networked sandboxes, so mode danger-full-access would have no network; ` +
      `run scripts/ensure-docker.sh as root (it declares ${twin} and reloads dockerd) or use a mode without network`,
  );
}

// ---- commands ----

interface CommandResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

function runCommand(file: string, args: readonly string[], input?: string): Promise<CommandResult> {
  return new Promise((resolve) => {
    const child = execFile(file, [...args], { timeout: 20_000, maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
      const code = error ? (typeof (error as { code?: unknown }).code === "number" ? ((error as { code: number }).code) : -1) : 0;
      resolve({ code, stdout: String(stdout), stderr: error && !stderr ? error.message : String(stderr) });
    });
    child.stdin?.on("error", () => undefined);
    child.stdin?.end(input ?? "");
  });
}

/** The firewall commands, by family (`iptables`/`ip6tables` from PATH: the variant dockerd uses). */
export interface FirewallCommands {
  readonly iptables: string;
  readonly ip6tables: string;
}

/** Where a networked sandbox goes: its Docker network and runtime. */
export interface EgressGrant {
  readonly network: string;
  readonly runtime: string;
  readonly runtimeInfo: RuntimeInfo;
}

export interface EgressOptions {
  readonly namespace: string;
  /** The service's runtime; networked sandboxes run under {@link networkRuntime} of it. */
  readonly runtime: string;
  readonly policy: EgressPolicy;
  readonly warn: (message: string) => void;
  readonly commands?: FirewallCommands;
  /** How often the rules are read back while the network exists (default 10 s). */
  readonly checkEveryMs?: number;
}

const CHECK_EVERY_MS = 10_000;
const RUNTIMES_FRESH_MS = 10_000;
const COLLECT_EVERY_MS = 60_000;
// An egress network of another namespace with no container of that namespace left for this long is collected.
const ABANDONED_AFTER_MS = 10 * 60_000;

/**
 * One namespace's egress guard on this Docker host: its network, its firewall rules, and the
 * runtime of networked sandboxes. `grant` makes sure all of it is in place (creating the network
 * and installing the rules as needed, then reading them back) or fails with
 * `sandbox.egress_unavailable` / `sandbox.runtime_without_network`; nothing networked starts
 * without it. While the network exists the rules are read back every few seconds and
 * reinstalled when they drifted; when that fails, the network's containers are killed.
 */
export class Egress {
  readonly names: EgressNames;
  readonly #docker: Docker;
  readonly #options: EgressOptions;
  readonly #commands: FirewallCommands;
  #queue: Promise<unknown> = Promise.resolve();
  #checker: NodeJS.Timeout | undefined;
  #collector: NodeJS.Timeout | undefined;
  #stopped = false;
  #runtimes: { at: number; read: Promise<Record<string, RuntimeInfo>> } | undefined;

  constructor(docker: Docker, options: EgressOptions) {
    this.#docker = docker;
    this.#options = options;
    this.#commands = options.commands ?? { iptables: "iptables", ip6tables: "ip6tables" };
    this.names = egressNames(options.namespace);
    for (const cidr of options.policy.allowCidrs) canonicalCidr(cidr);
  }

  /**
   * At service start: removes networked containers that are not on the egress network (made
   * before it existed), re-checks the rules of a network left by an earlier process (they are gone
   * after a host reboot) and starts watching it, or else checks that the firewall can be managed
   * at all, warning now when networked sandboxes will be refused. Starts collecting the networks
   * of namespaces that are gone.
   */
  async start(): Promise<void> {
    await this.#removeUnguarded();
    this.#collector = setInterval(() => void this.collectAbandoned().catch((error: unknown) => this.#options.warn(`collecting abandoned egress networks failed: ${(error as Error).message}`)), COLLECT_EVERY_MS);
    this.#collector.unref();
    if (await this.#inspect()) {
      await this.check();
      this.#watch();
      return;
    }
    const problem = await this.#firewallProblem();
    if (problem) this.#options.warn(`networked sandboxes (mode danger-full-access) will be refused: ${problem}`);
  }

  /**
   * Makes sure a networked sandbox can start: the runtime, the network and the rules, read back
   * from the kernel. Called before every networked container starts or restarts.
   */
  async grant(): Promise<EgressGrant> {
    if (this.#stopped) throw new TackError("sandbox.egress_unavailable", "the sandbox service is stopping; networked sandboxes are refused");
    const runtime = networkRuntime(await this.#engineRuntimes(), this.#options.runtime);
    await this.#serialized(() => this.#ensure());
    this.#watch();
    return { network: this.names.network, runtime: runtime.name, runtimeInfo: runtime.info };
  }

  /**
   * Reads the rules back while the network exists, reinstalling them when they drifted; when they
   * cannot be put back, kills the containers on the network (fail closed) and warns.
   */
  async check(): Promise<void> {
    await this.#serialized(async () => {
      const network = await this.#inspect();
      if (!network) return;
      try {
        const drift = ruleDrift(await this.#plan(network), await this.#tables());
        if (drift.length === 0) return;
        this.#options.warn(`egress rules of network ${this.names.network} drifted (${drift.join("; ")}); reinstalling them`);
        await this.#ensure();
      } catch (error) {
        const ids = Object.keys(network.Containers ?? {});
        this.#options.warn(`egress rules of network ${this.names.network} cannot be enforced (${(error as Error).message}); killing its ${ids.length} container(s)`);
        await Promise.all(ids.map((id) => this.#docker.getContainer(id).kill().catch(() => undefined)));
      }
    });
  }

  /**
   * Stops watching; with `remove`, also removes the network and its rules unless a container
   * (of another replica of the namespace) still uses it.
   */
  async stop(remove: boolean): Promise<void> {
    this.#stopped = true;
    clearInterval(this.#checker);
    clearInterval(this.#collector);
    if (remove) await this.#serialized(() => this.#remove(this.names, this.#options.namespace));
    else await this.#queue.catch(() => undefined);
  }

  /**
   * Removes the egress networks (and their rules) of other namespaces that have had no
   * container on this engine for a while: what processes that died without cleaning up left.
   */
  async collectAbandoned(): Promise<void> {
    let networks: Docker.NetworkInspectInfo[];
    try {
      networks = await this.#docker.listNetworks({ filters: { label: [EGRESS_LABEL] } });
    } catch (error) {
      throw dockerFailure(error, "list the egress networks");
    }
    for (const listed of networks) {
      const namespace = listed.Labels?.[LABELS.namespace];
      if (!namespace || namespace === this.#options.namespace || listed.Name !== egressNames(namespace).network) continue;
      if (Date.now() - Date.parse(listed.Created) < ABANDONED_AFTER_MS) continue;
      const network = await this.#docker.getNetwork(listed.Id).inspect().catch(() => undefined) as Docker.NetworkInspectInfo | undefined;
      if (!network || Object.keys(network.Containers ?? {}).length > 0) continue;
      const containers = await this.#docker.listContainers({ all: true, filters: { label: [`${LABELS.namespace}=${namespace}`] } });
      if (containers.length > 0) continue;
      this.#options.warn(`removing egress network ${listed.Name} of namespace ${namespace}: no container of it is left`);
      await this.#remove(egressNames(namespace), namespace);
    }
  }

  // ---- internals ----

  // Networked containers of this namespace that are not on its egress network (made before the guard existed) are removed: their sessions get guarded ones.
  async #removeUnguarded(): Promise<void> {
    let containers: Docker.ContainerInfo[];
    try {
      containers = await this.#docker.listContainers({ all: true, filters: { label: [`${LABELS.namespace}=${this.#options.namespace}`, `${LABELS.mode}=danger-full-access`] } });
    } catch (error) {
      throw dockerFailure(error, `list the networked sandboxes of namespace ${this.#options.namespace}`);
    }
    for (const info of containers) {
      if (info.HostConfig?.NetworkMode === this.names.network) continue;
      this.#options.warn(`removing networked sandbox ${info.Names[0] ?? info.Id}: it is on network ${info.HostConfig?.NetworkMode ?? "unknown"}, not the egress-guarded ${this.names.network}`);
      await this.#docker.getContainer(info.Id).remove({ force: true }).catch((error: unknown) => {
        if (statusOf(error) !== 404) throw dockerFailure(error, `remove unguarded sandbox ${info.Id}`);
      });
    }
  }

  // The engine's runtimes, re-read every few seconds (they change only when dockerd reloads).
  #engineRuntimes(): Promise<Record<string, RuntimeInfo>> {
    if (!this.#runtimes || Date.now() - this.#runtimes.at > RUNTIMES_FRESH_MS) {
      const read = engineRuntimes(this.#docker);
      this.#runtimes = { at: Date.now(), read };
      read.catch(() => {
        if (this.#runtimes?.read === read) this.#runtimes = undefined;
      });
    }
    return this.#runtimes.read;
  }

  #serialized<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#queue.then(fn, fn);
    this.#queue = run.catch(() => undefined);
    return run;
  }

  #watch(): void {
    if (this.#checker || this.#stopped) return;
    this.#checker = setInterval(() => void this.check().catch((error: unknown) => this.#options.warn(`egress check failed: ${(error as Error).message}`)), this.#options.checkEveryMs ?? CHECK_EVERY_MS);
    this.#checker.unref();
  }

  async #inspect(name = this.names.network): Promise<Docker.NetworkInspectInfo | undefined> {
    try {
      return (await this.#docker.getNetwork(name).inspect()) as Docker.NetworkInspectInfo;
    } catch (error) {
      if (statusOf(error) === 404) return undefined;
      throw dockerFailure(error, `inspect network ${name}`);
    }
  }

  // Creates the network if needed, installs the rules if they differ, and reads them back; fails closed.
  async #ensure(): Promise<void> {
    let tables: FilterTables;
    try {
      // Before the network exists: a host whose firewall cannot be managed gets none.
      tables = await this.#tables();
    } catch (error) {
      throw unavailable((error as Error).message, error);
    }
    const network = await this.#network();
    const plan = await this.#plan(network);
    try {
      if (ruleDrift(plan, tables).length === 0) return;
      await this.#install(plan, tables);
      const left = ruleDrift(plan, await this.#tables());
      if (left.length > 0) throw new Error(`after installing them, ${left.join("; ")}`);
    } catch (error) {
      throw unavailable((error as Error).message, error);
    }
  }

  // The namespace's network, created when missing; one that exists with other settings is refused.
  async #network(): Promise<Docker.NetworkInspectInfo> {
    let network = await this.#inspect();
    if (!network) {
      try {
        await this.#docker.createNetwork({
          Name: this.names.network,
          Driver: "bridge",
          CheckDuplicate: true,
          EnableIPv6: false,
          Internal: false,
          Attachable: false,
          Options: {
            "com.docker.network.bridge.name": this.names.bridge,
            // No traffic between two sandboxes on the bridge, whatever the rules below say.
            "com.docker.network.bridge.enable_icc": "false",
            "com.docker.network.bridge.enable_ip_masquerade": "true",
          },
          Labels: { [LABELS.namespace]: this.#options.namespace, [EGRESS_LABEL]: "1" },
        });
      } catch (error) {
        // 409: another replica created it meanwhile.
        if (statusOf(error) !== 409) throw dockerFailure(error, `create network ${this.names.network} for networked sandboxes`);
      }
      network = await this.#inspect();
      if (!network) throw unavailable(`network ${this.names.network} vanished right after its creation`);
    }
    const options = network.Options ?? {};
    if (network.Driver !== "bridge" || options["com.docker.network.bridge.name"] !== this.names.bridge || options["com.docker.network.bridge.enable_icc"] !== "false" || network.EnableIPv6) {
      throw unavailable(
        `network ${this.names.network} exists with other settings (driver ${network.Driver}, bridge ${options["com.docker.network.bridge.name"] ?? "unnamed"}, icc ${options["com.docker.network.bridge.enable_icc"] ?? "true"}, IPv6 ${network.EnableIPv6}); ` +
          `remove it with \`docker network rm ${this.names.network}\` so the service creates its own`,
      );
    }
    return network;
  }

  async #plan(network: Docker.NetworkInspectInfo): Promise<EgressRules> {
    const subnets = (network.IPAM?.Config ?? []).map((config) => config.Subnet).filter((subnet): subnet is string => !!subnet && parseCidr(subnet) !== undefined);
    return egressRules(this.names, {
      allow: this.#options.policy.allowCidrs.map(canonicalCidr),
      resolvers: this.#options.policy.allowDns ? await hostResolvers() : [],
      refused: refusedNetworks([...hostNetworks(), ...subnets]),
    });
  }

  async #install(plan: EgressRules, tables: FilterTables): Promise<void> {
    for (const [family, chains] of [[4, plan.v4], [6, plan.v6]] as const) {
      // One transaction per family: each chain is created or emptied and filled at once.
      const input = ["*filter", ...[...chains.keys()].map((chain) => `:${chain} - [0:0]`), ...[...chains.values()].flat(), "COMMIT", ""].join("\n");
      await this.#run(`${this.#binary(family)}-restore`, ["--noflush", "-w"], input);
    }
    for (const jump of plan.jumps) {
      const parent = (jump.family === 4 ? tables.v4 : tables.v6).get(jump.parent);
      if (!parent) throw new Error(`chain ${jump.parent} (IPv${jump.family}) does not exist`);
      if (jumpPlaced(parent, jump.rule, plan.bridge)) continue;
      for (let i = parent.filter((line) => line === jump.rule).length; i > 0; i--) await this.#run(this.#binary(jump.family), ["-w", "-D", jump.parent, ...jump.rule.split(" ").slice(2)]);
      await this.#run(this.#binary(jump.family), ["-w", "-I", jump.parent, "1", ...jump.rule.split(" ").slice(2)]);
    }
  }

  // Removes a namespace's network (unless in use) and then its rules; rules of a network that reappeared meanwhile are put back.
  async #remove(names: EgressNames, namespace: string): Promise<void> {
    try {
      await this.#docker.getNetwork(names.network).remove();
    } catch (error) {
      // 403/409: containers still use it (another replica's); its rules stay.
      if (statusOf(error) !== 404) {
        if (statusOf(error) === 403 || statusOf(error) === 409) return;
        throw dockerFailure(error, `remove network ${names.network}`);
      }
    }
    const plan = egressRules(names, { allow: [], resolvers: [], refused: [] });
    const tables = await this.#tables().catch(() => undefined);
    if (tables) {
      for (const jump of plan.jumps) {
        const parent = (jump.family === 4 ? tables.v4 : tables.v6).get(jump.parent) ?? [];
        for (let i = parent.filter((line) => line === jump.rule).length; i > 0; i--) await runCommand(this.#binary(jump.family), ["-w", "-D", jump.parent, ...jump.rule.split(" ").slice(2)]);
      }
      for (const [family, chains] of [[4, plan.v4], [6, plan.v6]] as const) {
        for (const chain of chains.keys()) {
          if (!(family === 4 ? tables.v4 : tables.v6).has(chain)) continue;
          await runCommand(this.#binary(family), ["-w", "-F", chain]);
          await runCommand(this.#binary(family), ["-w", "-X", chain]);
        }
      }
    }
    // Its service created it again meanwhile: rules go back at once, the strictest ones for another namespace (its own check widens them).
    if (!(await this.#inspect(names.network))) return;
    if (namespace === this.#options.namespace) await this.#ensure();
    else await this.#install(egressRules(names, { allow: [], resolvers: [], refused: refusedNetworks(hostNetworks()) }), await this.#tables());
  }

  // Why the firewall cannot be managed here, if it cannot.
  async #firewallProblem(): Promise<string | undefined> {
    return this.#tables().then(() => undefined, (error: unknown) => (error as Error).message);
  }

  #binary(family: 4 | 6): string {
    return family === 4 ? this.#commands.iptables : this.#commands.ip6tables;
  }

  // Both families' filter tables, one save each; Docker's chain must be there.
  async #tables(): Promise<FilterTables> {
    const read = async (family: 4 | 6) => {
      const file = `${this.#binary(family)}-save`;
      const result = await runCommand(file, ["-t", "filter"]);
      if (result.code !== 0) throw new Error(`\`${file} -t filter\` failed (${firstLine(result.stderr)})`);
      return parseSave(result.stdout);
    };
    const tables = { v4: await read(4), v6: await read(6) };
    if (!tables.v4.has("DOCKER-USER")) throw new Error("chain DOCKER-USER does not exist: dockerd does not manage iptables, or uses the other iptables variant");
    return tables;
  }

  async #run(file: string, args: readonly string[], input?: string): Promise<void> {
    const result = await runCommand(file, args, input);
    if (result.code !== 0) throw new Error(`\`${file} ${args.join(" ")}\` failed (${firstLine(result.stderr)})`);
  }
}

function firstLine(text: string): string {
  return text.split("\n").find((line) => line.trim() && !line.startsWith("#"))?.trim() ?? "no output";
}

function unavailable(reason: string, cause?: unknown): TackError {
  if (cause instanceof TackError) return cause;
  return new TackError(
    "sandbox.egress_unavailable",
    `networked sandboxes (mode danger-full-access) are refused: their egress guard cannot be put in place (${reason}); ` +
      `run the sandbox service as root on the Docker host with iptables and ip6tables (the variant dockerd uses), or use a mode without network`,
    { cause },
  );
}
