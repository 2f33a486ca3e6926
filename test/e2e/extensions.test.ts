// End to end: skills (and MCP tools, below) through every service process the launcher `tack up`
// starts — gateway, loop, llm, tools, sandbox, skills, mcp — on the machine's NATS JetStream and
// real Docker sandboxes, driven over the HTTP API with a scripted model.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiStack, type EventJson } from "./support/api-stack.js";

let stack: ApiStack;
let home: string;
/** server-everything from npm as one file: the sandbox has node but no network, so the server travels in the workspace. */
let everything: string;
const savedHome = process.env.HOME;

const turnEnds = (n: number) => (e: EventJson[]) => e.filter((x) => x.type === "turn/end").length >= n;
const of = (e: EventJson[], type: string, key: string) => e.filter((x) => x.type === type).map((x) => x[key]!);
const skill = (description: string) => `---\ndescription: ${description}\n---\nSay the word "pineapple" when you are done.\n`;

beforeAll(async () => {
  // The skills service reads the user's roots under HOME; the launcher passes its environment on.
  home = mkdtempSync(join(tmpdir(), "tack-e2e-ext-home-"));
  mkdirSync(join(home, ".claude/skills/user-skill"), { recursive: true });
  writeFileSync(join(home, ".claude/skills/user-skill/SKILL.md"), skill("A skill from the user's ~/.claude/skills."));
  process.env.HOME = home;
  const out = join(home, "everything.mjs");
  await build({
    entryPoints: [fileURLToPath(new URL("../../node_modules/@modelcontextprotocol/server-everything/dist/index.js", import.meta.url))],
    bundle: true, platform: "node", format: "esm", target: "node18", outfile: out, logLevel: "error",
    banner: { js: "import { createRequire } from 'module'; const require = createRequire(import.meta.url);" },
  });
  everything = readFileSync(out, "utf8");
  stack = await ApiStack.launch("extensions");
}, 120_000);

afterAll(async () => {
  process.env.HOME = savedHome;
  await stack?.stop();
  rmSync(home, { recursive: true, force: true });
});

describe("extensions end to end", () => {
  it("skills - the catalog of workspace and user skills reaches the model; the skill tool loads one; /name runs one; a broken SKILL.md is one warning", async () => {
    const ws = stack.workspaceWith("skills", {
      ".claude/skills/release/SKILL.md": skill("Cut a release of this project."),
      ".claude/skills/release/checklist.md": "1. tag\n",
      ".claude/skills/broken/SKILL.md": "---\nname: Not Valid\ndescription: x\n---\n",
    });
    const model = stack.script("skills", [
      { tool_calls: [{ name: "skill", arguments: { name: "release" } }] },
      { content: "released" },
      { content: "ran the user skill" },
    ]);
    const id = await stack.session(ws, model);
    expect((await stack.json("POST", `/v1/sessions/${id}/messages`, { text: "cut a release" })).status).toBe(202);
    let events = await stack.logWhen(id, "first turn/end", turnEnds(1));

    const catalogs = of(events, "skills/catalog", "skillsCatalog");
    expect(catalogs).toHaveLength(1);
    const names = (catalogs[0]!.skills as Array<{ name: string; source: string }>).map((s) => `${s.name}@${s.source}`);
    expect(names).toEqual(expect.arrayContaining(["release@workspace:.claude/skills", "user-skill@user:.claude/skills", "write-skill@bundled"]));
    const warnings = of(events, "skills/warning", "skillsWarning");
    expect(warnings).toHaveLength(1);
    expect(String(warnings[0]!.source)).toMatch(/broken\/SKILL\.md$/);
    const header = of(events, "request/header", "requestHeader")[0]!;
    expect((header.tools as Array<{ name: string }>).map((t) => t.name)).toContain("skill");
    const result = events.find((e) => e.type === "tool/result")!.toolResult!;
    expect(result.isError ?? false).toBe(false);
    expect(String(result.content)).toContain('Say the word "pineapple"');
    expect(String(result.content)).toContain("checklist.md");

    expect((await stack.json("POST", `/v1/sessions/${id}/messages`, { text: "/user-skill now" })).status).toBe(202);
    events = await stack.logWhen(id, "second turn/end", turnEnds(2));
    const invoked = of(events, "skill/invoked", "skillInvoked");
    expect(invoked.map((s) => [s.name, s.arguments, s.source])).toEqual([["user-skill", "now", "user:.claude/skills"]]);
    // Same catalog: no second catalog event, so the prefix of the second turn's request is the first's.
    expect(of(events, "skills/catalog", "skillsCatalog")).toHaveLength(1);
  }, 120_000);

  it("mcp - a workspace's .mcp.json server runs in the sandbox: its tools follow skill in the list; a never-approval tool runs, an ask one waits for a person; the whole result is logged", async () => {
    const ws = stack.workspaceWith("mcp", {
      ".mcp/everything.mjs": everything,
      ".mcp.json": JSON.stringify({ mcpServers: {
        everything: { command: "node", args: ["/workspace/.mcp/everything.mjs", "stdio"], approval: { echo: "never" }, enabled_tools: ["echo", "get-sum", "get-tiny-image"] },
        crashing: { command: "node", args: ["-e", "process.exit(3)"] },
      } }),
    });
    const model = stack.script("mcp", [
      { tool_calls: [{ name: "mcp__everything__echo", arguments: { message: "from the sandbox" } }, { name: "mcp__everything__get-tiny-image", arguments: {} }] },
      { tool_calls: [{ name: "mcp__everything__get-sum", arguments: { a: 2, b: 3 } }] },
      { content: "done" },
    ]);
    const id = await stack.session(ws, model);
    expect((await stack.json("POST", `/v1/sessions/${id}/messages`, { text: "use the tools" })).status).toBe(202);
    // get-tiny-image asks first (approval ask by default); echo has already run.
    let events = await stack.logWhen(id, "approval/asked", (e) => e.some((x) => x.type === "approval/asked"), 120_000);
    const asked = of(events, "approval/asked", "approvalAsked")[0]!;
    expect(asked).toMatchObject({ toolName: "mcp__everything__get-tiny-image", kind: "tool" });
    expect((await stack.json("POST", `/v1/sessions/${id}/approvals/${String(asked.callId)}`, { decision: "allow_once" })).status).toBe(200);
    events = await stack.logWhen(id, "second approval/asked", (e) => e.filter((x) => x.type === "approval/asked").length === 2, 60_000);
    const second = of(events, "approval/asked", "approvalAsked")[1]!;
    expect((await stack.json("POST", `/v1/sessions/${id}/approvals/${String(second.callId)}`, { decision: "reject" })).status).toBe(200);
    events = await stack.logWhen(id, "turn/end", turnEnds(1), 60_000);

    const header = of(events, "request/header", "requestHeader").at(-1)!;
    const names = (header.tools as Array<{ name: string }>).map((t) => t.name);
    const skillAt = names.indexOf("skill");
    expect(skillAt).toBeGreaterThan(0);
    expect(names.slice(skillAt + 1)).toEqual(["mcp__everything__echo", "mcp__everything__get-sum", "mcp__everything__get-tiny-image"]);
    const results = new Map(events.filter((e) => e.type === "tool/result").map((e) => [String(e.toolResult!.callId), e.toolResult!]));
    const calls = events.filter((e) => e.type === "tool/call").map((e) => e.toolCall!);
    const byName = (name: string) => results.get(String(calls.find((c) => c.name === name)?.callId ?? [...results.values()].find((r) => r.name === name)?.callId))!;
    expect(String(byName("mcp__everything__echo").content)).toBe("Echo: from the sandbox");
    expect(String(byName("mcp__everything__get-tiny-image").content)).toMatch(/\[image: image\/png/);
    expect(String(byName("mcp__everything__get-sum").content)).toMatch(/^Rejected by the user/);
    const raw = of(events, "mcp/result", "mcpResult");
    expect(raw.map((r) => r.tool)).toEqual(expect.arrayContaining(["echo", "get-tiny-image"]));
    const image = raw.find((r) => r.tool === "get-tiny-image")!;
    expect(JSON.parse(String(image.rawJson)).content.some((c: { type: string; data?: string }) => c.type === "image" && (c.data ?? "").length > 100)).toBe(true);
    const warnings = of(events, "mcp/warning", "mcpWarning");
    expect(warnings.filter((w) => w.server === "crashing")).toHaveLength(1);
  }, 240_000);
});
