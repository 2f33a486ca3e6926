// Context economy numbers (issue 4): the size of the first request of the standard mode, the
// prefix-cache hit ratio of a 5-step task under an emulated 64-token-block provider cache, and
// what that task costs at DeepSeek V4 flash list prices. Runs through the real loop, llm, tools
// and sandbox services already started by bench/run.ts.
import { chownSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Bus, LoopRpc } from "@tack/bus";
import { readAll } from "@tack/log";
import { priceFor } from "@tack/llm-service";
import { CreateSessionRequest, SubmitMessageRequest, type Usage } from "@tack/proto";
import { startSkillsService } from "@tack/skills-service";
import { build } from "esbuild";
import { startMcpService } from "../services/mcp/src/index.js";
import { writeSampleSkills } from "./fixtures/skills.js";

/** A realistic small coding task: read, search, edit, test, answer. */
const TASK = [
  { reasoning: "Look at the function first.", content: "Reading the module.", tool_calls: [{ name: "read", arguments: { path: "src/slug.py" } }] },
  { content: "Checking who calls it.", tool_calls: [{ name: "grep", arguments: { pattern: "slugify", path: "." } }] },
  { content: "Fixing the separator handling.", tool_calls: [{ name: "edit", arguments: { path: "src/slug.py", old_string: "text.split(' ')", new_string: "text.split()" } }] },
  { content: "Running the tests.", tool_calls: [{ name: "bash", arguments: { command: "python3 -m unittest discover -s tests -q 2>&1 | tail -3" } }] },
  { content: "Fixed: `slugify` now splits on any whitespace, so repeated spaces no longer produce empty parts. The tests pass." },
];

/** server-everything from npm as one file for the workspace's .mcp.json (the sandbox has node, no network). */
async function everythingBundle(out: string): Promise<void> {
  await build({
    entryPoints: [join(import.meta.dirname, "../node_modules/@modelcontextprotocol/server-everything/dist/index.js")], bundle: true, platform: "node", format: "esm",
    target: "node18", outfile: out, logLevel: "error", banner: { js: "import { createRequire } from 'module'; const require = createRequire(import.meta.url);" },
  });
}

/** One MCP server in the workspace's .mcp.json: server-everything, its tools in the model's list. */
function withMcpServer(dir: string, bundle: string): void {
  mkdirSync(join(dir, ".mcp"), { recursive: true });
  writeFileSync(join(dir, ".mcp/everything.mjs"), readFileSync(bundle));
  writeFileSync(join(dir, ".mcp.json"), JSON.stringify({ mcpServers: { everything: { command: "node", args: ["/workspace/.mcp/everything.mjs", "stdio"] } } }));
  if (process.getuid?.() === 0) for (const p of [".mcp", ".mcp/everything.mjs", ".mcp.json"]) chownSync(join(dir, p), 1000, 1000);
}

function project(dir: string): void {
  mkdirSync(join(dir, "src"), { recursive: true });
  mkdirSync(join(dir, "tests"), { recursive: true });
  writeFileSync(join(dir, "src/slug.py"), 'def slugify(text):\n    """Lowercase words joined by dashes."""\n    return "-".join(w.lower() for w in text.split(\' \') if w)\n');
  writeFileSync(join(dir, "tests/test_slug.py"), 'import sys, unittest\nsys.path.insert(0, "src")\nfrom slug import slugify\n\nclass T(unittest.TestCase):\n    def test_spaces(self):\n        self.assertEqual(slugify("Hello   World"), "hello-world")\n');
  if (process.getuid?.() === 0) {
    for (const p of ["", "src", "tests", "src/slug.py", "tests/test_slug.py"]) chownSync(join(dir, p), 1000, 1000);
  }
}

async function runTask(bus: Bus, model: string, workspace: string, task: string): Promise<Usage[]> {
  const { sessionId } = await bus.request(LoopRpc.CreateSession, CreateSessionRequest.fromPartial({ tenant: "local", model, workspace }));
  await bus.request(LoopRpc.SubmitMessage, SubmitMessageRequest.fromPartial({ tenant: "local", sessionId, text: task }));
  for (;;) {
    const events = await readAll(bus.nc, bus.names, { tenant: "local", sessionId });
    const end = events.find((e) => e.payload?.$case === "turnEnd");
    if (end?.payload?.$case === "turnEnd") {
      if (end.payload.value.reason !== "completed") throw new Error(`context bench task ended with ${end.payload.value.reason}`);
      return events.flatMap((e) => (e.payload?.$case === "usage" && e.payload.value.usage ? [e.payload.value.usage] : []));
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

const ratio = (usages: Usage[]) => {
  const hit = usages.reduce((s, u) => s + u.inputHitTokens, 0);
  const all = usages.reduce((s, u) => s + u.inputHitTokens + u.inputMissTokens, 0);
  return Math.round((hit / all) * 1000) / 1000;
};

/**
 * Runs the 5-step task twice (cold cache, then warm: the harness prefix is already cached) and
 * reports the numbers. The task's script goes into `scriptDir`, one of the llm service's script directories.
 */
export async function benchContext(options: { natsUrl: string; namespace: string; scriptDir: string }): Promise<Record<string, unknown>> {
  const work = mkdtempSync(join(tmpdir(), "tack-bench-context-"));
  const bus = await Bus.connect({ url: options.natsUrl, namespace: options.namespace, name: "bench-context" });
  try {
    const script = join(options.scriptDir, "context-task.json");
    writeFileSync(script, JSON.stringify({ cache: { block_tokens: 64 }, replies: TASK }));
    const cold = join(work, "cold");
    const warm = join(work, "warm");
    project(cold);
    project(warm);
    const coldUsage = await runTask(bus, `scripted:${script}`, cold, "slugify breaks on repeated spaces; fix it and run the tests");
    // Another task text: only the harness prefix (system prompt + tools) is shared with the first run.
    const warmUsage = await runTask(bus, `scripted:${script}`, warm, "Several spaces between words make slugify misbehave. Please repair it and check with the test suite.");
    // The same task with 20 sample skills (operator root) and the bundled one in the catalog ...
    const skillsRoot = join(work, "skills");
    writeSampleSkills(skillsRoot);
    const skills = await startSkillsService({ natsUrl: options.natsUrl, namespace: options.namespace, operatorRoots: [skillsRoot], home: join(work, "home") });
    let skillsCold: Usage[];
    let extCold: Usage[];
    let extWarm: Usage[];
    try {
      const only = join(work, "skills-cold");
      project(only);
      skillsCold = await runTask(bus, `scripted:${script}`, only, "slugify breaks on repeated spaces; fix it and run the tests");
      // ... and with one MCP server too (server-everything in the session's sandbox, its 13 tools in the list).
      const bundle = join(work, "everything.mjs");
      await everythingBundle(bundle);
      const mcp = await startMcpService({ natsUrl: options.natsUrl, namespace: options.namespace, servers: {}, home: null });
      try {
        const [a, b] = [join(work, "ext-cold"), join(work, "ext-warm")];
        project(a);
        project(b);
        withMcpServer(a, bundle);
        withMcpServer(b, bundle);
        extCold = await runTask(bus, `scripted:${script}`, a, "slugify breaks on repeated spaces; fix it and run the tests");
        extWarm = await runTask(bus, `scripted:${script}`, b, "Several spaces between words make slugify misbehave. Please repair it and check with the test suite.");
      } finally {
        await mcp.stop();
      }
    } finally {
      await skills.stop();
    }
    // A fixed off-peak and peak instant make the cost repeatable (DeepSeek prices by time of day).
    const cost = (at: string) => Math.round(warmUsage.reduce((s, u) => s + priceFor("deepseek:deepseek-v4-flash", u, new Date(at)).costUsd, 0) * 1e6) / 1e6;
    return {
      first_request_tokens: coldUsage[0]!.inputMissTokens + coldUsage[0]!.inputHitTokens,
      first_request_tokens_definition: "standard mode, no skills: system prompt + every standard tool's schema + the task, DeepSeek V3 tokenizer on the DeepSeek request body",
      cache_hit_ratio: ratio(warmUsage),
      cache_hit_ratio_cold: ratio(coldUsage),
      cache_hit_ratio_definition: "hit / all input tokens over the 5 steps, 64-token blocks; `cache_hit_ratio` with the harness prefix already cached by an earlier session (as a provider's shared cache is), `_cold` with an empty cache",
      first_request_tokens_with_skills: skillsCold[0]!.inputMissTokens + skillsCold[0]!.inputHitTokens,
      first_request_tokens_with_skills_and_mcp: extCold[0]!.inputMissTokens + extCold[0]!.inputHitTokens,
      first_request_tokens_with_skills_definition: "standard mode with the skills service: 20 sample skills (bench/fixtures/skills.ts) + the bundled write-skill in the skills/catalog message, plus the skill tool",
      cache_hit_ratio_with_extensions: ratio(extWarm),
      cache_hit_ratio_with_extensions_cold: ratio(extCold),
      cache_hit_ratio_with_extensions_definition: "as cache_hit_ratio, with the 21-skill catalog in the conversation, the skill tool and one MCP server's tools (server-everything, in the session's sandbox) in the list",
      cost_per_task_usd: { off_peak: cost("2026-12-02T12:00:00Z"), peak: cost("2026-12-02T02:00:00Z"), model: "deepseek:deepseek-v4-flash" },
      task_steps: warmUsage.length,
    };
  } finally {
    await bus.close();
    rmSync(work, { recursive: true, force: true });
  }
}
