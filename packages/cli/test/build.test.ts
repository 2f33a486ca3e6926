import { execFile, spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Bus, TackError, ToolsRpc } from "@tack/bus";
import { ListToolsRequest, ListToolsResponse } from "@tack/proto";
import { removeNamespace } from "@tack/testkit";
import type { BuildManifest } from "../src/build-manifest.js";
import { compiledEntry } from "../src/build-manifest.js";
import { hasServiceEntry, serviceCommand } from "../src/entry.js";
import { repoRoot } from "../src/paths.js";

const run = promisify(execFile);
const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
// Inside the checkout, so that the bundles find its node_modules the way dist/ does.
const cache = join(repoRoot, "node_modules", ".cache");
mkdirSync(cache, { recursive: true });
const outdir = mkdtempSync(join(cache, "tack-build-test-"));
let buildOutput = "";

beforeAll(async () => {
  const { stdout } = await run(process.execPath, [join(repoRoot, "scripts", "build.mjs"), "--outdir", outdir], { cwd: repoRoot });
  buildOutput = stdout;
}, 120_000);
afterAll(() => rmSync(outdir, { recursive: true, force: true }));

const manifestFile = () => join(outdir, "manifest.json");
const readManifest = () => JSON.parse(readFileSync(manifestFile(), "utf8")) as BuildManifest;

describe("build", () => {
  it("build - bundles the CLI and every service into the outdir and says what it built", () => {
    for (const output of ["cli/main.js", ...["gateway", "llm", "loop", "mcp", "sandbox", "skills", "tools"].map((s) => `services/${s}/main.js`)]) {
      expect(buildOutput).toContain(`${relative(repoRoot, outdir)}/${output}`);
      expect(readFileSync(join(outdir, output), "utf8")).toContain("// Built by scripts/build.mjs");
    }
    expect(buildOutput).toMatch(/build: 8 of 8 bundles built in \d+\.\d\d s/);
    const manifest = readManifest();
    expect(manifest.entries["services/tools"]!.inputs).toHaveProperty("services/tools/src/main.ts");
    // The workspace packages are bundled in; npm packages are not.
    expect(manifest.entries["services/tools"]!.inputs).toHaveProperty("packages/bus/src/index.ts");
    expect(Object.keys(manifest.entries["services/tools"]!.inputs).some((input) => input.includes("node_modules"))).toBe(false);
  });

  it("build - every import.meta.url of the sources means its source file (only the banner's refers to the bundle)", () => {
    for (const output of Object.values(readManifest().entries).flatMap((entry) => entry.outputs)) {
      const code = readFileSync(join(outdir, output), "utf8");
      expect(code.match(/import\.meta\.(url|dirname|filename)/g), output).toEqual(["import.meta.url"]);
    }
  });

  it("build - a second build keeps what is up to date", async () => {
    const { stdout } = await run(process.execPath, [join(repoRoot, "scripts", "build.mjs"), "--outdir", outdir], { cwd: repoRoot });
    expect(stdout).toMatch(/services\/tools\/main\.js\s+up to date/);
    expect(stdout).toMatch(/build: 0 of 8 bundles built/);
  });

  it("build - an unknown argument is refused with the usage", async () => {
    await expect(run(process.execPath, [join(repoRoot, "scripts", "build.mjs"), "--out", outdir])).rejects.toMatchObject({
      code: 1,
      stderr: expect.stringContaining('unknown argument "--out"; usage: node scripts/build.mjs [--outdir DIR] [--force]'),
    });
  });

  it("build - the bundled CLI prints its help", async () => {
    const { stdout } = await run(process.execPath, [join(outdir, "cli", "main.js"), "--help"], { cwd: repoRoot });
    expect(stdout).toContain("Usage: tack <command>");
    expect(stdout).toContain("run");
  });

  it("build - the bundled `tack run` reaches the gateway without loading zod or @grpc/grpc-js (each ~100 ms of start-up)", async () => {
    // Every module the CLI resolves, as a resolve hook sees it (on stderr). registerHooks runs it on the main thread:
    // the output of module.register's hooks thread may be lost when the process is killed (Node 24).
    const register = join(outdir, "register-hook.mjs");
    writeFileSync(register, 'import { registerHooks } from "node:module";\nregisterHooks({ resolve(specifier, context, next) { const r = next(specifier, context); process.stderr.write(`resolved ${r.url}\\n`); return r; } });\n');
    const gateway = createServer();
    const reached = new Promise<void>((resolve) => gateway.once("connection", (socket) => {
      socket.destroy();
      resolve();
    }));
    await new Promise<void>((resolve) => gateway.listen(0, "127.0.0.1", resolve));
    const { port } = gateway.address() as AddressInfo;
    // Run outside the checkout: a running `tack up`'s up.json above the working directory is read (with zod) on purpose.
    const cwd = mkdtempSync(join(tmpdir(), "tack-run-imports-"));
    const child = spawn(process.execPath, ["--import", register, join(outdir, "cli", "main.js"), "run", "--model", "openai:x", "--workspace", cwd, "hello"], {
      cwd, env: { ...process.env, TACK_GATEWAY_URL: `http://127.0.0.1:${port}`, TACK_API_KEY: "k".repeat(40) }, stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    try {
      await reached;
    } finally {
      child.kill();
      gateway.close();
      rmSync(cwd, { recursive: true, force: true });
    }
    const resolved = stderr.split("\n").filter((line) => line.startsWith("resolved ")).map((line) => line.slice("resolved ".length));
    expect(resolved.some((url) => url.includes("/cli/run-"))).toBe(true);
    expect(resolved.filter((url) => /\/node_modules\/(zod|@grpc\/grpc-js)\//.test(url))).toEqual([]);
  });

  it("build - the bundled tools service starts and lists its tools, with the descriptions it reads next to its sources", async () => {
    const namespace = `t${randomBytes(5).toString("hex")}`;
    const child = spawn(process.execPath, [join(outdir, "services", "tools", "main.js")], {
      cwd: repoRoot,
      env: { ...process.env, NATS_URL, TACK_NAMESPACE: namespace },
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
    const exited = new Promise<number | null>((resolve) => child.on("exit", resolve));
    const bus = await Bus.connect({ url: NATS_URL, namespace, name: "build-test" });
    try {
      let listed: ListToolsResponse | undefined;
      const deadline = Date.now() + 30_000;
      while (!listed) {
        if (child.exitCode !== null) throw new Error(`the bundled tools service exited ${child.exitCode}:\n${stderr}`);
        try {
          listed = await bus.request(ToolsRpc.ListTools, ListToolsRequest.fromPartial({ mode: "standard" }), { timeoutMs: 2_000 });
        } catch (error) {
          if (!(error instanceof TackError) || Date.now() > deadline) throw error;
          await new Promise((resolve) => setTimeout(resolve, 100));
        }
      }
      const bash = listed.tools.find((tool) => tool.name === "bash");
      expect(listed.tools.map((tool) => tool.name)).toEqual(expect.arrayContaining(["read", "write", "edit", "bash", "glob", "grep"]));
      expect(bash?.description).toBe(readFileSync(join(repoRoot, "services", "tools", "src", "tools", "bash.txt"), "utf8").trim());
    } finally {
      child.kill("SIGTERM");
      await exited;
      await removeNamespace(bus.nc, namespace).catch(() => undefined);
      await bus.close();
    }
  });

  it("serviceCommand - runs the bundle only while it is fresh, else the sources through tsx", () => {
    const fresh = serviceCommand("tools", { distDir: outdir, env: {} });
    expect(fresh).toMatchObject({ compiled: true, entry: join(outdir, "services", "tools", "main.js") });
    expect(fresh.args.at(-1)).toBe(join(outdir, "services", "tools", "main.js"));
    expect(hasServiceEntry("tools", { distDir: outdir, env: {} })).toBe(true);

    const source = join(repoRoot, "services", "tools", "src", "main.ts");
    expect(serviceCommand("tools", { distDir: outdir, env: { TACK_DEV: "1" } })).toMatchObject({
      compiled: false, args: ["--import", "tsx", source], entry: source, why: "TACK_DEV=1 runs the TypeScript sources through tsx",
    });
    expect(serviceCommand("tools", { distDir: join(outdir, "nothing-here"), env: {} })).toMatchObject({ compiled: false, entry: source });

    // An input that changed after the build (here: its recorded stamp no longer matches) makes the bundle stale.
    const saved = readFileSync(manifestFile(), "utf8");
    try {
      const manifest = JSON.parse(saved) as { entries: Record<string, { inputs: Record<string, [number, number]> }> };
      manifest.entries["services/tools"]!.inputs["packages/bus/src/index.ts"] = [0, 0];
      writeFileSync(manifestFile(), JSON.stringify(manifest));
      const stale = serviceCommand("tools", { distDir: outdir, env: {} });
      expect(stale).toMatchObject({ compiled: false, args: ["--import", "tsx", source] });
      expect(stale.why).toContain("packages/bus/src/index.ts changed since services/tools was built");
      // The other bundles are unaffected.
      expect(serviceCommand("llm", { distDir: outdir, env: {} }).compiled).toBe(true);
    } finally {
      writeFileSync(manifestFile(), saved);
    }
    expect(compiledEntry("cli", { distDir: outdir, env: {} }).file).toBe(join(outdir, "cli", "main.js"));
    expect(hasServiceEntry("no-such-service", { distDir: outdir, env: {} })).toBe(false);
  });

  it("serviceCommand - a compiled service keeps its compiled code in the checkout's .tack/compile-cache (Node's module compile cache)", () => {
    const fresh = serviceCommand("tools", { distDir: outdir, env: {} });
    expect(fresh.env).toEqual({ NODE_COMPILE_CACHE: join(repoRoot, ".tack", "compile-cache") });
    expect(serviceCommand("tools", { distDir: outdir, env: { TACK_DEV: "1" } }).env).toEqual({});
    // The Node that runs Tack honours it (Node 22 and later; decision 0023).
    const dir = spawnSync(fresh.command, ["-p", "require('node:module').getCompileCacheDir()"], { env: { PATH: process.env.PATH, ...fresh.env }, encoding: "utf8" });
    expect(dirname(dir.stdout.trim())).toBe(join(repoRoot, ".tack", "compile-cache"));
  });
});
