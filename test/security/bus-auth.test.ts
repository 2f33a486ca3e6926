// Bus authentication and authorization, end to end: `launch()` without a NATS URL starts
// nats-server from the configuration it generates (one user per service, permissions from
// @tack/config's table) and every service on its own credentials; the refusals are checked
// from the outside, then a scripted session runs through all of them, and at the end the
// server's log must hold no permission violation but the ones provoked here.
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chownSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Bus, rpcSubject, SandboxRpc, TackError, ToolsRpc } from "@tack/bus";
import { BUS_USERS, natsServerAuthorization, readBusCredentials, type BusUser } from "@tack/config";
import { launch, type Launched } from "@tack/cli";
import { draft, FORMAT_VERSION, readAll, SessionLogWriter } from "@tack/log";
import { CallToolRequest, ExecRequest } from "@tack/proto";
import { removeNamespace, waitFor } from "@tack/testkit";
import { ensureBusCredentials } from "../../packages/cli/src/bus-credentials.js";
import { startNatsServer, type LocalNats } from "../../packages/cli/src/nats-server.js";
import { sseJson } from "../e2e/support/sse.js";

const namespace = `sec${randomBytes(4).toString("hex")}`;
const work = mkdtempSync(join(tmpdir(), "tack-bus-auth-"));
// The services' state directory; the llm service reads scripts from its `scripts/`.
const dataDir = join(work, "data");
const scripts = join(dataDir, "scripts");
let tack: Launched;
let admin: Bus;
const opened: Bus[] = [];
// Every violation this file provokes on purpose, as nats-server logs it: `<user> <Publish|Subscription> <subject>`.
const provoked = new Set<string>();

/** A connection as one of the generated users, closed after the file. */
async function connectAs(user: BusUser, password?: string): Promise<Bus> {
  const credentials = readBusCredentials(tack.busCredentials![user]);
  const bus = await Bus.connect({ url: tack.natsUrl, namespace, name: `bus-auth-${user}`, credentials: { user, password: password ?? credentials.password } });
  opened.push(bus);
  return bus;
}

/** Resolves with the permission error that ends a subscription the server refused. */
async function subscriptionError(bus: Bus, subject: string): Promise<Error> {
  const sub = bus.nc.subscribe(subject);
  try {
    for await (const message of sub) throw new Error(`a message arrived on ${message.subject}`);
  } catch (error) {
    return error as Error;
  }
  throw new Error(`the subscription to ${subject} ended without an error`);
}

beforeAll(async () => {
  tack = await launch({ dataDir, namespace, env: { TACK_LEASE_TTL_MS: "2000", TACK_STATE_DIR: dataDir } });
  admin = await Bus.connect({ url: tack.natsUrl, namespace, name: "bus-auth-admin", ...tack.natsAuth });
}, 180_000);

afterAll(async () => {
  for (const bus of opened) await bus.close().catch(() => undefined);
  if (admin) {
    await removeNamespace(admin.nc, namespace);
    await admin.close();
  }
  await tack?.stop();
  // The warm pool may have refilled between the cleanup above and the sandbox service's stop.
  const leftovers = execFileSync("docker", ["ps", "-aq", "--filter", `name=^tack-${namespace}-`]).toString().split("\n").filter(Boolean);
  if (leftovers.length > 0) execFileSync("docker", ["rm", "-f", ...leftovers], { stdio: "ignore" });
  rmSync(work, { recursive: true, force: true });
}, 60_000);

describe("bus credentials", () => {
  it("bus-auth - tack up keeps one random credential per user (mode 600, directory 700) and a server config (mode 600) without anonymous access", async () => {
    const files = tack.busCredentials!;
    expect(Object.keys(files).sort()).toEqual([...BUS_USERS].sort());
    const dir = join(dataDir, "bus");
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    const passwords = new Set<string>();
    for (const user of BUS_USERS) {
      expect(files[user]).toBe(join(dir, `${user}.json`));
      expect(statSync(files[user]).mode & 0o777).toBe(0o600);
      const { user: stored, password } = readBusCredentials(files[user]);
      expect(stored).toBe(user);
      expect(password).toMatch(/^[A-Za-z0-9_-]{43}$/);
      passwords.add(password);
    }
    expect(passwords.size).toBe(BUS_USERS.length);
    const config = join(dir, "nats-server.conf");
    expect(statSync(config).mode & 0o777).toBe(0o600);
    const text = readFileSync(config, "utf8");
    expect(text).not.toMatch(/no_auth_user/);
    const parsed = JSON.parse(text) as { jetstream: { store_dir: string }; authorization: { users: Array<{ user: string }> } };
    expect(parsed.jetstream.store_dir).toBe(join(dataDir, "nats"));
    expect(parsed.authorization.users.map((u) => u.user)).toEqual([...BUS_USERS]);
    // nats-server itself accepts the file (`-t` checks it and exits; it throws on an invalid one).
    expect(execFileSync("nats-server", ["-t", "-c", config], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] })).toBe("");
    // A restart reuses them: `nats` contexts and hand-started services keep working.
    const again = await ensureBusCredentials(dir);
    for (const user of BUS_USERS) expect(again.credentials[user].password).toBe(readBusCredentials(files[user]).password);
  });

  it("bus-auth - an anonymous client and a wrong password are refused with bus.unauthorized naming the user and the fix", async () => {
    await expect(Bus.connect({ url: tack.natsUrl, namespace, name: "anonymous" })).rejects.toMatchObject({
      code: "bus.unauthorized",
      message: expect.stringMatching(/requires credentials .*set TACK_NATS_CREDENTIALS/),
    });
    const error = await connectAs("gateway", "not-the-password").catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TackError);
    expect(error).toMatchObject({
      code: "bus.unauthorized",
      retryable: false,
      details: { user: "gateway" },
      message: expect.stringMatching(/refused user "gateway" .*check TACK_NATS_CREDENTIALS/),
    });
  });

  it("bus-auth - the gateway's credentials cannot call the sandbox or the tools, nor write a session log, nor read other services' replies", async () => {
    const gateway = await connectAs("gateway");
    const n = gateway.names;
    const exec = rpcSubject(n.namespace, SandboxRpc.Exec);
    const toolsCall = rpcSubject(n.namespace, ToolsRpc.CallTool);
    const logSubject = n.logSubject("local", "sforged");
    const seen: string[] = [];
    const watch = [exec, toolsCall, n.logSubjects].map((subject) => admin.nc.subscribe(subject, { callback: (_e, m) => void seen.push(m.subject) }));
    await admin.nc.flush();
    try {
      await expect(gateway.request(SandboxRpc.Exec, ExecRequest.fromPartial({ sessionId: "sforged", argv: ["id"] })))
        .rejects.toMatchObject({ code: "bus.forbidden", message: expect.stringContaining(`Permissions Violation for Publish to "${exec}"`) });
      await expect(gateway.request(ToolsRpc.CallTool, CallToolRequest.fromPartial({ sessionId: "sforged" })))
        .rejects.toMatchObject({ code: "bus.forbidden", details: { subject: toolsCall } });
      await expect(jetstream(gateway.nc).publish(logSubject, "forged")).rejects.toThrow(`Permissions Violation for Publish to "${logSubject}"`);
      gateway.nc.publish(logSubject, "forged, no reply");
      provoked.add(`gateway Publish ${exec}`).add(`gateway Publish ${toolsCall}`).add(`gateway Publish ${logSubject}`);

      // No reply inbox but its own: another service's replies (tool results, completions) stay private.
      for (const subject of ["_INBOX.>", "_INBOX.tools.>", n.logSubjects]) {
        expect((await subscriptionError(gateway, subject)).message).toContain(`Permissions Violation for Subscription to "${subject}"`);
        provoked.add(`gateway Subscription ${subject}`);
      }
      // A round trip on each connection orders everything: the server has handled the gateway's
      // publishes, and whatever it forwarded to the watchers arrived before the admin's pong.
      await gateway.nc.flush();
      await admin.nc.flush();
      expect(seen).toEqual([]);
      const jsm = await jetstreamManager(admin.nc);
      const info = await jsm.streams.info(n.logStream, { subjects_filter: logSubject });
      expect(info.state.subjects?.[logSubject] ?? 0).toBe(0);
    } finally {
      for (const sub of watch) sub.unsubscribe();
    }
  });

  it("bus-auth - the llm's credentials publish nothing but replies", async () => {
    const llm = await connectAs("llm");
    // It calls no service (its only requests are reads of the spill bucket's images), so the publish is refused.
    await expect(llm.request(SandboxRpc.Exec, ExecRequest.fromPartial({ sessionId: "sforged", argv: ["id"] })))
      .rejects.toMatchObject({ code: "bus.forbidden" });
    provoked.add(`llm Publish ${rpcSubject(llm.names.namespace, SandboxRpc.Exec)}`).add("llm Subscription _INBOX.llm.*");
  });

  it("bus-auth - the tools' credentials reach the sandbox service, whose answer comes back through allow_responses", async () => {
    const tools = await connectAs("tools");
    // Any answer of the sandbox service (here: there is no such sandbox) proves the request and its reply were allowed.
    const error = await tools.request(SandboxRpc.Exec, ExecRequest.fromPartial({ sessionId: "snosandbox", argv: ["true"], timeoutMs: 1_000 }), { timeoutMs: 20_000 })
      .then(() => undefined, (e: unknown) => e as TackError);
    expect(error?.code ?? "ok").not.toMatch(/^bus\./);
  });

  it("bus-auth - the loop's credentials append to the session log, which the gateway's can read but not write", async () => {
    const loop = await connectAs("loop");
    const gateway = await connectAs("gateway");
    const address = { tenant: "local", sessionId: "sappend" };
    const writer = await SessionLogWriter.open(loop.nc, loop.names, address);
    await writer.append(draft("sessionCreated", {
      sessionId: address.sessionId, tenant: "local", mode: "standard", model: "scripted:x.json", workspace: "/w", formatVersion: FORMAT_VERSION, title: "",
    }, "loop"), draft("userMessage", { text: "appended by the loop" }, "loop"));
    const events = await readAll(gateway.nc, gateway.names, address);
    expect(events.map((e) => [e.seq, e.type])).toEqual([[1, "session/created"], [2, "user/message"]]);
  });

  it("bus-auth - a scripted session runs end to end with every service on its own credentials", async () => {
    const ws = join(work, "workspace");
    mkdirSync(ws);
    writeFileSync(join(ws, "hello.txt"), "hello from the host\n");
    if (process.getuid?.() === 0) {
      chownSync(ws, 1000, 1000);
      chownSync(join(ws, "hello.txt"), 1000, 1000);
    }
    mkdirSync(scripts, { recursive: true });
    const script = join(scripts, "bus-auth.json");
    // A result over the spill threshold goes to the object store (loop) and is read back from it (tools).
    writeFileSync(script, JSON.stringify({ replies: [
      { tool_calls: [{ name: "bash", arguments: { command: "cat hello.txt; id -u; seq 1 12000" } }] },
      { tool_calls: [{ name: "read", arguments: { path: "tack-spill:call_0_0" } }] },
      { content: "Done." },
    ] }));
    const api = (path: string, init: { method?: string; json?: unknown; tar?: Buffer } = {}) => fetch(`${tack.gatewayUrl}${path}`, {
      method: init.method ?? "GET",
      headers: { authorization: `Bearer ${tack.apiKey}`, ...(init.json !== undefined ? { "content-type": "application/json" } : init.tar ? { "content-type": "application/x-tar" } : {}) },
      body: init.json !== undefined ? JSON.stringify(init.json) : init.tar,
    });
    const created = await api("/v1/sessions", { method: "POST", json: { workspace: ws, model: `scripted:${script}` } });
    expect(created.status, await created.clone().text()).toBe(201);
    const { id } = (await created.json()) as { id: string };
    expect((await api(`/v1/sessions/${id}/messages`, { method: "POST", json: { text: "go" } })).status).toBe(202);

    type EventJson = { seq: number; type: string; toolResult?: { content: string; spillObject?: string }; turnEnd?: { reason: string } };
    const log = await waitFor("the turn to end", async () => {
      const text = await (await api(`/v1/sessions/${id}/events?follow=0`)).text();
      const events = sseJson<EventJson>(text);
      if (events.some((e) => e.type === "turn/end")) return events;
      throw new Error(`log so far: ${events.map((e) => e.type).join(", ")}`);
    }, { timeoutMs: 90_000, intervalMs: 200 });
    expect(log.at(-1)!.turnEnd).toMatchObject({ reason: "completed" });
    const [ran, readBack] = log.filter((e) => e.type === "tool/result").map((e) => e.toolResult!);
    expect(ran!.content).toMatch(/^hello from the host\n1000\n1\n2\n/);
    expect(ran!.spillObject).toBeTruthy();
    // Read back whole from the object store: the logged preview (about 4 KB) ends near 1000.
    expect(readBack!.content).toContain("1998");
    // The gateway reads the log for the context and the spend for usage; the loop serves a mode change.
    expect((await api(`/v1/sessions/${id}/context`)).status).toBe(200);
    expect((await api("/v1/usage")).status).toBe(200);
    expect((await api(`/v1/sessions/${id}/sandbox_mode`, { method: "POST", json: { mode: "read-only" } })).status).toBe(200);

    // A managed workspace's archive travels gateway → object store → sandbox service, and back.
    const uploaded = await api("/v1/workspaces", { method: "POST", tar: execFileSync("tar", ["-cf", "-", "-C", ws, "hello.txt"]) });
    expect(uploaded.status, await uploaded.clone().text()).toBe(201);
    const { id: workspaceId } = (await uploaded.json()) as { id: string };
    const archive = await api(`/v1/workspaces/${workspaceId}/archive`);
    expect(archive.status).toBe(200);
    expect(Buffer.from(await archive.arrayBuffer()).toString("latin1")).toContain("hello from the host");
    expect((await api(`/v1/workspaces/${workspaceId}`, { method: "DELETE" })).status).toBe(200);

    // Deleting the session: the loop releases its containers and purges its log, spilled results and lease.
    const deleted = await api(`/v1/sessions/${id}`, { method: "DELETE" });
    expect(deleted.status, await deleted.clone().text()).toBe(200);
    const { removed } = (await deleted.json()) as { removed: { log_messages: number; spill_objects: number } };
    // The turn's events and the mode change's.
    expect(removed.log_messages).toBeGreaterThan(log.length);
    expect(removed.spill_objects).toBe(1);
  }, 150_000);

  it("bus-auth - the server logged no permission violation but the ones provoked above", async () => {
    const violations = () => [...readFileSync(join(dataDir, "logs", "nats-server.log"), "utf8").matchAll(/(Publish|Subscription) Violation - User "([^"]+)", Subject "([^"]+)"/g)];
    // One more violation provoked now: once the server has logged it, it has logged every earlier one.
    const gateway = await connectAs("gateway");
    const last = gateway.names.logSubject("local", "slast");
    gateway.nc.publish(last, "the last violation");
    provoked.add(`gateway Publish ${last}`);
    await gateway.nc.flush();
    const matches = await waitFor("nats-server to log the violation provoked last", () => {
      const now = violations();
      return now.some((match) => match[3] === last) && now;
    }, { timeoutMs: 10_000 });
    const logged = new Set<string>();
    for (const match of matches) {
      // The llm's inbox is named by a random token.
      logged.add(`${match[2]} ${match[1]} ${match[3]!.replace(/^_INBOX\.llm\..*/, "_INBOX.llm.*")}`);
    }
    expect([...logged].filter((violation) => !provoked.has(violation))).toEqual([]);
    expect([...logged]).toContain(`gateway Publish ${rpcSubject(admin.names.namespace, SandboxRpc.Exec)}`);
  });
});

describe("bus credentials over TLS", () => {
  let nats: LocalNats | undefined;
  const tls = join(work, "tls");

  afterAll(async () => {
    await nats?.child.stop(2_000);
  });

  it("bus-auth - a TLS-only server is reached with the CA, client certificate and key files, and refused without the CA", async () => {
    mkdirSync(tls, { recursive: true, mode: 0o700 });
    const openssl = (...args: string[]) => execFileSync("openssl", args, { cwd: tls, stdio: "ignore" });
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=tack-test-ca");
    writeFileSync(join(tls, "san.ext"), "subjectAltName=DNS:localhost\n");
    for (const name of ["server", "client"]) {
      openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", `${name}.key`, "-out", `${name}.csr`, "-subj", `/CN=${name}`);
      openssl("x509", "-req", "-in", `${name}.csr`, "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", `${name}.pem`, "-days", "1", "-extfile", "san.ext");
    }
    const passwords = Object.fromEntries(BUS_USERS.map((user) => [user, `pw-${user}-${randomBytes(8).toString("hex")}`])) as Record<BusUser, string>;
    const config = join(tls, "nats-server.conf");
    writeFileSync(config, JSON.stringify({
      tls: { cert_file: join(tls, "server.pem"), key_file: join(tls, "server.key"), ca_file: join(tls, "ca.pem"), verify: true },
      ...natsServerAuthorization(namespace, passwords),
    }), { mode: 0o600 });
    nats = await startNatsServer({ dataDir: tls, logDir: tls, timeoutMs: 20_000, configFile: config });
    const files = { caFile: join(tls, "ca.pem"), certFile: join(tls, "client.pem"), keyFile: join(tls, "client.key") };
    // By host name, as a cluster is reached: the client checks the server's certificate against it.
    const url = nats.url.replace("127.0.0.1", "localhost");
    const loop = await Bus.connect({ url, namespace, name: "tls-loop", credentials: { user: "loop", password: passwords.loop }, tls: files });
    opened.push(loop);
    await loop.nc.flush();
    expect(loop.nc.isClosed()).toBe(false);
    // Without the CA the server's certificate is not trusted.
    await expect(Bus.connect({ url, namespace, name: "tls-no-ca", credentials: { user: "loop", password: passwords.loop }, tls: { certFile: files.certFile, keyFile: files.keyFile } }))
      .rejects.toMatchObject({ code: "bus.unreachable" });
  });
});
