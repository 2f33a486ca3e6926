import { CallToolRequest, CallToolResponse, type DefinedTool } from "@tack/proto";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { callTool, listTools } from "../src/registry.js";
import { makeWorkspace, type Workspace } from "./support/call.js";
import { ToolsOverBus } from "./support/over-bus.js";

let ws: Workspace;
beforeEach(async () => {
  ws = await makeWorkspace();
});
afterEach(async () => {
  await ws.remove();
});

function call(name: string, args: unknown, defined: DefinedTool[] = [], sessionMode = "creator"): Promise<CallToolResponse> {
  return callTool(CallToolRequest.fromPartial({
    sessionId: "s1", tenant: "t1", callId: "call-1", name, arguments: JSON.stringify(args), workspace: ws.root,
    sandboxMode: "workspace-write", attempt: 1, firstAttemptAtMs: Date.now(), sessionMode, defined: { tools: defined },
  }), { sandbox: ws.sandbox, spills: { get: async () => undefined }, signal: new AbortController().signal });
}

const WORDS = {
  name: "count_words", description: "Count the words of a text", language: "python3",
  parameters: { type: "object", properties: { text: { type: "string" } }, required: ["text"], additionalProperties: false },
  code: "import json, sys\nargs = json.load(sys.stdin)\nprint(len(args['text'].split()))",
};

/** What define_tool answers with for `args`: the definition the loop logs. */
async function define(args: typeof WORDS): Promise<DefinedTool> {
  const result = await call("define_tool", args);
  expect(result).toMatchObject({ isError: false, content: `Defined tool ${args.name} (${args.language}); call it from your next step.` });
  return result.defined!;
}

describe("creator mode", () => {
  it("creator - lists every standard tool, then composition and define_tool, then the session's definitions", async () => {
    const standard = listTools("standard").map((t) => t.name);
    expect(listTools("creator").map((t) => t.name)).toEqual([...standard, "composition", "define_tool"]);
    const defined = await define(WORDS);
    const listed = listTools("creator", { tools: [defined] }).at(-1)!;
    expect(listed).toEqual({
      name: "count_words", description: "Count the words of a text", parametersJson: JSON.stringify(WORDS.parameters),
      deniable: ["writes", "network"], operationArgument: "", handler: "", approval: "", hookAliases: [], pathIsFile: false, writesPath: false, sessionOperation: "",
    });
    // Definitions are creator mode's: another mode lists its own tools only.
    expect(listTools("standard", { tools: [defined] }).map((t) => t.name)).toEqual(standard);
  });

  it("creator - define_tool answers with the definition and a defined tool runs its script with the arguments on stdin", async () => {
    const defined = await define(WORDS);
    expect(defined).toEqual({ name: "count_words", description: WORDS.description, parametersJson: JSON.stringify(WORDS.parameters), language: "python3", code: WORDS.code });
    expect(await call("count_words", { text: "one two  three" }, [defined])).toMatchObject({ isError: false, content: "3\nexit code: 0", defined: undefined });
    expect(ws.sandbox.executed.at(-1)!.argv).toEqual(["python3", "-c", WORDS.code]);
    // Its arguments are checked against its schema, as any tool's.
    expect(await call("count_words", { text: 3 }, [defined])).toMatchObject({ isError: true, content: "Invalid arguments for count_words: text: Invalid input: expected string, received number" });
    expect(await call("count_words", { text: "a", extra: 1 }, [defined])).toMatchObject({ isError: true, content: expect.stringMatching(/^Invalid arguments for count_words: arguments: Unrecognized key/) });
  });

  it("creator - the last definition of a name wins; a failing script is an error result with its output", async () => {
    const first = await define(WORDS);
    const second = await define({ ...WORDS, language: "bash", code: 'cat; echo " <- args" >&2; exit 4' });
    const result = await call("count_words", { text: "x" }, [first, second]);
    expect(result).toMatchObject({ isError: true, content: '{"text":"x"}\nstderr:\n <- args\nexit code: 4' });
    expect(listTools("creator", { tools: [first, second] }).filter((t) => t.name === "count_words")).toHaveLength(1);
  });

  it("creator - define_tool refuses bad definitions, and then answers with none", async () => {
    const bad = async (args: Record<string, unknown>, message: string | RegExp) => {
      const result = await call("define_tool", { ...WORDS, ...args });
      expect(result.isError).toBe(true);
      expect(result.content).toMatch(message);
      expect(result.defined).toBeUndefined();
    };
    await bad({ name: "bash" }, "bash is a built-in tool; choose another name");
    await bad({ name: "run_code" }, "run_code is a built-in tool; choose another name");
    await bad({ name: "Count Words" }, /^Invalid arguments for define_tool: name: must be lowercase letters/);
    await bad({ parameters: { type: "string" } }, 'parameters of count_words must be an object schema ({"type": "object", "properties": {...}})');
    await bad({ parameters: { type: "object", properties: { n: { type: "decimal" } } } }, /^parameters of count_words are not a JSON Schema this service can check: /);
    await bad({ language: "ruby" }, /^Invalid arguments for define_tool: language: /);
  });

  it("creator - a definition is callable only in creator mode", async () => {
    const defined = await define(WORDS);
    await expect(call("count_words", { text: "a" }, [defined], "standard")).rejects.toMatchObject({ code: "tools.unknown_tool" });
  });
});

// Over the bus with the real sandbox service: discovery of what runs, and a defined tool run in the container.
describe("creator mode over the bus", () => {
  let s: ToolsOverBus;
  beforeAll(async () => {
    s = await ToolsOverBus.start({ mode: "creator", sessionId: "k1" });
  });
  afterAll(() => s?.stop());
  const request = (name: string, args: unknown, defined: DefinedTool[] = []) => s.call(name, args, { defined: { tools: defined } });

  it("creator over the bus - composition shows the services that run, the modes' tools and the session's definitions", async () => {
    const defined = (await request("define_tool", WORDS)).defined!;
    const result = await request("composition", {}, [defined]);
    expect(result.isError).toBe(false);
    expect(result.content).toContain("services (NATS micro discovery, this namespace):");
    // Names and counts only: no host name, version, replica id or runtime (services/tools/test/composition.test.ts).
    expect(result.content).toMatch(/\n {2}sandbox: 1 instance\n/);
    expect(result.content).toMatch(/\n {2}tools: 1 instance\n/);
    expect(result.content).not.toMatch(/\n {2}(loop|llm|gateway):/);
    expect(result.content).toContain("\n  minimal: shell, editor\n");
    expect(result.content).toMatch(/\n {2}creator: read, write, .*, composition, define_tool\n/);
    expect(result.content.endsWith("defined in this session: count_words (python3)")).toBe(true);
  });

  it("creator over the bus - tools.list carries the definitions; a defined python3 tool runs in the session's container", async () => {
    const defined = (await request("define_tool", { ...WORDS, code: "import json, sys, platform\nargs = json.load(sys.stdin)\nprint(len(args['text'].split()), open('/etc/debian_version').read().strip())" })).defined!;
    const listed = await s.list({ defined: { tools: [defined] } });
    expect(listed.tools.at(-1)!.name).toBe("count_words");
    expect((await request("count_words", { text: "a b c d" }, [defined])).content).toMatch(/^4 12\.\d+\nexit code: 0$/);
  });
});
