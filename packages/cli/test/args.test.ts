import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { freePort } from "../src/nats-server.js";
import { DEFAULT_MODEL, MAIN_USAGE, parseCommand } from "../src/args.js";

const BIN = fileURLToPath(new URL("../bin/tack.js", import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), "tack-cli-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** Runs the real `tack` executable with only the given environment variables of Tack's set. */
function tack(args: string[], env: Record<string, string> = {}) {
  const base = Object.fromEntries(Object.entries(process.env).filter(([key]) => !key.startsWith("TACK_") && key !== "NATS_URL"));
  const result = spawnSync(process.execPath, [BIN, ...args], { cwd: scratch, env: { ...base, ...env }, encoding: "utf8", timeout: 30_000 });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

const usageFailure = (argv: string[]) => {
  try {
    parseCommand(argv);
  } catch (error) {
    return error as Error & { code: string; details: Record<string, string> };
  }
  throw new Error(`parseCommand(${JSON.stringify(argv)}) did not fail`);
};

describe("args", () => {
  it("args - parses every command with its options", () => {
    expect(parseCommand(["run", "list the files", "--model", "scripted:hello.json", "--workspace", "w", "--json"]))
      .toEqual({ name: "run", task: "list the files", model: "scripted:hello.json", workspace: "w", json: true });
    expect(parseCommand(["run", "fix it"])).toEqual({ name: "run", task: "fix it", model: undefined, workspace: undefined, json: false });
    expect(parseCommand(["up", "--demo", "--port", "7801"])).toEqual({ name: "up", demo: true, port: 7801, replicas: {} });
    expect(parseCommand(["up"])).toEqual({ name: "up", demo: false, port: undefined, replicas: {} });
    expect(parseCommand(["down"])).toEqual({ name: "down" });
    expect(parseCommand(["events", "s1", "--follow"])).toEqual({ name: "events", session: "s1", json: false, follow: true });
    expect(DEFAULT_MODEL).toBe("deepseek:deepseek-chat");
  });

  it("args - --help on every command and no command show usage", () => {
    expect(parseCommand([])).toEqual({ name: "help", text: MAIN_USAGE });
    expect(parseCommand(["--help"])).toEqual({ name: "help", text: MAIN_USAGE });
    for (const command of ["up", "down", "run", "events"]) {
      const help = parseCommand([command, "--help"]);
      expect(help.name).toBe("help");
      expect(help.name === "help" && help.text).toMatch(new RegExp(`^Usage: tack ${command}`));
      expect(parseCommand(["help", command])).toEqual(help);
    }
  });

  it("args - bad command lines fail with a message that names the problem", () => {
    const cases: Array<[string[], RegExp]> = [
      [["deploy"], /^unknown command "deploy"$/],
      [["--verbose"], /^unknown option --verbose; options go after the command$/],
      [["run", "x", "--fast"], /^unknown option --fast for tack run$/],
      [["up", "-x"], /^unknown option -x for tack up$/],
      [["run"], /^missing the task: tack run "<task>"$/],
      [["run", "  "], /^missing the task/],
      [["run", "list", "files"], /unexpected arguments: "files" \(quote the task as one argument\)/],
      [["run", "x", "--model"], /^option --model of tack run needs a value$/],
      [["run", "x", "--json=yes"], /^option --json of tack run takes no value$/],
      [["run", "x", "--model", "gpt4"], /is not PROVIDER:MODEL/],
      [["up", "--port", "http"], /^--port "http" is not a port number/],
      [["events"], /^missing the session id/],
      [["help", "deploy"], /^unknown command "deploy"$/],
    ];
    for (const [argv, message] of cases) {
      const error = usageFailure(argv);
      expect(error.code, argv.join(" ")).toBe("cli.usage");
      expect(error.message, argv.join(" ")).toMatch(message);
    }
    expect(usageFailure(["run", "x", "--fast"]).details.usage).toBe('Usage: tack run "<task>" [--model PROVIDER:MODEL] [--workspace DIR] [--json]\nRun `tack run --help` for its options.');
  });
});

describe("args of tack mcp and tack skills", () => {
  it("args - tack mcp add takes a command after --, a URL or an npm package, with repeatable --env/--header", () => {
    expect(parseCommand(["mcp", "add", "fs", "--env", "A=1", "--env", "B=x=y", "--scope", "workspace", "--", "npx", "-y", "server-fs", "--root", "/w"])).toEqual({
      name: "mcp", action: "add", server: "fs", target: { kind: "command", command: "npx", args: ["-y", "server-fs", "--root", "/w"] },
      env: { A: "1", B: "x=y" }, headers: {}, scope: "workspace", approval: undefined, force: false,
    });
    expect(parseCommand(["mcp", "add", "web", "https://h.example/mcp", "--header", "Authorization: Bearer t", "--approval", "never", "--force"])).toEqual({
      name: "mcp", action: "add", server: "web", target: { kind: "url", url: "https://h.example/mcp" },
      env: {}, headers: { Authorization: "Bearer t" }, scope: "user", approval: "never", force: true,
    });
    expect(parseCommand(["mcp", "add", "mem", "@modelcontextprotocol/server-memory"])).toMatchObject({ target: { kind: "package", package: "@modelcontextprotocol/server-memory" }, scope: "user" });
    expect(parseCommand(["mcp", "remove", "mem", "--scope", "workspace"])).toEqual({ name: "mcp", action: "remove", server: "mem", scope: "workspace" });
    expect(parseCommand(["mcp", "import", "codex", "--force"])).toEqual({ name: "mcp", action: "import", from: "codex", scope: "user", force: true });
    expect(parseCommand(["mcp", "list", "--workspace", "w", "--json"])).toEqual({ name: "mcp", action: "list", workspace: "w", json: true });
    expect(parseCommand(["skills", "list"])).toEqual({ name: "skills", action: "list", workspace: undefined, json: false });
    expect(parseCommand(["skills", "add", "https://g.example/s.git", "--scope", "workspace", "--name", "pdf", "--force"])).toEqual({
      name: "skills", action: "add", source: "https://g.example/s.git", scope: "workspace", skill: "pdf", force: true,
    });
  });

  it("args - help of tack mcp, tack skills and each of their commands", () => {
    for (const [argv, first] of [
      [["mcp"], "Usage: tack mcp <add|remove|import|list>"], [["mcp", "--help"], "Usage: tack mcp <add|remove|import|list>"],
      [["skills"], "Usage: tack skills <list|add>"], [["help", "skills"], "Usage: tack skills <list|add>"],
      [["mcp", "add", "--help"], "Usage: tack mcp add NAME [options] -- COMMAND [ARGS...]"], [["help", "mcp", "add"], "Usage: tack mcp add NAME [options] -- COMMAND [ARGS...]"],
      [["mcp", "remove", "-h"], "Usage: tack mcp remove NAME"], [["mcp", "import", "--help"], "Usage: tack mcp import claude-desktop|codex|FILE"],
      [["mcp", "list", "--help"], "Usage: tack mcp list"], [["skills", "list", "--help"], "Usage: tack skills list"], [["skills", "add", "--help"], "Usage: tack skills add SOURCE"],
    ] as Array<[string[], string]>) {
      const help = parseCommand(argv);
      expect(help.name === "help" && help.text.split("\n")[0]!.startsWith(first), `${argv.join(" ")}: ${JSON.stringify(help)}`).toBe(true);
    }
    expect(MAIN_USAGE).toMatch(/\n {2}mcp {6}add, remove, import and list MCP servers\n {2}skills {3}list skills/);
  });

  it("args - bad tack mcp and tack skills command lines name the problem and the subcommand's usage", () => {
    const cases: Array<[string[], string, string]> = [
      [["mcp", "ls"], 'unknown command "mcp ls"; tack mcp has add, remove, import, list', "mcp"],
      [["mcp", "--json"], "tack mcp needs a command first (add, remove, import, list), then options", "mcp"],
      [["mcp", "add"], "missing the server's name: tack mcp add NAME -- COMMAND [ARGS...] (or NAME URL, or NAME NPM-PACKAGE)", "mcp add"],
      [["mcp", "add", "x", "--"], "missing the command after --: tack mcp add x -- COMMAND [ARGS...]", "mcp add"],
      [["mcp", "add", "x", "./server.js"], '"./server.js" is neither a URL (http:// or https://) nor an npm package name; to run a command, put it after --: tack mcp add x -- COMMAND [ARGS...]', "mcp add"],
      [["mcp", "add", "x", "node", "server.js"], 'tack mcp add got unexpected arguments: "server.js" (a server\'s command line goes after --)', "mcp add"],
      [["mcp", "add", "x", "--env", "1A=b", "--", "c"], '--env "1A=b" is not K=V with K a variable name, e.g. --env API_URL=http://127.0.0.1:9', "mcp add"],
      [["mcp", "add", "x", "--env", "A=1", "--env", "A=2", "--", "c"], "--env A is given twice", "mcp add"],
      [["mcp", "add", "x", "https://h.example", "--env", "A=1"], "--env sets the environment of a stdio server; an HTTP server (a URL) gets --header instead", "mcp add"],
      [["mcp", "add", "x", "--header", "A: b", "--", "c"], "--header is sent to an HTTP server (a URL); a stdio server gets --env instead", "mcp add"],
      [["mcp", "add", "x", "--scope", "project", "--", "c"], '--scope "project" is not one of user, workspace', "mcp add"],
      [["mcp", "add", "x", "--approval", "always", "--", "c"], '--approval "always" is not one of ask, never', "mcp add"],
      [["mcp", "import"], "missing what to import: claude-desktop, codex or a FILE (.mcp.json, claude_desktop_config.json, config.toml)", "mcp import"],
      [["mcp", "list", "--all"], "unknown option --all for tack mcp list", "mcp list"],
      [["skills", "add"], "missing the source: tack skills add GIT-URL | NPM-PACKAGE | ./FOLDER", "skills add"],
      [["skills", "add", "x", "--name", "Bad_Name"], '--name "Bad_Name" is not a skill name: 1-64 lowercase letters, digits or single hyphens between them (e.g. pdf-forms)', "skills add"],
      [["skills", "remove", "x"], 'unknown command "skills remove"; tack skills has list, add', "skills"],
    ];
    for (const [argv, message, usage] of cases) {
      const error = usageFailure(argv);
      expect(error.code, argv.join(" ")).toBe("cli.usage");
      expect(error.message, argv.join(" ")).toBe(message);
      expect(error.details.usage, argv.join(" ")).toMatch(new RegExp(`^Usage: tack ${usage} [^\n]*\nRun \`tack ${usage} --help\` for its options\\.$`));
    }
  });
});

describe("cli", () => {
  it("cli - exit code 2 with the message and usage for a bad command line", () => {
    const unknown = tack(["deploy"]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toBe(`tack: unknown command "deploy"\n\n${MAIN_USAGE}\n`);
    const flag = tack(["run", "x", "--fast"]);
    expect(flag.code).toBe(2);
    expect(flag.stderr).toMatch(/^tack: unknown option --fast for tack run\n\nUsage: tack run/);
  });

  it("cli - a missing scripted file is reported before the gateway is looked for", () => {
    const result = tack(["run", "hi", "--model", "scripted:missing.json"]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(`tack: the script ${join(scratch, "missing.json")} of --model scripted:missing.json does not exist`);
    const workspace = tack(["run", "hi", "--workspace", "nowhere"]);
    expect(workspace.code).toBe(2);
    expect(workspace.stderr).toContain(`tack: the workspace ${join(scratch, "nowhere")} is not an existing directory`);
  });

  it("cli - exit code 1 with one line when the gateway cannot be reached", async () => {
    const port = await freePort();
    const result = tack(["run", "hi"], { TACK_GATEWAY_URL: `http://127.0.0.1:${port}`, TACK_API_KEY: "k" });
    expect(result.code).toBe(1);
    expect(result.stderr).toBe(`tack: cannot reach the gateway at http://127.0.0.1:${port} (ECONNREFUSED); is Tack running? Start it with \`make up\` (or \`tack up\`)\n`);
    const noKey = tack(["events", "s1"], { TACK_GATEWAY_URL: `http://127.0.0.1:${port}` });
    expect(noKey.code).toBe(1);
    expect(noKey.stderr).toBe("tack: TACK_GATEWAY_URL is set but TACK_API_KEY is not; set TACK_API_KEY to the gateway's API key\n");
  });

  it("cli - --help prints usage on stdout with exit code 0", () => {
    const result = tack(["events", "--help"]);
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(/^Usage: tack events <session> \[--json\] \[--follow\]/);
  });
});
