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
