// Networked sandboxes (danger-full-access) and their egress guard, under runc and gVisor.
//
// Safety: no test packet may reach the real wire, even with a broken guard. Every refused
// destination tested here (10.0.0.1, 169.254.169.254, 192.168.77.1, 100.64.0.1) and the
// allow-listed one (10.0.0.2) is an address of a "victim" network namespace this file creates,
// and only traffic coming in on the sandboxes' bridge is routed there (a policy-routing rule on
// that bridge), so the host's own traffic is untouched. The victim records every IPv4 packet it
// receives, which is how a refusal is shown to have sent nothing. The host's own addresses are
// tested with listeners of this process. Everything is removed afterwards, even on failure.
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { createServer, type AddressInfo, type Server } from "node:net";
import { networkInterfaces, tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { compileOperatorConfig } from "@tack/config";
import { waitFor } from "@tack/testkit";
import {
  canonicalCidr,
  cidrContains,
  Egress,
  egressNames,
  egressRules,
  hostNetworks,
  jumpPlaced,
  networkRuntime,
  parseNameservers,
  parseSave,
  REFUSED_IPV4,
  refusedNetworks,
  ruleDrift,
} from "../src/backends/docker-egress.js";
import { docker, Harness, rejection, uniqueNamespace } from "./helpers.js";

const run = promisify(execFile);
const sh = async (command: string, args: string[]) => (await run(command, args)).stdout;

// The victim's addresses: refused ones of each kind, and one the operator allows.
const REFUSED = { private: "10.0.0.1", metadata: "169.254.169.254", lan: "192.168.77.1", cgnat: "100.64.0.1" } as const;
const ALLOWED = "10.0.0.2";
const VICTIM_ADDRESSES = [...Object.values(REFUSED), ALLOWED];
const VICTIM_PORT = 47_123;

const operatorConfig = (allowCidrs: string[]) =>
  compileOperatorConfig(
    {
      tenants: { acme: { workspace_roots: ["/tmp"], max_sandbox_mode: "danger-full-access" } },
      workspaces: { dir: "/tmp/tack-test-managed-workspaces" },
      sandbox: { egress: { allow_cidrs: allowCidrs } },
    },
    { stateDir: join(tmpdir(), "tack-egress-test-state"), baseDir: tmpdir(), source: undefined },
  );

// Connects to each host on `port` (TCP, reading a line) and sends it a datagram; prints {host: outcome} as JSON.
const PROBE = `
import json, socket, sys
port, out = int(sys.argv[1]), {}
for host in sys.argv[2:]:
    try:
        with socket.create_connection((host, port), timeout=3) as s:
            s.settimeout(3)
            out[host] = "connected " + s.recv(100).decode().strip()
    except OSError as e:
        # A timeout (the kernel rate-limits the ICMP answers of a REJECT rule) has no strerror: its text is "timed out".
        out[host] = "refused " + (e.strerror or str(e) or type(e).__name__)
    try:
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"probe", (host, port))
    except OSError:
        pass
print(json.dumps(out))
`;

// The victim: a TCP and a UDP listener on every address, and a packet recorder on its interface.
const VICTIM = `
import json, socket, sys, threading
port, log_path, iface = int(sys.argv[1]), sys.argv[2], sys.argv[3]
lock = threading.Lock()
log = open(log_path, "a", buffering=1)
def note(kind, **fields):
    with lock:
        log.write(json.dumps(dict(kind=kind, **fields)) + "\\n")
tcp = socket.socket()
tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
tcp.bind(("0.0.0.0", port))
tcp.listen(16)
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.bind(("0.0.0.0", port))
sniffer = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
sniffer.bind((iface, 0))
def serve_tcp():
    while True:
        conn, peer = tcp.accept()
        local = conn.getsockname()[0]
        note("accept", dst=local, src=peer[0])
        try:
            conn.sendall(("victim " + local + "\\n").encode())
        finally:
            conn.close()
def serve_udp():
    while True:
        _, peer = udp.recvfrom(2048)
        note("datagram", src=peer[0])
def record():
    while True:
        frame = sniffer.recv(65535)
        if len(frame) >= 34:
            note("packet", src=socket.inet_ntoa(frame[26:30]), dst=socket.inet_ntoa(frame[30:34]), proto=frame[23])
for target in (serve_tcp, serve_udp, record):
    threading.Thread(target=target, daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
`;

interface VictimRecord {
  kind: "accept" | "datagram" | "packet";
  src: string;
  dst?: string;
}

/** The victim network namespace: routes for the test destinations from the sandboxes' bridge only, and its recorder. */
class Victim {
  readonly id = randomBytes(3).toString("hex");
  readonly netns = `tack-victim-${this.id}`;
  readonly hostSide = `tkvh${this.id}`;
  readonly victimSide = `tkvv${this.id}`;
  // A /30 inside 198.18.0.0/15 (benchmarking, already refused), so the host's new address changes no rule.
  readonly link = { host: `198.19.${parseInt(this.id.slice(0, 2), 16)}.1`, victim: `198.19.${parseInt(this.id.slice(0, 2), 16)}.2` };
  readonly table = String(20_000 + parseInt(this.id, 16) % 10_000);
  readonly rulePreference = this.table;
  readonly #undo: Array<() => Promise<unknown>> = [];
  #process: ChildProcess | undefined;
  #dir = "";

  /** Refuses to run where a victim address is in use on this host, or has a route of its own. */
  static async assertAddressesUnused(): Promise<void> {
    const local = Object.values(networkInterfaces()).flat().map((entry) => entry?.address);
    for (const address of VICTIM_ADDRESSES) {
      expect(local, `${address} is an address of this host: pick another victim address`).not.toContain(address);
      expect((await sh("ip", ["-4", "route", "show", "table", "all", "exact", `${address}/32`])).trim(), `${address} is routed on this host`).toBe("");
    }
  }

  async setUp(bridge: string): Promise<void> {
    this.#dir = await mkdtemp(join(tmpdir(), "tack-victim-"));
    this.#undo.push(() => rm(this.#dir, { recursive: true, force: true }));
    await sh("ip", ["netns", "add", this.netns]);
    this.#undo.push(() => sh("ip", ["netns", "del", this.netns]));
    await sh("ip", ["link", "add", this.hostSide, "type", "veth", "peer", "name", this.victimSide]);
    this.#undo.push(() => sh("ip", ["link", "del", this.hostSide]));
    await sh("ip", ["link", "set", this.victimSide, "netns", this.netns]);
    await sh("ip", ["addr", "add", `${this.link.host}/30`, "dev", this.hostSide]);
    await sh("ip", ["link", "set", this.hostSide, "up"]);
    const inVictim = (...args: string[]) => sh("ip", ["netns", "exec", this.netns, ...args]);
    await inVictim("ip", "link", "set", "lo", "up");
    await inVictim("ip", "addr", "add", `${this.link.victim}/30`, "dev", this.victimSide);
    for (const address of VICTIM_ADDRESSES) await inVictim("ip", "addr", "add", `${address}/32`, "dev", this.victimSide);
    await inVictim("ip", "link", "set", this.victimSide, "up");
    await inVictim("ip", "route", "add", "default", "via", this.link.host);
    // On the host: the test destinations lead to the victim, for traffic that comes in on the sandboxes' bridge only.
    for (const address of VICTIM_ADDRESSES) await sh("ip", ["route", "add", `${address}/32`, "via", this.link.victim, "dev", this.hostSide, "table", this.table]);
    this.#undo.push(() => sh("ip", ["route", "flush", "table", this.table]));
    await sh("ip", ["rule", "add", "iif", bridge, "lookup", this.table, "pref", this.rulePreference]);
    this.#undo.push(() => sh("ip", ["rule", "del", "pref", this.rulePreference]));
    // Replies come back on the veth: their reverse path is the same table, whatever rp_filter says.
    await sh("ip", ["rule", "add", "iif", this.hostSide, "lookup", this.table, "pref", String(Number(this.rulePreference) + 1)]);
    this.#undo.push(() => sh("ip", ["rule", "del", "pref", String(Number(this.rulePreference) + 1)]));

    await writeFile(join(this.#dir, "victim.py"), VICTIM);
    const child = spawn("ip", ["netns", "exec", this.netns, "/usr/bin/python3", join(this.#dir, "victim.py"), String(VICTIM_PORT), this.logPath, this.victimSide], { stdio: ["pipe", "pipe", "pipe"] });
    this.#process = child;
    this.#undo.push(async () => {
      child.stdin?.end();
      child.kill("SIGKILL");
    });
    await new Promise<void>((resolve, reject) => {
      let stderr = "";
      child.stderr?.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
      child.stdout?.on("data", (chunk: Buffer) => chunk.toString().includes("ready") && resolve());
      child.once("exit", (code) => reject(new Error(`the victim listener exited (${code}): ${stderr}`)));
    });
  }

  get logPath(): string {
    return join(this.#dir, "victim.log");
  }

  async records(): Promise<VictimRecord[]> {
    const text = await readFile(this.logPath, "utf8").catch(() => "");
    return text.trim().split("\n").filter(Boolean).map((line) => JSON.parse(line) as VictimRecord);
  }

  /** Everything that reached the victim for `address`: connections, datagrams, any IPv4 packet. */
  async sawFor(address: string): Promise<VictimRecord[]> {
    return (await this.records()).filter((record) => record.dst === address);
  }

  async tearDown(): Promise<void> {
    const errors: unknown[] = [];
    for (const undo of this.#undo.splice(0).reverse()) await undo().catch((error: unknown) => errors.push(error));
    if (this.#process && this.#process.exitCode === null) this.#process.kill("SIGKILL");
    if (errors.length > 0) throw new AggregateError(errors, "victim teardown");
  }
}

/** A TCP listener of this process on one of the host's addresses, recording who connects. */
async function hostListener(address: string): Promise<{ server: Server; port: number; connections: string[] }> {
  const connections: string[] = [];
  const server = createServer((socket) => {
    connections.push(socket.remoteAddress ?? "?");
    socket.end("host\n");
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, address, resolve);
  });
  return { server, port: (server.address() as AddressInfo).port, connections };
}

// The host's address on the interface of its default route (eth0 here).
async function defaultRouteAddress(): Promise<string> {
  const routes = JSON.parse(await sh("ip", ["-j", "-4", "route", "show", "default"])) as Array<{ dev: string }>;
  const dev = routes[0]?.dev;
  const address = dev ? networkInterfaces()[dev]?.find((entry) => entry.family === "IPv4")?.address : undefined;
  if (!address) throw new Error("this host has no IPv4 default route to take its address from");
  return address;
}

describe("egress policy, without Docker", () => {
  it("egress - names fit the kernel's limits (15-character interfaces, 28-character chains)", () => {
    const names = egressNames("t".repeat(64));
    expect(names.bridge.length).toBeLessThanOrEqual(15);
    for (const chain of [names.forward, names.input, names.v6]) expect(chain.length).toBeLessThanOrEqual(28);
    expect(egressNames("a").bridge).not.toBe(egressNames("b").bridge);
  });

  it("egress - the refused ranges cover loopback, private, link-local and metadata, CGNAT, multicast and reserved", () => {
    for (const address of ["127.0.0.1", "10.1.2.3", "172.17.0.1", "172.31.255.254", "192.168.1.1", "169.254.169.254", "100.64.0.1", "100.100.100.200", "224.0.0.251", "239.255.255.250", "255.255.255.255", "240.0.0.1", "0.0.0.0", "192.0.2.5", "198.18.0.1", "168.63.129.16"]) {
      expect(REFUSED_IPV4.some((cidr) => cidrContains(cidr, `${address}/32`)), address).toBe(true);
    }
    for (const address of ["1.1.1.1", "8.8.8.8", "151.101.1.1", "172.32.0.1", "100.128.0.1", "192.169.0.1"]) {
      expect(REFUSED_IPV4.some((cidr) => cidrContains(cidr, `${address}/32`)), address).toBe(false);
    }
  });

  it("egress - the host's own addresses and networks are refused too, wherever they are", () => {
    const host = hostNetworks({
      eth0: [{ address: "203.0.114.9", netmask: "255.255.255.0", family: "IPv4", mac: "00:00:00:00:00:00", internal: false, cidr: "203.0.114.9/24" }],
      lo: [{ address: "127.0.0.1", netmask: "255.0.0.0", family: "IPv4", mac: "00:00:00:00:00:00", internal: true, cidr: "127.0.0.1/8" }],
      eth1: [{ address: "fd00::2", netmask: "ffff:ffff:ffff:ffff::", family: "IPv6", mac: "00:00:00:00:00:00", internal: false, cidr: "fd00::2/64", scopeid: 0 }],
    });
    expect(host).toEqual(["203.0.114.9/32", "203.0.114.0/24", "127.0.0.1/32", "127.0.0.0/8"]);
    const refused = refusedNetworks(host);
    // A public LAN and the host's public address are added; what a fixed range already covers is not repeated.
    expect(refused).toContain("203.0.114.0/24");
    expect(refused).not.toContain("127.0.0.1/32");
    expect(refused.filter((cidr) => cidr === "127.0.0.0/8")).toHaveLength(1);
    expect(canonicalCidr("10.9.8.7/8")).toBe("10.0.0.0/8");
    expect(canonicalCidr("10.9.8.7")).toBe("10.9.8.7/32");
    expect(() => canonicalCidr("fc00::/7")).toThrow(/IPv4 CIDR/);
  });

  it("egress - rules: allowances first, then refusals; the host itself refused but for allowances; IPv6 refused whole", () => {
    const names = egressNames("unit");
    const rules = egressRules(names, { allow: ["10.0.0.2/32"], resolvers: ["10.255.255.53/32"], refused: ["10.0.0.0/8"] });
    expect(rules.v4.get(names.forward)).toEqual([
      `-A ${names.forward} -d 10.0.0.2/32 -j RETURN`,
      `-A ${names.forward} -d 10.255.255.53/32 -p udp -m udp --dport 53 -j RETURN`,
      `-A ${names.forward} -d 10.255.255.53/32 -p tcp -m tcp --dport 53 -j RETURN`,
      `-A ${names.forward} -d 10.0.0.0/8 -j REJECT --reject-with icmp-admin-prohibited`,
    ]);
    expect(rules.v4.get(names.input)?.at(-1)).toBe(`-A ${names.input} -j REJECT --reject-with icmp-admin-prohibited`);
    expect(rules.v6.get(names.v6)).toEqual([`-A ${names.v6} -j REJECT --reject-with icmp6-adm-prohibited`]);
    expect(rules.jumps.map((jump) => `${jump.family} ${jump.parent}`)).toEqual(["4 DOCKER-USER", "4 INPUT", "6 FORWARD", "6 INPUT"]);
  });

  it("egress - a jump counts only when nothing before it can decide the bridge's traffic", () => {
    const jump = "-A INPUT -i tkeg-1 -j X";
    expect(jumpPlaced(["-P INPUT ACCEPT", jump], jump, "tkeg-1")).toBe(true);
    expect(jumpPlaced(["-A INPUT -i tkeg-2 -j Y", jump], jump, "tkeg-1")).toBe(true);
    expect(jumpPlaced(["-A INPUT -j ACCEPT", jump], jump, "tkeg-1")).toBe(false);
    expect(jumpPlaced(["-A INPUT ! -i lo -j ACCEPT", jump], jump, "tkeg-1")).toBe(false);
    expect(jumpPlaced(["-A INPUT -i tkeg+ -j ACCEPT", jump], jump, "tkeg-1")).toBe(false);
    expect(jumpPlaced(["-A INPUT -i tkeg-1 -j ACCEPT", jump], jump, "tkeg-1")).toBe(false);
    expect(jumpPlaced(["-A INPUT -j ACCEPT"], jump, "tkeg-1")).toBe(false);
  });

  it("egress - the kernel's tables are read from iptables-save and compared rule by rule", () => {
    const names = egressNames("unit");
    const plan = egressRules(names, { allow: [], resolvers: [], refused: ["10.0.0.0/8"] });
    const save4 = (forwardRules: readonly string[]) => ["# Generated by iptables-save", "*filter", ":INPUT ACCEPT [0:0]", ":DOCKER-USER - [0:0]", `:${names.forward} - [0:0]`, `:${names.input} - [0:0]`,
      `-A INPUT -i ${names.bridge} -j ${names.input}`, `-A DOCKER-USER -i ${names.bridge} -j ${names.forward}`, "-A DOCKER-USER -j RETURN", ...forwardRules, ...(plan.v4.get(names.input) ?? []), "COMMIT"].join("\n");
    const save6 = ["*filter", ":INPUT ACCEPT [0:0]", ":FORWARD ACCEPT [0:0]", `:${names.v6} - [0:0]`, `-A INPUT -i ${names.bridge} -j ${names.v6}`, `-A FORWARD -i ${names.bridge} -j ${names.v6}`, ...(plan.v6.get(names.v6) ?? []), "COMMIT"].join("\n");
    const forward = plan.v4.get(names.forward) ?? [];
    expect(parseSave(save4(forward)).get("DOCKER-USER")).toEqual([`-A DOCKER-USER -i ${names.bridge} -j ${names.forward}`, "-A DOCKER-USER -j RETURN"]);
    expect(ruleDrift(plan, { v4: parseSave(save4(forward)), v6: parseSave(save6) })).toEqual([]);
    expect(ruleDrift(plan, { v4: parseSave(save4([])), v6: parseSave(save6) })).toEqual([`chain ${names.forward} (IPv4) has other rules`]);
    expect(ruleDrift(plan, { v4: parseSave(save4(forward)), v6: parseSave("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\nCOMMIT") })).toEqual([
      `chain ${names.v6} (IPv6) is missing`,
      `FORWARD (IPv6) does not send the bridge's traffic to ${names.v6} first`,
      `INPUT (IPv6) does not send the bridge's traffic to ${names.v6} first`,
    ]);
  });

  it("egress - the resolvers Docker forwards DNS to are read from resolv.conf, loopback stubs left out", () => {
    expect(parseNameservers("# x\nnameserver 10.255.255.53\nnameserver 127.0.0.53\nnameserver fd00::1\nsearch lan\n")).toEqual(["10.255.255.53/32"]);
  });

  it("egress - the networked runtime is the same binary with a network, never another runtime", () => {
    const runsc = { path: "/usr/bin/runsc", runtimeArgs: ["--network=none"] };
    expect(networkRuntime({ runc: { path: "runc" } }, "runc")).toEqual({ name: "runc", info: { path: "runc" } });
    expect(networkRuntime({ runsc, "runsc-net": { path: "/usr/bin/runsc", runtimeArgs: ["--network=host"] } }, "runsc").name).toBe("runsc-net");
    const missing = (() => {
      try {
        networkRuntime({ runc: { path: "runc" }, runsc }, "runsc");
      } catch (error) {
        return error as { code: string; message: string };
      }
      return undefined;
    })();
    expect(missing?.code).toBe("sandbox.runtime_without_network");
    expect(missing?.message).toMatch(/no runsc-net runtime.*scripts\/ensure-docker\.sh/);
    expect(() => networkRuntime({ runsc, "runsc-net": { path: "runc" } }, "runsc")).toThrow(/runs runc, not \/usr\/bin\/runsc/);
    expect(() => networkRuntime({ runsc, "runsc-net": { path: "/usr/bin/runsc", runtimeArgs: ["--network", "none"] } }, "runsc")).toThrow(/declared with --network=none/);
  });

  it("egress - the operator's allowances are IPv4 CIDRs, checked when the configuration is read", () => {
    expect(operatorConfig(["10.0.0.2/32"]).sandbox.egress).toEqual({ allowCidrs: ["10.0.0.2/32"], allowDns: true });
    expect(operatorConfig([]).sandbox.egress.allowCidrs).toEqual([]);
    expect(() => operatorConfig(["fc00::/7"])).toThrow(/sandbox\.egress\.allow_cidrs\.0: must be an IPv4 CIDR/);
    expect(() => operatorConfig(["10.0.0.2"])).toThrow(/must be an IPv4 CIDR/);
  });
});

describe("egress guard fails closed", () => {
  let fakeBin: string;
  const realPath = process.env.PATH;
  beforeAll(async () => {
    // iptables and ip6tables that fail as they do for a user who may not manage the firewall.
    fakeBin = await mkdtemp(join(tmpdir(), "tack-fake-iptables-"));
    for (const name of ["iptables", "ip6tables", "iptables-save", "ip6tables-save", "iptables-restore", "ip6tables-restore"]) {
      await writeFile(join(fakeBin, name), "#!/bin/sh\necho \"iptables v1.8.9 (nf_tables): Could not fetch rule set generation id: Permission denied (you must be root)\" >&2\nexit 4\n", { mode: 0o755 });
    }
  });
  afterAll(async () => {
    process.env.PATH = realPath;
    await rm(fakeBin, { recursive: true, force: true });
  });

  it("egress - where the firewall cannot be managed, danger-full-access is refused, saying why, and nothing starts", async () => {
    process.env.PATH = `${fakeBin}:${realPath}`;
    let h: Harness | undefined;
    try {
      h = await Harness.start({ operator: operatorConfig([]) });
      const error = await rejection(h.ensure({ sessionId: "closed", workspace: await h.workspace(), mode: "danger-full-access" }));
      expect(error.code).toBe("sandbox.egress_unavailable");
      expect(error.message).toMatch(/networked sandboxes \(mode danger-full-access\) are refused: .*iptables-save -t filter.*Permission denied.*run the sandbox service as root/);
      expect(await h.containerIds("closed")).toEqual([]);
      // No network was made for it either.
      expect(await docker.getNetwork(egressNames(h.namespace).network).inspect().catch(() => undefined)).toBeUndefined();
      // The modes without network are unaffected.
      await h.ensure({ sessionId: "offline", workspace: await h.workspace() });
      expect((await h.exec("offline", ["echo", "ok"])).stdout).toBe("ok\n");
    } finally {
      process.env.PATH = realPath;
      await h?.cleanup();
    }
  });

  it("egress - a networked sandbox made before the guard (on the default bridge) is removed when the service starts", async () => {
    const namespace = uniqueNamespace();
    const labels = { "tack.namespace": namespace, "tack.mode": "danger-full-access" };
    const old = await docker.createContainer({ Image: "tack-sandbox:bookworm", Cmd: ["sleep", "120"], User: "1000:1000", Labels: labels, HostConfig: { NetworkMode: "bridge", CapDrop: ["ALL"] } });
    const offline = await docker.createContainer({ Image: "tack-sandbox:bookworm", Cmd: ["sleep", "120"], User: "1000:1000", Labels: { ...labels, "tack.mode": "workspace-write" }, HostConfig: { NetworkMode: "none", CapDrop: ["ALL"] } });
    const guard = new Egress(docker, { namespace, runtime: "runc", policy: { allowCidrs: [], allowDns: false }, warn: () => undefined });
    try {
      await guard.start();
      expect(await old.inspect().catch(() => undefined)).toBeUndefined();
      expect((await offline.inspect()).Id).toBe(offline.id);
    } finally {
      await guard.stop(true);
      await Promise.all([old, offline].map((container) => container.remove({ force: true }).catch(() => undefined)));
    }
  });

  it("egress - rules that can no longer be enforced get the network's containers killed", async () => {
    const namespace = uniqueNamespace();
    const warnings: string[] = [];
    const options = { namespace, runtime: "runc", policy: { allowCidrs: [], allowDns: false }, warn: (message: string) => warnings.push(message) };
    const guard = new Egress(docker, options);
    let containerId: string | undefined;
    try {
      const grant = await guard.grant();
      const container = await docker.createContainer({ Image: "tack-sandbox:bookworm", Cmd: ["sleep", "120"], User: "1000:1000", HostConfig: { NetworkMode: grant.network, Runtime: "runc", CapDrop: ["ALL"] }, Labels: { "tack.namespace": namespace } });
      containerId = container.id;
      await container.start();
      expect((await container.inspect()).State.Running).toBe(true);
      // The same guard on a host where the firewall cannot be read any more.
      const broken = new Egress(docker, { ...options, commands: { iptables: join(fakeBin, "iptables"), ip6tables: join(fakeBin, "ip6tables") } });
      await broken.check();
      await broken.stop(false);
      expect((await container.inspect()).State.Running).toBe(false);
      expect(warnings.join("\n")).toMatch(/cannot be enforced .*killing its 1 container/);
    } finally {
      if (containerId) await docker.getContainer(containerId).remove({ force: true }).catch(() => undefined);
      await guard.stop(true);
    }
    expect(await docker.getNetwork(egressNames(namespace).network).inspect().catch(() => undefined)).toBeUndefined();
    expect((await run("iptables", ["-S"])).stdout).not.toContain(egressNames(namespace).forward);
  });
});

describe.each(["runc", "runsc"] as const)("networked sandboxes under %s", (runtime) => {
  let h: Harness;
  const victim = new Victim();
  let bridge: string;
  let gateway: string;
  let hostAddress: string;
  const listeners: Array<{ server: Server }> = [];
  const probe = async (session: string, hosts: string[], port = VICTIM_PORT): Promise<Record<string, string>> => {
    const result = await h.exec(session, ["python3", "-c", PROBE, String(port), ...hosts], { timeoutMs: 30_000 });
    expect(result.exitCode, result.stderr).toBe(0);
    return JSON.parse(result.stdout) as Record<string, string>;
  };

  beforeAll(async () => {
    await Victim.assertAddressesUnused();
    h = await Harness.start({ runtime, operator: operatorConfig([`${ALLOWED}/32`]) });
    try {
      // The first networked sandbox makes the namespace's network and rules.
      await h.ensure({ sessionId: "n1", workspace: await h.workspace(), mode: "danger-full-access" });
      const names = egressNames(h.namespace);
      bridge = names.bridge;
      const network = await docker.getNetwork(names.network).inspect();
      gateway = network.IPAM?.Config?.[0]?.Gateway ?? "";
      expect(gateway).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
      hostAddress = await defaultRouteAddress();
      await victim.setUp(bridge);
    } catch (error) {
      await victim.tearDown().catch(() => undefined);
      await h.cleanup();
      throw error;
    }
  });
  afterAll(async () => {
    for (const { server } of listeners) server.close();
    try {
      await victim.tearDown();
    } finally {
      await h.cleanup();
    }
    // The namespace's network and rules went with the service.
    expect(await docker.getNetwork(egressNames(h.namespace).network).inspect().catch(() => undefined)).toBeUndefined();
    expect((await run("iptables", ["-S"])).stdout).not.toContain(egressNames(h.namespace).forward);
  });

  it(`${runtime} - a networked sandbox runs under ${runtime === "runsc" ? "gVisor (runsc-net)" : "runc"} on its namespace's own bridge, never the default one`, async () => {
    const [id] = await h.containerIds("n1");
    const info = await docker.getContainer(id ?? "").inspect();
    expect(info.HostConfig.Runtime).toBe(runtime === "runsc" ? "runsc-net" : "runc");
    expect(info.HostConfig.NetworkMode).toBe(egressNames(h.namespace).network);
    expect(Object.keys(info.NetworkSettings.Networks)).toEqual([egressNames(h.namespace).network]);
    expect((await h.exec("n1", ["python3", "-c", "import socket; print(sorted(name for _, name in socket.if_nameindex()))"])).stdout).toBe("['eth0', 'lo']\n");
    if (runtime === "runsc") expect((await h.exec("n1", ["uname", "-r"])).stdout.trim()).not.toBe((await sh("uname", ["-r"])).trim());
  });

  it(`${runtime} - an allow-listed destination is reached (the victim answers), so the network itself works`, async () => {
    expect((await probe("n1", [ALLOWED]))[ALLOWED]).toBe(`connected victim ${ALLOWED}`);
    const seen = await victim.sawFor(ALLOWED);
    expect(seen.some((record) => record.kind === "accept")).toBe(true);
    // The recorder sees what reaches the victim: its silence below means something.
    expect(seen.some((record) => record.kind === "packet")).toBe(true);
  });

  it(`${runtime} - private, metadata, LAN and CGNAT destinations are refused and not a packet reaches them`, async () => {
    const outcome = await probe("n1", Object.values(REFUSED));
    for (const [kind, address] of Object.entries(REFUSED)) {
      expect(outcome[address], `${kind} ${address}`).toMatch(/^refused /);
      expect(outcome[address], `${kind} ${address}`).toMatch(/No route to host|Connection refused|timed out|Network is unreachable|Permission denied/);
    }
    // Watch for stray packets for a moment: waiting for one at any refused address must time out (TCP, UDP, anything IPv4).
    const stray = async () => {
      for (const address of Object.values(REFUSED)) {
        const seen = await victim.sawFor(address);
        if (seen.length > 0) return { address, seen };
      }
      return undefined;
    };
    await expect(waitFor("a packet to reach a refused address", stray, { timeoutMs: 500, intervalMs: 50 })).rejects.toMatchObject({ code: "testkit.timeout" });
    for (const address of Object.values(REFUSED)) expect(await victim.sawFor(address), address).toEqual([]);
    // The same through HTTP, the way metadata is usually asked for.
    const http = await h.exec("n1", ["python3", "-c", `import urllib.request; urllib.request.urlopen('http://${REFUSED.metadata}:${VICTIM_PORT}/latest/meta-data/', timeout=3)`]);
    expect(http.exitCode).not.toBe(0);
    expect(await victim.sawFor(REFUSED.metadata)).toEqual([]);
  });

  it(`${runtime} - the host's own addresses are refused: the bridge gateway and the host's default-route address`, async () => {
    for (const address of [gateway, hostAddress]) {
      const listener = await hostListener(address);
      listeners.push(listener);
      const outcome = await probe("n1", [address], listener.port);
      expect(outcome[address], address).toMatch(/^refused /);
      expect(listener.connections, address).toEqual([]);
    }
    // The host's NATS on its loopback is not in the sandbox's reach either (its own loopback answers).
    expect((await probe("n1", ["127.0.0.1"], 4222))["127.0.0.1"]).toMatch(/^refused /);
  });

  it(`${runtime} - two networked sandboxes cannot reach each other`, async () => {
    await h.ensure({ sessionId: "n2", workspace: await h.workspace(), mode: "danger-full-access" });
    const [id] = await h.containerIds("n2");
    const address = (await docker.getContainer(id ?? "").inspect()).NetworkSettings.Networks[egressNames(h.namespace).network]?.IPAddress ?? "";
    expect(address).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
    const serve = "import socket; s = socket.socket(); s.bind(('0.0.0.0', 47124)); s.listen(); c, _ = s.accept(); open('/tmp/reached', 'w').write('x')";
    await h.exec("n2", ["bash", "-c", `nohup python3 -c "${serve}" >/dev/null 2>&1 & sleep 0.5`]);
    expect((await probe("n1", [address], 47124))[address]).toMatch(/^refused /);
    expect((await h.exec("n2", ["cat", "/tmp/reached"])).exitCode).not.toBe(0);
  });

  it(`${runtime} - IPv6 is refused whole, and the rules read back as installed`, async () => {
    const names = egressNames(h.namespace);
    const v6 = (await run("ip6tables", ["-w", "-S", names.v6])).stdout;
    expect(v6).toContain(`-A ${names.v6} -j REJECT --reject-with icmp6-adm-prohibited`);
    expect((await run("ip6tables", ["-w", "-S", "FORWARD"])).stdout).toContain(`-A FORWARD -i ${bridge} -j ${names.v6}`);
    expect((await run("ip6tables", ["-w", "-S", "INPUT"])).stdout).toContain(`-A INPUT -i ${bridge} -j ${names.v6}`);
    const forward = (await run("iptables", ["-w", "-S", names.forward])).stdout;
    expect(forward).toContain(`-A ${names.forward} -d ${ALLOWED}/32 -j RETURN`);
    expect(forward).toContain(`-A ${names.forward} -d 169.254.0.0/16 -j REJECT --reject-with icmp-admin-prohibited`);
    // DNS goes to the host's resolvers only, on port 53.
    for (const server of parseNameservers(await readFile("/etc/resolv.conf", "utf8"))) expect(forward).toContain(`-A ${names.forward} -d ${server} -p udp -m udp --dport 53 -j RETURN`);
    // No global IPv6 address inside the sandbox.
    expect((await h.exec("n1", ["cat", "/proc/net/if_inet6"])).stdout).not.toMatch(/^(?!fe80)[0-9a-f]{4}/m);
  });

  it(`${runtime} - rules removed behind the service's back are put back before the next networked sandbox starts`, async () => {
    const names = egressNames(h.namespace);
    await run("iptables", ["-w", "-D", "DOCKER-USER", "-i", bridge, "-j", names.forward]);
    await run("iptables", ["-w", "-F", names.input]);
    await h.ensure({ sessionId: "n3", workspace: await h.workspace(), mode: "danger-full-access" });
    expect((await run("iptables", ["-w", "-S", "DOCKER-USER"])).stdout).toContain(`-A DOCKER-USER -i ${bridge} -j ${names.forward}`);
    expect((await run("iptables", ["-w", "-S", names.input])).stdout).toContain(`-A ${names.input} -j REJECT`);
    const outcome = await probe("n3", [REFUSED.private, ALLOWED]);
    expect(outcome[REFUSED.private]).toMatch(/^refused /);
    expect(outcome[ALLOWED]).toBe(`connected victim ${ALLOWED}`);
    expect(await victim.sawFor(REFUSED.private)).toEqual([]);
  });
});
