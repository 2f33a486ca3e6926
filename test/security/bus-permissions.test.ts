// The bus permission table and the credentials settings, without a server: who may publish
// what (with NATS wildcard matching), and how the environment is read and refused.
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { LlmRpc, LoopRpc, McpRpc, microSubjects, names, rpcSubject, SandboxRpc, ToolsRpc, WorkspacesRpc } from "@tack/bus";
import { BUS_USERS, busAuthFromEnv, busPermissions, commonConfig, natsServerAuthorization, readBusCredentials, type BusUser } from "@tack/config";
import { placementBucket, replicaSubject } from "@tack/sandbox-service";

const ns = "acme";
const n = names(ns);
const table = busPermissions(ns);
const scratch = mkdtempSync(join(tmpdir(), "tack-bus-permissions-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** NATS subject matching: `*` is one token, `>` one or more trailing tokens. */
function matches(pattern: string, subject: string): boolean {
  const p = pattern.split(" ")[0]!.split(".");
  const s = subject.split(".");
  for (let i = 0; i < p.length; i++) {
    if (p[i] === ">") return s.length > i;
    if (i >= s.length || (p[i] !== "*" && p[i] !== s[i])) return false;
  }
  return p.length === s.length;
}

/** The users (admin aside) whose permissions let them publish to `subject`. */
const publishers = (subject: string) => BUS_USERS.filter((u) => u !== "admin" && table[u].publish.some((p) => matches(p, subject)));
/** The users (admin aside) who may subscribe to `subject`. */
const subscribers = (subject: string) => BUS_USERS.filter((u) => u !== "admin" && table[u].subscribe.some((p) => matches(p, subject)));

const minutes = (duration: string) => {
  const m = /^(\d+)(m|h)$/.exec(duration);
  if (!m) throw new Error(`unexpected duration ${duration}`);
  return Number(m[1]) * (m[2] === "h" ? 60 : 1);
};

describe("bus permission table", () => {
  it("bus-permissions - each command subject has exactly the callers and the server its code needs", () => {
    expect(publishers(n.logSubject("t1", "s1"))).toEqual(["loop"]);
    expect(publishers(rpcSubject(ns, SandboxRpc.Exec))).toEqual(["tools"]);
    // The loop pre-warms a new session's sandbox; the tools ensure it before each call.
    expect(publishers(rpcSubject(ns, SandboxRpc.EnsureSandbox))).toEqual(["loop", "tools", "mcp"]);
    expect(publishers(rpcSubject(ns, SandboxRpc.ListProcesses))).toEqual(["loop"]);
    expect(publishers(rpcSubject(ns, SandboxRpc.ReleaseSandbox))).toEqual(["loop"]);
    expect(publishers(rpcSubject(ns, WorkspacesRpc.CreateWorkspace))).toEqual(["gateway"]);
    expect(publishers(rpcSubject(ns, ToolsRpc.CallTool))).toEqual(["loop"]);
    expect(publishers(rpcSubject(ns, ToolsRpc.ListTools))).toEqual(["loop"]);
    expect(publishers(rpcSubject(ns, ToolsRpc.ReadRules))).toEqual(["loop"]);
    expect(subscribers(rpcSubject(ns, ToolsRpc.ReadRules))).toEqual(["tools"]);
    for (const hooks of [rpcSubject(ns, ToolsRpc.ReadHooksConfig), rpcSubject(ns, ToolsRpc.RunHook)]) {
      expect(publishers(hooks)).toEqual(["loop"]);
      expect(subscribers(hooks)).toEqual(["tools"]);
    }
    expect(publishers(rpcSubject(ns, LlmRpc.Complete))).toEqual(["loop"]);
    expect(publishers(rpcSubject(ns, LlmRpc.CountTokens))).toEqual(["gateway"]);
    expect(publishers(rpcSubject(ns, LoopRpc.CreateSession))).toEqual(["gateway"]);
    // The gateway reaches a session's owner directly; a loop replica passes on a queue-group command for a session another replica keeps warm.
    expect(publishers(rpcSubject(ns, LoopRpc.SubmitMessage.at({ session: "s1" })))).toEqual(["gateway", "loop"]);
    expect(publishers(rpcSubject(ns, LoopRpc.DeleteSession.at({ session: "s1" })))).toEqual(["gateway", "loop"]);
    expect(subscribers(rpcSubject(ns, SandboxRpc.Exec))).toEqual(["sandbox"]);
    expect(subscribers(rpcSubject(ns, ToolsRpc.CallTool))).toEqual(["tools"]);
    expect(subscribers(rpcSubject(ns, LlmRpc.Complete))).toEqual(["llm"]);
    expect(subscribers(rpcSubject(ns, LoopRpc.SubmitMessage.at({ session: "s1" })))).toEqual(["loop"]);
    expect(subscribers(n.logSubject("t1", "s1"))).toEqual([]);
    // Replies: each service only under its own inbox prefix; no one may read another's.
    for (const user of BUS_USERS.filter((u) => u !== "admin")) {
      expect(subscribers(`_INBOX.${user}.abc.1`)).toEqual([user]);
    }
    expect(subscribers("_INBOX.abc.1")).toEqual([]);
    // Micro-service discovery: every service answers the all-services verbs, and only its own name's.
    for (const verb of ["PING", "INFO", "STATS"]) expect(subscribers(`$SRV.${verb}`)).toEqual(["gateway", "loop", "llm", "tools", "sandbox", "skills", "mcp"]);
    expect(subscribers("$SRV.INFO.tack-mcp")).toEqual(["mcp"]);
    // mcp.list and mcp.call are the MCP bridge's own, asked by the loop; the bridge reaches the sandbox only to
    // run stdio servers there (ensure, a stdio stream's open and input); the tools service opens streams for
    // run_code programs (decision 0020); only those two read the streams' output.
    expect(subscribers(rpcSubject(ns, McpRpc.CallTool))).toEqual(["mcp"]);
    expect(subscribers(rpcSubject(ns, McpRpc.ListTools))).toEqual(["mcp"]);
    expect(publishers(rpcSubject(ns, McpRpc.ListTools))).toEqual(["loop"]);
    expect(publishers(rpcSubject(ns, McpRpc.CallTool))).toEqual(["loop"]);
    expect(table.mcp.publish).toEqual([rpcSubject(ns, SandboxRpc.EnsureSandbox), "acme.sandbox.stdio.open", "acme.sandbox.stdio.in.*"]);
    expect(publishers("acme.sandbox.stdio.in.0123456789abcdef0123456789abcdef")).toEqual(["tools", "mcp"]);
    expect(publishers("acme.sandbox.stdio.open")).toEqual(["tools", "mcp"]);
    expect(subscribers("acme.sandbox.stdio.in.0123456789abcdef0123456789abcdef")).toEqual(["sandbox"]);
    expect(publishers("acme.sandbox.stdio.out.0123456789abcdef0123456789abcdef")).toEqual(["sandbox"]);
    expect(subscribers("acme.sandbox.stdio.out.0123456789abcdef0123456789abcdef")).toEqual(["tools", "sandbox", "mcp"]);
    expect(subscribers("acme.sandbox.stdio.open")).toEqual(["sandbox"]);
    expect(subscribers("$SRV.PING.tack-loop")).toEqual(["loop"]);
    // The gateway asks whether loops run when none serves a loop rpc (gateway.loop_outdated); it pings no other service.
    expect(publishers("$SRV.PING.tack-loop")).toContain("gateway");
    expect(publishers("$SRV.PING.tack-sandbox")).not.toContain("gateway");
    expect(subscribers("$SRV.STATS.tack-sandbox.ABC123")).toEqual(["sandbox"]);
    expect(publishers("$SRV.PING")).toEqual([]);
  });

  it("bus-permissions - no service holds a blanket grant, another namespace's streams or the power to delete a stream", () => {
    const other = names("globex");
    for (const user of BUS_USERS.filter((u) => u !== "admin" && u !== "probe")) {
      const { publish, subscribe } = table[user];
      for (const grant of [...publish, ...subscribe]) {
        expect(grant, `${user}: ${grant}`).not.toMatch(/^(>|\*\.>|\$JS\.API\.>|_INBOX\.>|\$KV\.>|\$O\.>|\$SRV\.>)$/);
        // Every JetStream grant names one of this namespace's streams or buckets (discovery subjects are checked below).
        if (grant.startsWith("$") && grant !== "$JS.API.INFO" && !grant.startsWith("$SRV.")) expect(grant, `${user}: ${grant}`).toContain("ACME_");
      }
      for (const stream of [other.logStream, `KV_${other.leaseBucket}`, `OBJ_${other.spillBucket}`, n.logStream]) {
        expect(publish.filter((p) => matches(p, `$JS.API.STREAM.DELETE.${stream}`)), user).toEqual([]);
      }
      expect(publish.filter((p) => matches(p, `$JS.API.STREAM.INFO.${other.logStream}`) || matches(p, `${other.namespace}.loop.create`)), user).toEqual([]);
      // The one grant outside the namespace: subscribing to its own micro-service's discovery subjects.
      expect(subscribe.filter((g) => g.startsWith("$SRV.")), user).toEqual(microSubjects(user));
      // And the gateway's ping of the loops, to tell loops older than itself from none (gateway.loop_outdated).
      expect(publish.filter((g) => g.startsWith("$SRV.")), user).toEqual(user === "gateway" ? ["$SRV.PING.tack-loop"] : []);
    }
    expect(table.admin).toEqual({ publish: [">"], subscribe: [">"] });
    // The containers' health checks (deploy/k8s): ping one service by name, read the answers, nothing else.
    expect(table.probe).toEqual({ publish: ["gateway", "loop", "llm", "tools", "sandbox", "skills", "mcp"].map((s) => `$SRV.PING.tack-${s}`), subscribe: ["_INBOX.probe.>"] });
  });

  it("bus-permissions - reply windows outlast each service's longest call", () => {
    // The gateway answers nothing but discovery: one reply per ping.
    expect(table.gateway.responses).toEqual({ max: 1, expires: "1m" });
    // A tool call may take 660 s (the loop's tool timeout): tools and sandbox reply after it.
    for (const user of ["tools", "sandbox"] as const) expect(minutes(table[user].responses!.expires)).toBeGreaterThan(11);
    expect(table.llm.responses!.max).toBeGreaterThanOrEqual(100_000);
    // The llm only reads the spill bucket (tool results' images): no subject of another service, no writes.
    expect(table.llm.publish.every((p) => p === "$JS.API.INFO" || p.includes(`OBJ_${n.spillBucket}`) || p.includes(`$JS.FC.OBJ_${n.spillBucket}`))).toBe(true);
    expect(table.llm.publish.filter((p) => /PURGE|STREAM\.DELETE|\$O\.|MSG\.DELETE|STREAM\.CREATE|STREAM\.UPDATE/.test(p))).toEqual([]);
  });

  it("bus-permissions - the sandbox's replica subjects and placement bucket agree with the sandbox service", () => {
    expect(placementBucket(ns)).toBe(n.sandboxBucket);
    for (const verb of ["ensure", "exec", "release", "stdio_open", "ping"] as const) {
      const subject = replicaSubject(ns, "host-1", verb);
      expect(publishers(subject)).toEqual(["sandbox"]);
      expect(subscribers(subject)).toEqual(["sandbox"]);
    }
  });

  it("bus-permissions - the nats-server authorization has one user per entry, no anonymous user, and gives the llm only its reads", () => {
    const passwords = Object.fromEntries(BUS_USERS.map((u) => [u, `pw-${u}`])) as Record<BusUser, string>;
    const config = natsServerAuthorization(ns, passwords);
    expect(JSON.stringify(config)).not.toContain("no_auth_user");
    const users = config.authorization.users as Array<{ user: string; password: string; permissions: Record<string, unknown> }>;
    expect(users.map((u) => [u.user, u.password])).toEqual(BUS_USERS.map((u) => [u, `pw-${u}`]));
    const llm = users.find((u) => u.user === "llm")!.permissions;
    expect(llm).toEqual({
      publish: { allow: table.llm.publish }, subscribe: { allow: ["acme.llm.*", "_INBOX.llm.>", ...microSubjects("llm")] }, allow_responses: { max: 1_000_000, expires: "1h" },
    });
    expect(users.find((u) => u.user === "gateway")!.permissions).toHaveProperty("allow_responses", { max: 1, expires: "1m" });
  });
});

describe("bus credentials from the environment", () => {
  const file = (name: string, text: string, mode = 0o600) => {
    const path = join(scratch, name);
    writeFileSync(path, text);
    chmodSync(path, mode);
    return path;
  };

  it("bus-credentials - no variables mean an open NATS; a user and password or a mode-600 file name the credentials", () => {
    expect(busAuthFromEnv({})).toEqual({});
    expect(busAuthFromEnv({ TACK_NATS_USER: "loop", TACK_NATS_PASSWORD: "s3cret" })).toEqual({ credentials: { user: "loop", password: "s3cret" } });
    const good = file("loop.json", JSON.stringify({ user: "loop", password: "from-file" }));
    expect(busAuthFromEnv({ TACK_NATS_CREDENTIALS: good })).toEqual({ credentials: { user: "loop", password: "from-file" } });
    expect(readBusCredentials(good)).toEqual({ user: "loop", password: "from-file" });
    expect(commonConfig({ TACK_NATS_CREDENTIALS: good }).natsAuth).toEqual({ credentials: { user: "loop", password: "from-file" } });
  });

  it("bus-credentials - an exposed, malformed or missing file and half-set variables are refused with the fix", () => {
    const exposed = file("exposed.json", JSON.stringify({ user: "loop", password: "x" }), 0o644);
    expect(() => busAuthFromEnv({ TACK_NATS_CREDENTIALS: exposed })).toThrow(`readable by other users (mode 644); restrict it with \`chmod 600 ${exposed}\``);
    expect(() => busAuthFromEnv({ TACK_NATS_CREDENTIALS: file("bad.json", "user=loop") })).toThrow(/is not JSON; write \{"user"/);
    expect(() => busAuthFromEnv({ TACK_NATS_CREDENTIALS: file("nopass.json", JSON.stringify({ user: "loop" })) })).toThrow(/invalid \(password/);
    expect(() => busAuthFromEnv({ TACK_NATS_CREDENTIALS: join(scratch, "absent.json") })).toThrow(/cannot read the NATS credentials file .*absent\.json named by TACK_NATS_CREDENTIALS \(ENOENT\)/);
    expect(() => busAuthFromEnv({ TACK_NATS_USER: "loop" })).toThrow("TACK_NATS_USER=loop is set without TACK_NATS_PASSWORD");
    expect(() => busAuthFromEnv({ TACK_NATS_PASSWORD: "x" })).toThrow("TACK_NATS_PASSWORD is set without TACK_NATS_USER");
    expect(() => busAuthFromEnv({ TACK_NATS_USER: "a.b", TACK_NATS_PASSWORD: "x" })).toThrow(/TACK_NATS_USER must be 1-64 letters/);
    const good = file("ok.json", JSON.stringify({ user: "loop", password: "x" }));
    expect(() => busAuthFromEnv({ TACK_NATS_CREDENTIALS: good, TACK_NATS_USER: "loop", TACK_NATS_PASSWORD: "x" })).toThrow(/set only one of them/);
    expect(() => commonConfig({ TACK_NATS_USER: "loop" })).toThrow(expect.objectContaining({ code: "config.bus_credentials" }));
  });

  it("bus-credentials - TLS files are checked at start: a certificate needs its key, and each file must be readable", () => {
    const ca = file("ca.pem", "-----BEGIN CERTIFICATE-----\n");
    const cert = file("client.pem", "-----BEGIN CERTIFICATE-----\n");
    const key = file("client.key", "-----BEGIN PRIVATE KEY-----\n");
    expect(busAuthFromEnv({ TACK_NATS_TLS_CA: ca })).toEqual({ tls: { caFile: ca } });
    expect(busAuthFromEnv({ TACK_NATS_TLS_CA: ca, TACK_NATS_TLS_CERT: cert, TACK_NATS_TLS_KEY: key })).toEqual({ tls: { caFile: ca, certFile: cert, keyFile: key } });
    expect(() => busAuthFromEnv({ TACK_NATS_TLS_CERT: cert })).toThrow("TACK_NATS_TLS_CERT and TACK_NATS_TLS_KEY go together");
    expect(() => busAuthFromEnv({ TACK_NATS_TLS_CA: join(scratch, "nope.pem") })).toThrow(/cannot read TACK_NATS_TLS_CA file .*nope\.pem \(ENOENT\)/);
  });
});
