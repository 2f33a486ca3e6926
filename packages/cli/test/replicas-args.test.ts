// `tack up --replicas` and `tack status` on the command line: what parses, and the message for what does not.
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { MAIN_USAGE, parseCommand, parseReplicas } from "../src/args.js";

const BIN = fileURLToPath(new URL("../bin/tack.js", import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), "tack-replicas-args-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

const failure = (run: () => unknown) => {
  try {
    run();
  } catch (error) {
    return error as Error & { code: string; details: Record<string, string> };
  }
  throw new Error("did not fail");
};

describe("replicas args", () => {
  it("replicas-args - --replicas names processes per service; status takes --json", () => {
    expect(parseCommand(["up", "--replicas", "tools=3,loop=2,sandbox=2,llm=2"])).toEqual({ name: "up", demo: false, port: undefined, replicas: { tools: 3, loop: 2, sandbox: 2, llm: 2 } });
    expect(parseReplicas(" tools = 1 , gateway=1")).toEqual({ tools: 1, gateway: 1 });
    expect(parseReplicas("tools=32")).toEqual({ tools: 32 });
    expect(parseReplicas("skills=2,mcp=3")).toEqual({ skills: 2, mcp: 3 });
    expect(parseCommand(["status"])).toEqual({ name: "status", json: false });
    expect(parseCommand(["status", "--json"])).toEqual({ name: "status", json: true });
    const help = parseCommand(["status", "--help"]);
    expect(help.name === "help" && help.text).toMatch(/^Usage: tack status \[--json\]/);
    expect(parseCommand(["help", "up"]).name === "help" && (parseCommand(["help", "up"]) as { text: string }).text).toContain("--replicas LIST");
    expect(MAIN_USAGE).toMatch(/\n {2}status {3}show the services/);
  });

  it("replicas-args - bad --replicas values fail with what is wrong", () => {
    const cases: Array<[string, string]> = [
      ["web=2", `--replicas "web=2": unknown service "web"; services: llm, tools, sandbox, skills, mcp, loop, gateway`],
      ["tools=x", `--replicas "tools=x": tools=x is not a whole number of processes`],
      ["tools=1.5", `--replicas "tools=1.5": tools=1.5 is not a whole number of processes`],
      ["tools=-1", `--replicas "tools=-1": tools=-1 is not a whole number of processes`],
      ["tools=0", `--replicas "tools=0": tools=0: a service needs at least 1 process`],
      ["tools=33", `--replicas "tools=33": tools=33: at most 32 processes per service`],
      ["tools", `--replicas "tools": "tools" is not SERVICE=N; write e.g. tools=3,loop=2`],
      ["tools=2,,loop=2", `--replicas "tools=2,,loop=2": "" is not SERVICE=N; write e.g. tools=3,loop=2`],
      ["=2", `--replicas "=2": "=2" is not SERVICE=N; write e.g. tools=3,loop=2`],
      ["tools=2,tools=3", `--replicas "tools=2,tools=3": tools is given twice`],
      ["gateway=2", `--replicas "gateway=2": the gateway runs once (it listens on one port, --port); run more Tacks behind a load balancer to scale it`],
      ["", `--replicas "": name at least one SERVICE=N, e.g. tools=3,loop=2`],
    ];
    for (const [value, message] of cases) {
      const error = failure(() => parseCommand(["up", "--replicas", value]));
      expect(error.code, value).toBe("cli.usage");
      expect(error.message, value).toBe(message);
      expect(error.details.usage, value).toMatch(/^Usage: tack up .*--replicas SERVICE=N/);
    }
    expect(failure(() => parseCommand(["up", "--replicas"])).message).toBe("option --replicas of tack up needs a value");
    expect(failure(() => parseCommand(["status", "--all"])).message).toBe("unknown option --all for tack status");
  });

  it("replicas-args - the tack executable exits 2 with the message before starting anything", () => {
    const result = spawnSync(process.execPath, [BIN, "up", "--replicas", "tools=0"], { cwd: scratch, encoding: "utf8", timeout: 30_000 });
    expect(result.status).toBe(2);
    expect(result.stderr).toMatch(/^tack: --replicas "tools=0": tools=0: a service needs at least 1 process\n\nUsage: tack up/);
    expect(spawnSync("ls", ["-A", scratch], { encoding: "utf8" }).stdout).toBe("");
  });
});
