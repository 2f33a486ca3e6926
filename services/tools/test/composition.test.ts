// composition (creator mode) tells the model what runs, not where: service names, instance counts and
// tools, never a host name, a version, a replica id or a runtime (issue 18, item 7).
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Bus, registerMicro, TACK_VERSION } from "@tack/bus";
import { compositionTool } from "../src/modes/creator.js";
import type { ToolContext } from "../src/tool.js";

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
let bus: Bus;
let peers: Bus[] = [];

beforeAll(async () => {
  const namespace = `t${randomBytes(5).toString("hex")}`;
  bus = await Bus.connect({ url: NATS_URL, namespace, name: "composition-test" });
  // Instances as the services register them: each says its host, version and pid; sandboxes their replica id and runtime.
  const instance = async (service: string, metadata: Record<string, string> = {}, version?: string) => {
    const peer = await Bus.connect({ url: NATS_URL, namespace, name: `composition-${service}` });
    peers.push(peer);
    await registerMicro(peer, { service, description: `${service} for the test`, metadata, ...(version ? { version } : {}) });
  };
  await instance("tools");
  await instance("sandbox", { runtime: "runsc", replica: `${hostname()}-2` });
  await instance("sandbox", { runtime: "runsc", replica: hostname() });
  await instance("loop", {}, "9.8.7");
});

afterAll(async () => {
  await Promise.all(peers.map((peer) => peer.close()));
  peers = [];
  await bus?.close();
});

describe("composition", () => {
  it("composition - shows each service with its instance count and the modes' tools, and no host name, version, replica id or runtime", async () => {
    const tool = compositionTool(() => ({ minimal: [{ name: "shell" }, { name: "editor" }] as never }));
    const ctx = { sessionId: "s1", callId: "c1", signal: new AbortController().signal, bus, defined: [] } as unknown as ToolContext;
    const shown = await tool.execute({}, ctx);
    expect(shown).toBe([
      "services (NATS micro discovery, this namespace):",
      "  loop: 1 instance",
      "  sandbox: 2 instances",
      "  tools: 1 instance",
      "tools by session mode:",
      "  minimal: shell, editor",
      "defined in this session: none",
    ].join("\n"));
    expect(shown).not.toContain(hostname());
    expect(shown).not.toContain(TACK_VERSION);
    expect(shown).not.toMatch(/\d+\.\d+\.\d+|version|runsc|replica/);
  });
});
