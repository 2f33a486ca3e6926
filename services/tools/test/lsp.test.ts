// The lsp tool against the real thing: a sandbox service on real NATS and Docker, the image's
// node and typescript-language-server, a broker started by the first call inside the container.
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "@tack/testkit";
import { Harness } from "../../sandbox/test/helpers.js";
import { askBroker, lsp } from "../src/lsp/lsp.js";
import { BusSandboxClient } from "../src/sandbox.js";
import type { ToolContext } from "../src/tool.js";

const SESSION = "lsp1";

const SHAPES = `/** A shape with an area. */
export interface Shape {
  name: string;
  area(): number;
}

export function describe(shape: Shape): string {
  return \`\${shape.name}: \${shape.area()}\`;
}
`;

const MAIN = `import { describe, type Shape } from "./shapes.js";

const square: Shape = { name: "square", area: () => 4 };
console.log(describe(square));
export const circle: Shape = { name: "circle", area: () => 3.14 };
console.log(describe(circle));
`;

interface ServerStatus { pid: number; pending: number; restarts: number; dead: string | null }

describe("lsp", () => {
  let h: Harness;
  let workspace: string;
  let ctx: ToolContext;

  const call = (args: Record<string, unknown>) => lsp.execute(lsp.parameters.parse(args), ctx);
  const server = async (): Promise<ServerStatus> => {
    const reply = await askBroker(ctx, { op: "status" });
    if (!reply.ok) throw new Error(reply.error.message);
    const [status] = (reply.result as { servers: ServerStatus[] }).servers;
    if (!status) throw new Error("the broker runs no server");
    return status;
  };
  const sh = (script: string) => h.exec(SESSION, ["bash", "-c", script]);

  beforeAll(async () => {
    h = await Harness.start();
    workspace = await h.workspace();
    await mkdir(join(workspace, "src"));
    await writeFile(join(workspace, "tsconfig.json"), JSON.stringify({ compilerOptions: { strict: true, target: "ES2022", module: "NodeNext" }, include: ["src"] }));
    await writeFile(join(workspace, "src/shapes.ts"), SHAPES);
    await writeFile(join(workspace, "src/main.ts"), MAIN);
    await writeFile(join(workspace, "README.md"), "# shapes\n");
    await h.ensure({ sessionId: SESSION, workspace });
    ctx = {
      sessionId: SESSION, callId: "c1", signal: new AbortController().signal, sandbox: new BusSandboxClient(h.bus),
      mode: "workspace-write", spilled: async () => undefined,
    };
  });
  afterAll(async () => {
    await h.cleanup();
  });

  it("lsp - hover shows the type and docs, the first call starting broker and server in the container", async () => {
    let started = performance.now();
    expect(await call({ operation: "hover", path: "src/main.ts", line: 3, character: 7 })).toBe("```typescript\nconst square: Shape\n```");
    const cold = performance.now() - started;
    // The broker and the server run in the container, not here.
    const processes = await sh("ps -eo args");
    expect(processes.stdout).toMatch(/node \/tmp\/tack-lsp\/broker-[0-9a-f]{16}\.mjs/);
    expect(processes.stdout).toContain("typescript-language-server/lib/cli.mjs --stdio");
    expect(await call({ operation: "hover", path: "/workspace/src/main.ts", line: 1, character: 27 }))
      .toBe("```typescript\n(alias) interface Shape\nimport Shape\n```\nA shape with an area.");
    const warm: number[] = [];
    for (let i = 0; i < 5; i++) {
      started = performance.now();
      await call({ operation: "hover", path: "src/main.ts", line: 3, character: 7 });
      warm.push(performance.now() - started);
    }
    warm.sort((a, b) => a - b);
    // For comparison: the exec round trip alone, and with node's start-up (the client's share).
    const baseline = async (argv: string[]) => {
      const at = performance.now();
      await h.exec(SESSION, argv);
      return Math.round(performance.now() - at);
    };
    const [bare, node] = [await baseline(["true"]), await baseline(["node", "-e", "0"])];
    console.log(`lsp latency: cold first hover ${Math.round(cold)} ms, warm hover median ${Math.round(warm[2]!)} ms (min ${Math.round(warm[0]!)}, max ${Math.round(warm[4]!)}); exec of true ${bare} ms, of node -e 0 ${node} ms`);
  });

  it("lsp - definition jumps to the declaration in another file", async () => {
    expect(await call({ operation: "definition", path: "src/main.ts", line: 4, character: 13 }))
      .toBe("src/shapes.ts:7:17: export function describe(shape: Shape): string {");
  });

  it("lsp - references lists every use across files, the declaration included, sorted", async () => {
    expect(await call({ operation: "references", path: "src/shapes.ts", line: 7, character: 20 })).toBe([
      'src/main.ts:1:10: import { describe, type Shape } from "./shapes.js";',
      "src/main.ts:4:13: console.log(describe(square));",
      "src/main.ts:6:13: console.log(describe(circle));",
      "src/shapes.ts:7:17: export function describe(shape: Shape): string {",
    ].join("\n"));
  });

  it("lsp - document_symbols outlines the file with nesting", async () => {
    expect(await call({ operation: "document_symbols", path: "src/shapes.ts" })).toBe([
      "function describe (line 7)",
      "interface Shape (line 2)",
      "  method area (line 4)",
      "  property name (line 3)",
    ].join("\n"));
  });

  it("lsp - files changed on disk are sent again: open ones as a change, the asked one too", async () => {
    // shapes.ts is opened in the server first; main.ts is the one asked about after the change.
    expect(await call({ operation: "hover", path: "src/shapes.ts", line: 7, character: 17 })).toBe("```typescript\nfunction describe(shape: Shape): string\n```");
    await writeFile(join(workspace, "src/shapes.ts"), SHAPES.replace("describe(shape: Shape): string", "describe(shape: Shape, digits = 2): string"));
    await writeFile(join(workspace, "src/main.ts"), `// moved down a line\n${MAIN}`);
    expect(await call({ operation: "hover", path: "src/main.ts", line: 5, character: 14 }))
      .toBe("```typescript\n(alias) describe(shape: Shape, digits?: number): string\nimport describe\n```");
    await writeFile(join(workspace, "src/shapes.ts"), SHAPES);
    await writeFile(join(workspace, "src/main.ts"), MAIN);
  });

  it("lsp - a language server killed between calls is started again", async () => {
    await call({ operation: "hover", path: "src/main.ts", line: 3, character: 7 });
    const before = await server();
    // argv, not bash -c: pkill -f would match the shell's own command line too.
    expect((await h.exec(SESSION, ["pkill", "-KILL", "-f", "typescript-language-server/lib/cli.mjs"])).exitCode).toBe(0);
    await waitFor("the broker to see its server die", async () => (await server()).dead !== null);
    expect(await call({ operation: "definition", path: "src/main.ts", line: 4, character: 13 }))
      .toBe("src/shapes.ts:7:17: export function describe(shape: Shape): string {");
    const after = await server();
    expect(after).toMatchObject({ dead: null, restarts: before.restarts + 1 });
    expect(after.pid).not.toBe(before.pid);
  });

  it("lsp - a language server that dies under a request is started again and the request replayed", async () => {
    await call({ operation: "hover", path: "src/main.ts", line: 3, character: 7 });
    const before = await server();
    // Stopped, the server takes the request but cannot answer it; killed, it never will.
    await sh(`kill -STOP ${before.pid}`);
    const hover = call({ operation: "hover", path: "src/main.ts", line: 3, character: 7 });
    await waitFor("the hover to be pending in the stopped server", async () => (await server()).pending > 0);
    await sh(`kill -KILL ${before.pid}`);
    expect(await hover).toBe("```typescript\nconst square: Shape\n```");
    const after = await server();
    expect(after).toMatchObject({ dead: null, pending: 0, restarts: before.restarts + 1 });
    expect(after.pid).not.toBe(before.pid);
  });

  it("lsp - a broker that died is started again by the next call (its socket left behind)", async () => {
    await call({ operation: "hover", path: "src/main.ts", line: 3, character: 7 });
    const brokers = async () => (await h.exec(SESSION, ["pgrep", "-f", "^node /tmp/tack-lsp/broker-"])).stdout.trim().split("\n").filter(Boolean);
    const [old] = await brokers();
    await h.exec(SESSION, ["kill", "-KILL", old!]);
    // Under runc its socket file stays (gVisor removes it): the client must not take that for a live broker.
    expect(await call({ operation: "hover", path: "src/main.ts", line: 3, character: 7 })).toBe("```typescript\nconst square: Shape\n```");
    const now = await brokers();
    expect(now).toHaveLength(1);
    expect(now[0]).not.toBe(old);
    // The dead broker's server saw its input close and went too.
    await waitFor("one language server left", async () => (await h.exec(SESSION, ["pgrep", "-c", "-f", "typescript-language-server/lib/cli.mjs"])).stdout === "1\n");
  });

  it("lsp - calls racing to start the broker share one", async () => {
    const session = "lsp2";
    await h.ensure({ sessionId: session, workspace });
    const other = { ...ctx, sessionId: session };
    const hovers = await Promise.all([1, 2, 3].map(() => lsp.execute({ operation: "hover", path: "src/main.ts", line: 3, character: 7 }, other)));
    expect(hovers).toEqual(Array(3).fill("```typescript\nconst square: Shape\n```"));
    const processes = (await h.exec(session, ["ps", "-eo", "args"])).stdout.split("\n");
    expect(processes.filter((line) => line.startsWith("node /tmp/tack-lsp/broker-"))).toHaveLength(1);
    expect(processes.filter((line) => line.includes("typescript-language-server/lib/cli.mjs"))).toHaveLength(1);
  });

  it("lsp - references are capped at 100 locations, saying how many were left out", async () => {
    const uses = Array.from({ length: 150 }, (_, i) => `total += unit * ${i};`).join("\n");
    await writeFile(join(workspace, "src/many.ts"), `export const unit = 1;\nlet total = 0;\n${uses}\n`);
    const result = await call({ operation: "references", path: "src/many.ts", line: 1, character: 14 });
    const lines = result.split("\n");
    expect(lines[0]).toBe("src/many.ts:1:14: export const unit = 1;");
    expect(lines[99]).toBe("src/many.ts:101:10: total += unit * 98;");
    expect(lines.slice(0, 100).every((line) => line.startsWith("src/many.ts:"))).toBe(true);
    expect(lines.slice(100)).toEqual(["", "(showing 100 of 151 references; grep can list them all)"]);
  });

  it("lsp - caps a listing at 16,000 characters", async () => {
    const declarations = Array.from({ length: 400 }, (_, i) => `export const value_with_a_rather_long_name_${i} = ${i};`).join("\n");
    await writeFile(join(workspace, "src/wide.ts"), `${declarations}\n`);
    const result = await call({ operation: "document_symbols", path: "src/wide.ts" });
    expect(result.length).toBeLessThanOrEqual(16_100);
    const shown = result.split("\n").filter((line) => line.startsWith("constant "));
    expect(shown.length).toBeGreaterThan(100);
    expect(result.endsWith(`\n\n(showing ${shown.length} of 400 symbols; read the file for the rest)`)).toBe(true);
  });

  it("lsp - a server that cannot start is reported with its output, one that hangs as a timeout", async () => {
    const request = { op: "hover", file: "/workspace/src/main.ts", line: 0, character: 0, languageId: "typescript" };
    const failing = { id: "failing", name: "failing-server", command: ["node", "-e", "console.error('no project here'); process.exit(3)"] };
    expect(await askBroker(ctx, { ...request, root: "/workspace", server: failing, timeoutMs: 20_000 })).toEqual({
      ok: false,
      error: { kind: "server_failed", message: "failing-server exited with code 3 twice in a row", stderr: "no project here\n" },
    });
    const hanging = { id: "hanging", name: "hanging-server", command: ["sleep", "infinity"] };
    expect(await askBroker(ctx, { ...request, root: "/workspace", server: hanging, timeoutMs: 1_000 })).toEqual({
      ok: false,
      error: { kind: "timeout", message: "hanging-server did not finish starting within 1 s" },
    });
  });

  it("lsp - refuses what it cannot answer, saying what to do", async () => {
    await expect(call({ operation: "hover", path: "README.md", line: 1, character: 3 }))
      .rejects.toThrow("lsp has no language server for README.md; it supports .ts .mts .cts .tsx .js .mjs .cjs .jsx files. Use grep for other files.");
    await expect(call({ operation: "hover", path: "src/gone.ts", line: 1, character: 1 })).rejects.toThrow("File not found: src/gone.ts");
    await expect(call({ operation: "hover", path: "src/main.ts", line: 99, character: 1 }))
      .rejects.toThrow("In src/main.ts, line 99 is past the end of the file (7 lines); give the 1-based line and character as read shows them");
    await expect(call({ operation: "hover", path: "src/main.ts", line: 1, character: 99 }))
      .rejects.toThrow("character 99 is past the end of line 1 (51 characters)");
    await expect(call({ operation: "references", path: "src/main.ts" })).rejects.toThrow("references needs line and character");
    expect(await call({ operation: "hover", path: "src/main.ts", line: 2, character: 1 })).toBe("No hover information at src/main.ts:2:1");
  });
});
