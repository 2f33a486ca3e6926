// What every sandbox backend must do, written against the SandboxBackend interface and run for
// real against each backend this machine has (Docker under runc and under gVisor's runsc). A new
// backend adds one line to BACKENDS and passes this file, then the whole sandbox suite with the
// service using it (README, "Add a backend"). The first block checks that the seam is complete:
// nothing but src/backends/ talks to Docker.
import { randomBytes } from "node:crypto";
import { chown, mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "@tack/testkit";
import type { AgentChannel } from "../src/agent.js";
import { AGENT_SOURCE, defaultAgentDir, installAgent, type InstalledAgent } from "../src/agent-copy.js";
import type { BackendOptions, RuntimeTraits, SandboxBackend, SandboxSpec, WorkspaceMount } from "../src/backend.js";
import { DockerBackend } from "../src/backends/docker.js";
import { reopen, startNew, type Started } from "../src/container.js";
import { SlotMounts } from "../src/mounts.js";
import { LABELS, sandboxSpec } from "../src/spec.js";
import { rejection, uniqueNamespace } from "./helpers.js";

const SRC = join(import.meta.dirname, "../src");
const IMAGE = "tack-sandbox:bookworm";
const USER = { uid: 1000, gid: 1000 } as const;
// Another owner than the sandbox user, for the idmapped workspace.
const OWNER = { uid: 2345, gid: 2345 } as const;

async function sourceFiles(dir: string): Promise<string[]> {
  const files: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) files.push(...(await sourceFiles(path)));
    else if (entry.name.endsWith(".ts")) files.push(path);
  }
  return files;
}

// Every module a file imports, statically or dynamically.
function importsOf(text: string): string[] {
  const found: string[] = [];
  for (const match of text.matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+|\brequire\s*\(\s*)["']([^"']+)["']/g)) found.push(match[1] ?? "");
  return found;
}

describe("sandbox backend seam", () => {
  it("seam - no file of the service outside src/backends/ imports dockerode, and only service.ts picks a backend", async () => {
    const files = await sourceFiles(SRC);
    expect(files.length).toBeGreaterThan(10);
    const dockerode: string[] = [];
    const backends: string[] = [];
    for (const file of files) {
      const name = relative(SRC, file);
      if (name.startsWith("backends/")) continue;
      const imports = importsOf(await readFile(file, "utf8"));
      if (imports.some((module) => module === "dockerode" || module.startsWith("dockerode/"))) dockerode.push(name);
      if (imports.some((module) => module.includes("/backends/"))) backends.push(name);
    }
    expect(dockerode).toEqual([]);
    expect(backends).toEqual(["service.ts"]);
    // The check sees what it looks for: the Docker backend itself imports dockerode.
    expect(importsOf(await readFile(join(SRC, "backends/docker.ts"), "utf8"))).toContain("dockerode");
  });
});

/** A backend under test: its name in the titles, the runtime to test it with, and how it is made. */
interface BackendUnderTest {
  readonly name: string;
  readonly runtime: string;
  readonly make: (options: BackendOptions) => SandboxBackend;
}

const BACKENDS: BackendUnderTest[] = [
  { name: "docker/runc", runtime: "runc", make: (options) => new DockerBackend(options) },
  { name: "docker/runsc", runtime: "runsc", make: (options) => new DockerBackend(options) },
];

for (const candidate of BACKENDS) conformance(candidate);

function conformance({ name, runtime, make }: BackendUnderTest): void {
  describe(`sandbox backend conformance: ${name}`, () => {
    const namespace = uniqueNamespace();
    const warnings: string[] = [];
    let backend: SandboxBackend;
    let traits: RuntimeTraits;
    let agent: InstalledAgent;
    let workspace: string;
    let main: Started;
    const channels: AgentChannel[] = [];
    const dirs: string[] = [];
    let mounts: SlotMounts | undefined;

    const label = (suffix: string) => `conformance ${name} ${suffix}`;
    const spec = (suffix: string, overrides: { workspace?: WorkspaceMount; network?: string | false; runtime?: string; image?: string } = {}): SandboxSpec =>
      sandboxSpec({
        name: `tack-${namespace}-${suffix}`,
        image: overrides.image ?? IMAGE,
        runtime: overrides.runtime ?? traits.name,
        labels: { [LABELS.namespace]: namespace, "tack.conformance": suffix },
        user: USER,
        workspace: overrides.workspace ?? { kind: "direct", path: workspace, readOnly: false },
        network: overrides.network ?? false,
        traits,
        agentDir: agent.dir,
      });
    const start = async (suffix: string, overrides?: Parameters<typeof spec>[1]) => {
      const started = await startNew(backend, spec(suffix, overrides), label(suffix));
      channels.push(started.channel);
      return started;
    };
    const run = async (channel: AgentChannel, script: string) => {
      const result = await channel.run({ argv: ["bash", "-c", script], cwd: "/workspace", timeoutMs: 30_000, cap: 1 << 20, stdin: new Uint8Array() });
      return { exitCode: result.exitCode, stdout: result.stdout.toString(), stderr: result.stderr.toString() };
    };
    const tempDir = async (owner: { uid: number; gid: number } = USER) => {
      const dir = await mkdtemp(join(tmpdir(), "tack-conformance-"));
      await chown(dir, owner.uid, owner.gid);
      dirs.push(dir);
      return dir;
    };

    beforeAll(async () => {
      backend = make({ namespace, runtime, egress: { allowCidrs: [], allowDns: false }, warn: (message) => warnings.push(message) });
      await backend.health();
      await backend.open();
      traits = await backend.runtime();
      agent = await installAgent(AGENT_SOURCE, defaultAgentDir());
      workspace = await tempDir();
      main = await start("main");
    });

    afterAll(async () => {
      for (const channel of channels) channel.close();
      for (const info of await backend.list({ [LABELS.namespace]: namespace })) await backend.remove(info.id);
      await backend.close(true);
      await mounts?.dispose();
      await Promise.all(dirs.map((dir) => rm(dir, { recursive: true, force: true })));
    });

    it(`${name} - health: the engine answers with its version and offers the configured runtime`, async () => {
      const health = await backend.health();
      expect(health.backend).toBe(backend.kind);
      expect(health.version).toMatch(/\S/);
      expect(health.runtimes).toContain(traits.name);
      expect(traits.name).toBe(runtime);
    });

    it(`${name} - image: a missing image is sandbox.image_missing naming it and make sandbox-image, at the check and at create, and leaves nothing`, async () => {
      await backend.checkImage(IMAGE);
      const missing = `tack-sandbox:conformance-missing-${randomBytes(3).toString("hex")}`;
      for (const error of [await rejection(backend.checkImage(missing)), await rejection(backend.create(spec("no-image", { image: missing }), label("no-image")))]) {
        expect(error.code).toBe("sandbox.image_missing");
        expect(error.message).toContain(missing);
        expect(error.message).toContain("make sandbox-image");
      }
      expect((await backend.list({ [LABELS.namespace]: namespace })).map((info) => info.name)).not.toContain(`tack-${namespace}-no-image`);
    });

    it(`${name} - runtime: one the engine lacks is sandbox.runtime_missing, never replaced by another`, async () => {
      const lacking = make({ namespace, runtime: "conformance-no-such-runtime", egress: { allowCidrs: [], allowDns: false }, warn: () => undefined });
      const error = await rejection(lacking.runtime());
      expect(error.code).toBe("sandbox.runtime_missing");
      expect(error.message).toContain("conformance-no-such-runtime");
      await lacking.close(false);
    });

    it(`${name} - ensure: a started sandbox runs commands through its agent as the spec's user, in the workspace`, async () => {
      expect(await run(main.channel, "id -u; id -g; pwd; echo hello > /workspace/greeting; cat /workspace/greeting")).toEqual({ exitCode: 0, stdout: "1000\n1000\n/workspace\nhello\n", stderr: "" });
      expect((await stat(join(workspace, "greeting"))).uid).toBe(USER.uid);
      expect(await backend.state(main.id, label("main"))).toEqual({ running: true, oomKilled: false, exitCode: 0 });
      // Commands run concurrently on one channel.
      const [a, b] = await Promise.all([run(main.channel, "sleep 0.3; echo a"), run(main.channel, "echo b")]);
      expect([a.stdout, b.stdout]).toEqual(["a\n", "b\n"]);
    });

    it(`${name} - list: sandboxes are found by label (present, or with a value) with their name and labels`, async () => {
      const listed = await backend.list({ [LABELS.namespace]: namespace, "tack.conformance": "main" });
      expect(listed).toEqual([{ id: main.id, name: `tack-${namespace}-main`, labels: expect.objectContaining({ [LABELS.namespace]: namespace, "tack.conformance": "main" }) }]);
      expect((await backend.list({ "tack.conformance": true, [LABELS.namespace]: namespace })).map((info) => info.id)).toContain(main.id);
      expect(await backend.list({ [LABELS.namespace]: namespace, "tack.conformance": "nobody" })).toEqual([]);
    });

    it(`${name} - security: no capabilities, no-new-privileges, a read-only root, and only the spec's environment`, async () => {
      const status = (await run(main.channel, "cat /proc/self/status")).stdout;
      for (const set of ["CapInh", "CapPrm", "CapEff", "CapBnd"]) expect(status).toMatch(new RegExp(`^${set}:\\s+0{16}$`, "m"));
      expect((await run(main.channel, "python3 -c 'import ctypes; print(ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))'")).stdout).toBe("1\n");
      for (const path of ["/usr/bin/conformance", "/etc/conformance", "/opt/tack/conformance"]) {
        const write = await run(main.channel, `echo x > ${path}`);
        expect(write.exitCode, path).not.toBe(0);
        expect(write.stderr, path).toMatch(/Read-only file system|Permission denied/);
      }
      expect(await run(main.channel, "echo x > /tmp/t && echo x > $HOME/h && cat /tmp/t $HOME/h")).toMatchObject({ exitCode: 0, stdout: "x\nx\n" });
      // The agent's environment as its commands get it (bash adds PWD, SHLVL and _); an engine may add HOSTNAME.
      const env = (await run(main.channel, "env -0 | tr '\\0' '\\n' | cut -d= -f1 | sort | tr '\\n' ' '")).stdout.trim().split(" ");
      const passed = env.filter((variable) => !["PWD", "SHLVL", "_", "OLDPWD", "HOSTNAME"].includes(variable));
      expect(passed).toEqual(["HOME", "LANG", "PATH"]);
      expect((await run(main.channel, "echo $HOME $LANG")).stdout).toBe("/home/tack C.UTF-8\n");
    });

    it(`${name} - security: a sandbox without a network has only loopback`, async () => {
      expect((await run(main.channel, "python3 -c 'import socket; print(sorted(n for _, n in socket.if_nameindex()))'")).stdout).toBe("['lo']\n");
    });

    it(`${name} - processes: the agent lists the sandbox's live processes, never itself`, async () => {
      await run(main.channel, "setsid sleep 321 < /dev/null > /dev/null 2>&1 &");
      let listing = await main.channel.processes();
      await waitFor("the background sleep to be listed", async () => {
        listing = await main.channel.processes();
        return listing.processes.some((process) => process.command === "sleep 321");
      }, { timeoutMs: 10_000, intervalMs: 100 });
      expect(listing.truncated).toBe(false);
      expect(listing.processes.map((process) => process.pid)).not.toContain(1);
      expect(listing.processes.find((process) => process.command === "sleep 321")).toMatchObject({ pid: expect.any(Number), state: expect.stringMatching(/^[RSD]$/) });
      await run(main.channel, "pkill -f 'sleep 321'; true");
    });

    it(`${name} - attach: a closed channel leaves the agent running, and a new attach takes it over`, async () => {
      const started = await start("reattach");
      await run(started.channel, "echo kept > /tmp/mark");
      started.channel.close();
      expect(started.channel.alive).toBe(false);
      expect((await backend.state(started.id, label("reattach")))?.running).toBe(true);
      const again = await reopen(backend, started.id, label("reattach"));
      expect(again).toBeDefined();
      channels.push(again!);
      // The same sandbox: its /tmp is still there.
      expect((await run(again!, "cat /tmp/mark")).stdout).toBe("kept\n");
      await backend.remove(started.id);
    });

    it(`${name} - stop: kills the sandbox, ends its channel and returns once it stopped; stopping it again, or one that is gone, is fine`, async () => {
      const started = await start("stop");
      const reason = new Promise<string>((resolve) => started.channel.onDead(resolve));
      await backend.stop(started.id, label("stop"));
      expect(await backend.state(started.id, label("stop"))).toEqual(expect.objectContaining({ running: false }));
      expect(await reason).toMatch(/\S/);
      await backend.stop(started.id, label("stop"));
      // It keeps its filesystem and starts again, as a reopen does.
      const again = await reopen(backend, started.id, label("stop"));
      channels.push(again!);
      expect((await run(again!, "echo back")).stdout).toBe("back\n");
      await backend.remove(started.id);
      await backend.stop(started.id, label("stop"));
    });

    it(`${name} - create: a name already held is taken over (the holder is removed); rename does the same`, async () => {
      const first = await backend.create(spec("held"), label("held"));
      const second = await backend.create(spec("held"), label("held"));
      expect(second).not.toBe(first);
      expect(await backend.state(first, label("held"))).toBeUndefined();
      expect(await backend.state(second, label("held"))).toEqual(expect.objectContaining({ running: false }));
      const other = await backend.create(spec("other"), label("other"));
      await backend.rename(other, `tack-${namespace}-held`);
      expect(await backend.state(second, label("held"))).toBeUndefined();
      expect((await backend.list({ [LABELS.namespace]: namespace })).filter((info) => info.name === `tack-${namespace}-held`).map((info) => info.id)).toEqual([other]);
      expect(await backend.remove(other)).toBe(true);
    });

    it(`${name} - release: remove kills the sandbox and ends its channel; a second remove reports it gone`, async () => {
      const started = await start("release");
      const reason = new Promise<string>((resolve) => started.channel.onDead(resolve));
      const running = started.channel.run({ argv: ["sleep", "60"], cwd: "/workspace", timeoutMs: 60_000, cap: 1024, stdin: new Uint8Array() });
      running.catch(() => undefined);
      expect(await backend.remove(started.id)).toBe(true);
      expect(await reason).toMatch(/\S/);
      expect((await rejection(running)).code).toBe("sandbox.agent_lost");
      expect(await backend.state(started.id, label("release"))).toBeUndefined();
      expect((await backend.list({ [LABELS.namespace]: namespace })).map((info) => info.id)).not.toContain(started.id);
      expect(await backend.remove(started.id)).toBe(false);
      expect(await reopen(backend, started.id, label("release"))).toBeUndefined();
    });

    it(`${name} - workspace: a read-only workspace cannot be changed`, async () => {
      const started = await start("readonly", { workspace: { kind: "direct", path: workspace, readOnly: true } });
      expect((await run(started.channel, "cat /workspace/greeting")).stdout).toBe("hello\n");
      const write = await run(started.channel, "echo x > /workspace/new");
      expect(write.exitCode).not.toBe(0);
      expect(write.stderr).toContain("Read-only file system");
      await backend.remove(started.id);
    });

    it(`${name} - workspace: another owner's workspace through an idmapped mount appears as the sandbox user's and stays its owner's`, async () => {
      if (!traits.idmappedMounts) {
        // The one runtime known without it: gVisor, where the service refuses such a workspace (sandbox.ownership_mapping_unsupported).
        expect(traits.userspaceKernel).toBe(true);
        return;
      }
      const owned = await tempDir(OWNER);
      await writeFile(join(owned, "theirs"), "theirs\n");
      await chown(join(owned, "theirs"), OWNER.uid, OWNER.gid);
      mounts ??= await SlotMounts.prepare(await tempDir({ uid: 0, gid: 0 }));
      const { path: mapped } = await mounts.createDirect(`conformance-${randomBytes(4).toString("hex")}`, { root: owned, path: owned }, false, OWNER, USER);
      const started = await start("mapped", { workspace: { kind: "direct", path: mapped, readOnly: false } });
      expect((await run(started.channel, "stat -c '%u:%g' /workspace/theirs; echo mine > /workspace/mine; cat /workspace/theirs")).stdout).toBe("1000:1000\ntheirs\n");
      expect(await stat(join(owned, "mine"))).toMatchObject({ uid: OWNER.uid, gid: OWNER.gid });
      await backend.remove(started.id);
    });

    it(`${name} - workspace: workspaceIdentity is the host device and inode of what the running sandbox is served at /workspace`, async () => {
      const started = await start("identity");
      const host = await stat(workspace, { bigint: true });
      expect(await backend.workspaceIdentity(started.id, "identity")).toEqual({ dev: String(host.dev), ino: String(host.ino) });
      await backend.stop(started.id, "identity");
      expect(await backend.workspaceIdentity(started.id, "identity")).toBeUndefined();
      await backend.remove(started.id);
      expect(await backend.workspaceIdentity(started.id, "identity")).toBeUndefined();
    });

    it(`${name} - network: grantNetwork gives a networked sandbox an interface beyond loopback under the networked runtime`, async () => {
      const grant = await backend.grantNetwork();
      expect(grant.network).toMatch(/\S/);
      expect(grant.runtime.startsWith(traits.name)).toBe(true);
      const started = await start("networked", { network: grant.network, runtime: grant.runtime });
      const names = (await run(started.channel, "python3 -c 'import socket; print(sorted(n for _, n in socket.if_nameindex()))'")).stdout;
      expect(names).toMatch(/'lo'/);
      expect(names).not.toBe("['lo']\n");
      await backend.remove(started.id);
    });
  });
}
